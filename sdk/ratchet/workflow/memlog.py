"""One run's step log in memory, answering step requests by history's rules.

ratchet.testing runs workflows against it, so a workflow under test meets the
same answers as on the platform (docs/design/workflows-protocol.md, "Step
semantics" and "Fan-out"): memoized steps, claims and their attempts, version
markers and ABSENT, sleeps and waits that suspend, the inbox, timeouts, fan-outs
and their barrier, compensations (on_cancel rows; once `cancelled`, CANCELLED at
the first checkpoint the run had not passed, and compensate steps), MISMATCH
when the code no longer matches the log, and a begin's DONE reading the completed
entries after it ahead ("ahead", as StepResponse.ahead), so the context's local
answers are exercised in-process too. Time is the caller's clock, in seconds.
"""

from __future__ import annotations

import dataclasses
import json
from typing import Any

from ratchet.workflow import channel as ch

# StepResponse.ahead's page: at most this many entries and bytes of results, of these kinds.
AHEAD_ROWS = 500
AHEAD_BYTES = 1024 * 1024
AHEAD_KINDS = frozenset({"step", "version", "sleep", "wait", "on_cancel"})
RUNNING = "RUNNING"
COMPLETED = "COMPLETED"
FAILED = "FAILED"


@dataclasses.dataclass
class StepRecord:
    """One entry of a run's log: `kind` is "step", "version", "sleep", "wait", "parallel",
    "child", "on_cancel" (a registered compensation; result: its logged arguments) or
    "compensate" (one that ran after a cancel); `status` RUNNING, COMPLETED or FAILED (as
    history stores them); `result` the decoded value (a step's return, a version's branch,
    a wait's event data); `wake_at` when a sleep or a wait's timeout ends, on the log's
    clock (seconds). A fan-out has
    `child_ids` (by index), `on_failure`, and `children_done` (each ended child's outcome
    by index: index, child_id, state, result JSON text, error)."""

    position: int
    name: str
    kind: str
    status: str
    attempt: int = 1
    epoch: int = 0
    result_json: str | None = None
    error: dict | None = None
    fatal: bool = False
    wake_at: float | None = None
    match: dict | None = None
    waiting: bool = False  # a wait's open `workflow_waits` row
    child_ids: list[str] | None = None
    child_specs: list[dict] | None = None
    on_failure: str | None = None
    children_done: dict[int, dict] = dataclasses.field(default_factory=dict)

    @property
    def child_count(self) -> int:
        """How many children a fan-out has (0 for other kinds)."""
        return len(self.child_ids or ())

    def record_child(self, outcome: dict) -> bool:
        """A child's end reaches the barrier (once per index); True when it fires it: every
        child ended (collect), or the first one that did not succeed (fail_fast)."""
        index = outcome["index"]
        if index in self.children_done:
            return False  # a redelivery
        self.children_done[index] = outcome
        if self.status != RUNNING:
            return False  # a sibling's end after the step completed: recorded, harmless
        fired = len(self.children_done) == self.child_count or (
            self.on_failure == "fail_fast" and outcome["state"] != "SUCCEEDED")
        if fired:
            self.status = COMPLETED
        return fired

    @property
    def result(self) -> Any:
        """The logged value, decoded (None while there is none)."""
        return None if self.result_json is None else json.loads(self.result_json)


@dataclasses.dataclass
class InboxEvent:
    """An event sent to the run: consumed_by is the position of the wait that took it."""

    name: str
    data_json: str
    consumed_by: int | None = None

    @property
    def data(self) -> Any:
        """The event's data, decoded."""
        return json.loads(self.data_json)


def contains(data: Any, match: Any) -> bool:
    """Postgres's jsonb `data @> match`: every field of match is in data, recursively; an
    array contains another when each of the other's elements is in one of its own."""
    if isinstance(match, dict):
        return isinstance(data, dict) and all(k in data and contains(data[k], v) for k, v in match.items())
    if isinstance(match, list):
        return isinstance(data, list) and all(any(contains(d, m) for d in data) for m in match)
    if isinstance(match, bool) or isinstance(data, bool):
        return type(match) is type(data) and match == data  # (True is not 1 in jsonb)
    return data == match


def reply(status: str, **fields: Any) -> dict:
    """A step reply with every field present."""
    out: dict = {"status": status, "attempt": 0, "result": None, "error": None, "wake_after_s": None,
                 "logged_name": None, "logged_kind": None, "message": None, "compensate_from": None}
    out.update(fields)
    return out


def _timeout_error(name: str) -> dict:
    return {"error_class": "TimeoutError", "message": f"no event {name!r} came before the wait's timeout",
            "stack": ""}


class StepLog:
    """The log (`steps`, by position) and the inbox of one run."""

    def __init__(self, run_id: str = "run") -> None:
        self.run_id = run_id
        self.steps: list[StepRecord] = []
        self.inbox: list[InboxEvent] = []
        # The run was cancelled and has compensations (history's workflow_cancels row).
        self.cancelled = False

    def answer(self, request: dict, epoch: int, now: float) -> dict:
        """The reply to one step request of the activation holding lease `epoch`; a begin's
        DONE carries the completed entries logged after it ("ahead")."""
        out = self._answer(request, epoch, now)
        if out["status"] == ch.DONE and request.get("op") == "begin":
            out["ahead"] = self.ahead(request["position"]) or None
        return out

    def ahead(self, position: int) -> list[dict]:
        """The completed entries right after position, in order without a gap, up to the first
        that is not (or of a kind not read ahead), at most AHEAD_ROWS and AHEAD_BYTES."""
        out: list[dict] = []
        size = 0
        for row in self.steps[position + 1:position + 1 + AHEAD_ROWS]:
            size += len((row.result_json or "").encode("utf-8"))
            if row.status != COMPLETED or row.kind not in AHEAD_KINDS or size > AHEAD_BYTES:
                break
            out.append({"position": row.position, "name": row.name, "kind": row.kind, "attempt": row.attempt,
                        "result": row.result_json})
        return out

    def _answer(self, request: dict, epoch: int, now: float) -> dict:
        position = request.get("position")
        if not isinstance(position, int) or not 0 <= position <= len(self.steps):
            return reply(ch.ERROR, message=f"position {position!r} is not in 0..{len(self.steps)} "
                                           f"(positions are dense)")
        if request.get("op") == "commit":
            return self._commit(request, epoch)
        row = self.steps[position] if position < len(self.steps) else None
        kind, name = request["kind"], request["name"]
        if kind in ("on_cancel", "compensate"):
            return self._compensation(row, request, epoch)
        if self.cancelled and _not_passed(row):
            # The run stops here; nothing written. The compensations take the positions from
            # here when the log has nothing (or a compensation) here, else from the next one:
            # the checkpoint left open here keeps its entry (StepResponse.compensate_from).
            start = position if row is None or row.kind == "compensate" else position + 1
            return reply(ch.CANCELLED, compensate_from=start)
        if kind == "version":
            return self._version(row, request, epoch)
        if row is not None and (row.name != name or row.kind != kind):
            return reply(ch.MISMATCH, logged_name=row.name, logged_kind=row.kind)
        if kind == "step":
            return self._step(row, request, epoch)
        if kind == "sleep":
            return self._sleep(row, request, epoch, now)
        if kind in ("parallel", "child"):
            return self._fan_out(row, request, epoch)
        return self._wait(row, request, epoch, now)

    def _version(self, row: StepRecord | None, request: dict, epoch: int) -> dict:
        if row is None:
            row = self._append(request, COMPLETED, epoch, result_json=json.dumps(request["version"]))
            return reply(ch.DONE, attempt=1, result=row.result_json)
        if row.kind == "version" and row.name == request["name"]:
            return reply(ch.DONE, attempt=row.attempt, result=row.result_json)
        return reply(ch.ABSENT)  # the run passed this point before the marker existed; nothing written

    def _step(self, row: StepRecord | None, request: dict, epoch: int) -> dict:
        if row is None:
            row = self._append(request, RUNNING, epoch)
            return reply(ch.RUN, attempt=1)
        if row.status == COMPLETED:
            return reply(ch.DONE, attempt=row.attempt, result=row.result_json)
        if row.status == FAILED and row.fatal:
            return reply(ch.DONE, attempt=row.attempt, error=row.error)
        if row.status == FAILED or row.epoch != epoch:  # a retry, or a claim a lost lease left
            row.status, row.attempt, row.epoch, row.error = RUNNING, row.attempt + 1, epoch, None
        return reply(ch.RUN, attempt=row.attempt)

    def _compensation(self, row: StepRecord | None, request: dict, epoch: int) -> dict:
        """on_cancel: present or new, like a version marker (logged COMPLETED with its
        arguments). compensate: a step, allowed only once the run is cancelled, at the
        positions from the CANCELLED answer's compensate_from on."""
        if request["kind"] == "on_cancel":
            if row is None:
                row = self._append(request, COMPLETED, epoch, result_json=request.get("result"))
                return reply(ch.DONE, attempt=1, result=row.result_json)
            if row.kind == "on_cancel" and row.name == request["name"]:
                return reply(ch.DONE, attempt=row.attempt, result=row.result_json)
            return reply(ch.MISMATCH, logged_name=row.name, logged_kind=row.kind)
        if not self.cancelled:
            return reply(ch.LOST, message="the run is not cancelled")
        if row is not None and (row.name != request["name"] or row.kind != "compensate"):
            return reply(ch.MISMATCH, logged_name=row.name, logged_kind=row.kind)
        return self._step(row, request, epoch)

    def _commit(self, request: dict, epoch: int) -> dict:
        position = request["position"]
        row = self.steps[position] if position < len(self.steps) else None
        if (row is None or row.kind != request["kind"] or row.kind not in ("step", "compensate")
                or row.name != request["name"] or row.epoch != epoch):
            return reply(ch.LOST, message=f"no claim of step {request['name']!r} at position {position} under "
                                          f"lease {epoch}")
        error = request.get("error")
        if row.status == RUNNING and error:
            row.status, row.error, row.fatal = FAILED, error, bool(request.get("fatal"))
        elif row.status == RUNNING:
            row.status, row.result_json = COMPLETED, request.get("result")
        return reply(ch.DONE, attempt=row.attempt)  # (a resend of the same commit answers DONE too)

    def _sleep(self, row: StepRecord | None, request: dict, epoch: int, now: float) -> dict:
        if row is None:
            duration = float(request.get("duration_s") or 0.0)
            if duration <= 0:
                self._append(request, COMPLETED, epoch)
                return reply(ch.DONE, attempt=1)
            row = self._append(request, RUNNING, epoch, wake_at=now + duration)
        if row.status == COMPLETED:
            return reply(ch.DONE, attempt=row.attempt)
        if row.wake_at is not None and row.wake_at <= now:
            row.status = COMPLETED
            return reply(ch.DONE, attempt=row.attempt)
        return reply(ch.SUSPEND, attempt=row.attempt, wake_after_s=_after(row.wake_at, now))

    def _wait(self, row: StepRecord | None, request: dict, epoch: int, now: float) -> dict:
        if row is None:
            return self._first_wait(request, epoch, now)
        if row.status == COMPLETED:
            return reply(ch.DONE, attempt=row.attempt, result=row.result_json)
        if row.status == FAILED:
            return reply(ch.DONE, attempt=row.attempt, error=row.error)
        if row.wake_at is not None and row.wake_at <= now:
            row.status, row.error, row.fatal, row.waiting = FAILED, _timeout_error(row.name), True, False
            return reply(ch.DONE, attempt=row.attempt, error=row.error)
        event = next((e for e in self.inbox if e.consumed_by is None and e.name == row.name
                      and contains(e.data, row.match or {})), None)
        if event is not None:
            self._consume(row, event)
            return reply(ch.DONE, attempt=row.attempt, result=row.result_json)
        return reply(ch.SUSPEND, attempt=row.attempt, wake_after_s=_after(row.wake_at, now))

    def _first_wait(self, request: dict, epoch: int, now: float) -> dict:
        """A wait reached for the first time: the oldest matching event of the inbox, else a
        RUNNING row with its open wait (an event sent earlier counts; a broadcast does not)."""
        match = json.loads(request["match"]) if request.get("match") else {}
        event = next((e for e in self.inbox if e.consumed_by is None and e.name == request["name"]
                      and contains(e.data, match)), None)
        timeout = request.get("duration_s")
        row = self._append(request, RUNNING, epoch, match=match, waiting=True,
                           wake_at=None if timeout is None else now + float(timeout))
        if event is not None:
            self._consume(row, event)
            return reply(ch.DONE, attempt=row.attempt, result=row.result_json)
        return reply(ch.SUSPEND, attempt=row.attempt, wake_after_s=_after(row.wake_at, now))

    def _fan_out(self, row: StepRecord | None, request: dict, epoch: int) -> dict:
        """RUN with the children's ids while the barrier is open (the caller starts them, as
        the agent does with StartChildren, and suspends), DONE with their outcomes after."""
        specs = list(request.get("children") or [])
        if row is None:
            ids = [child_id(self.run_id, len(self.steps), i) for i in range(len(specs))]
            row = self._append(request, RUNNING, epoch, child_ids=ids, child_specs=specs,
                               on_failure=request.get("on_failure") or "collect")
        elif row.child_count != len(specs):
            return reply(ch.MISMATCH, logged_name=row.name, logged_kind=row.kind)
        if row.status == COMPLETED:
            done = [row.children_done[i] for i in sorted(row.children_done)]
            return reply(ch.DONE, attempt=row.attempt, children=done)
        return reply(ch.RUN, attempt=row.attempt, child_ids=list(row.child_ids or ()))

    def _append(self, request: dict, status: str, epoch: int, **fields: Any) -> StepRecord:
        row = StepRecord(position=len(self.steps), name=request["name"], kind=request["kind"], status=status,
                         epoch=epoch, **fields)
        self.steps.append(row)
        return row

    def _consume(self, row: StepRecord, event: InboxEvent) -> None:
        row.status, row.result_json, row.waiting = COMPLETED, event.data_json, False
        event.consumed_by = row.position

    def open_wait(self, name: str, data: Any, now: float) -> StepRecord | None:
        """The wait an event `name` with data would complete now: open, its match contained
        in data, its timeout not passed."""
        for row in self.steps:
            if (row.waiting and row.name == name and (row.wake_at is None or row.wake_at > now)
                    and contains(data, row.match or {})):
                return row
        return None

    def deliver(self, name: str, data_json: str, now: float) -> bool:
        """An event sent to this run (the inbox): it completes the open wait it matches, if
        any (True), else stays for a later wait of that name (False)."""
        event = InboxEvent(name, data_json)
        self.inbox.append(event)
        row = self.open_wait(name, event.data, now)
        if row is None:
            return False
        self._consume(row, event)
        return True

    def offer(self, name: str, data_json: str, now: float) -> bool:
        """A broadcast: completes the open wait it matches (True); else it is not kept."""
        row = self.open_wait(name, json.loads(data_json), now)
        if row is None:
            return False
        row.status, row.result_json, row.waiting = COMPLETED, data_json, False
        return True

    def close_waits(self) -> None:
        """The run ended or was cancelled: its waits are deleted."""
        for row in self.steps:
            row.waiting = False


def _not_passed(row: StepRecord | None) -> bool:
    """Whether a cancelled run stops at this row: the run had not passed it (absent, still
    RUNNING, or failed retryably), or an earlier activation's compensations began there."""
    return row is None or row.kind == "compensate" or row.status == RUNNING or (row.status == FAILED
                                                                                and not row.fatal)


def child_id(run_id: str, position: int, index: int) -> str:
    """A child's id, minted from (run, position, index) as history does, so a repeated
    begin names the same children (readable here: "<run>.<position>.<index>")."""
    return f"{run_id}.{position}.{index}"


def _after(wake_at: float | None, now: float) -> float | None:
    return None if wake_at is None else max(0.0, wake_at - now)
