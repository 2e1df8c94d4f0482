"""What the checker reads: the client history, the execution ledger and the
final dump of every shard database, normalised into plain records.

Formats (one JSON object per line for the two streams):

* history: ``{process, type: invoke|ok|fail|info, f, value, time}``. Client
  operations are ``enqueue`` (value: ``{op, key?, mode?, ...}``; ok value
  ``{op, task_id}``), ``enqueue_batch`` (value ``{items: [...]}``; ok value
  ``{task_ids: [...]}``), ``get`` (ok value ``{task_id, state, version}``),
  ``cancel`` (ok value ``{task_id, state}``); workflows: ``start_workflow`` (as
  ``enqueue``: value ``{op, workflow_type, ...}``, ok value ``{op, task_id}``),
  ``send_workflow_event`` (value ``{task_id, name, data}``). The process ``nemesis`` logs
  fault actions in the same stream; its ``heal`` op marks the final heal.
* ledger: ``{task_id, attempt, lease_epoch, pid, time, phase, ...}`` appended
  by the test handlers; phase ``start`` is one execution, ``end`` carries
  ``outcome`` (ok | raise | fatal | cancelled).
* dump: ``{db_now?, shards: {shard_id: {table: [row, ...]}}}`` with the rows of
  ``tasks``, ``task_attempts``, ``task_transitions``, ``timers`` and
  ``idempotency_keys`` (and whatever later capabilities add), plus ``cron``:
  ``{db_now, schedules: [...], schedule_slots: [...]}`` from the cron database
  when the run had schedules (read by ``cronmodel``). The history's process
  ``cron_admin`` logs ``schedule_create`` / ``schedule_pause``.

Column names and enum spellings are normalised here, in one place, so the
invariants do not care whether a state is stored as 'LEASED', 'TASK_STATE_LEASED'
or 2.
"""

from __future__ import annotations

import dataclasses
import json
import pathlib
from collections import defaultdict
from collections.abc import Iterable
from typing import Any

NEMESIS = "nemesis"
_STATES = ["UNSPECIFIED", "ENQUEUED", "LEASED", "RETRY_WAIT", "SUCCEEDED", "FAILED", "CANCELED", "EXPIRED", "WAITING"]
_OUTCOMES = ["UNSPECIFIED", "RUNNING", "SUCCEEDED", "FAILED", "LEASE_EXPIRED", "TIMED_OUT", "CRASHED", "CANCELED",
             "SUSPENDED"]
# Client operations that ask for one task: a workflow run is a task (its start is an enqueue of it).
SINGLE_ENQUEUES = ("enqueue", "start_workflow")


def norm_state(value: Any) -> str | None:
    """'LEASED', 'leased', 'TASK_STATE_LEASED' or 2 -> 'LEASED'; None/'' -> None."""
    return _norm_enum(value, _STATES, "TASK_STATE_")


def norm_outcome(value: Any) -> str | None:
    """Attempt outcome names the same way ('ATTEMPT_OUTCOME_CRASHED' -> 'CRASHED')."""
    return _norm_enum(value, _OUTCOMES, "ATTEMPT_OUTCOME_")


def _norm_enum(value: Any, names: list[str], prefix: str) -> str | None:
    if value is None or value == "":
        return None
    if isinstance(value, bool):
        raise ValueError(f"not an enum value: {value!r}")
    if isinstance(value, int):
        return names[value] if 0 <= value < len(names) else str(value)
    text = str(value).strip().upper()
    if text in ("NULL", "NONE", "CREATE", "(CREATE)"):
        return None
    return text.removeprefix(prefix)


def pick(row: dict, *names: str, default: Any = None) -> Any:
    """The first of several possible column names present in a row."""
    for name in names:
        if name in row and row[name] is not None:
            return row[name]
    return default


def as_json(value: Any) -> Any:
    """A JSON column that may arrive as text, bytes, or already parsed."""
    if isinstance(value, (bytes, bytearray)):
        value = value.decode()
    if isinstance(value, str):
        try:
            return json.loads(value)
        except ValueError:
            return value
    return value


def _int(value: Any, default: int | None = None) -> int | None:
    return default if value is None else int(value)


@dataclasses.dataclass
class Op:
    """One client operation: its invoke and its completion, paired."""

    index: int
    process: str
    f: str
    type: str  # ok | fail | info (an invoke with no completion becomes info)
    invoke_time: float
    complete_time: float | None
    value: Any  # the invoke's value
    result: Any  # the completion's value

    @property
    def ok(self) -> bool:
        return self.type == "ok"

    def brief(self) -> dict:
        return {"process": self.process, "f": self.f, "type": self.type, "time": self.invoke_time,
                "value": self.value, "result": self.result}


@dataclasses.dataclass
class EnqueueItem:
    """One task a client asked for (one item of a batch counts as one)."""

    op: Op
    op_id: str
    request: dict
    task_id: str | None  # known when the op was acknowledged

    @property
    def key(self) -> str | None:
        return self.request.get("key") or self.request.get("idempotency_key")


@dataclasses.dataclass
class Task:
    task_id: str
    shard: str
    state: str | None
    version: int | None
    attempt: int | None
    max_attempts: int | None
    lease_epoch: int | None
    payload: Any
    result: Any
    idempotency_key: str | None
    tenant_id: str | None
    app_id: str | None
    cancel_requested: bool
    row: dict
    schedule_id: str | None = None  # set when a cron schedule fired the task
    scheduled_time: Any = None  # the slot it fired for (as dumped: ISO text or a datetime)

    @property
    def op_id(self) -> str | None:
        return self.payload.get("op") if isinstance(self.payload, dict) else None


@dataclasses.dataclass
class Transition:
    task_id: str
    version: int
    from_state: str | None
    to_state: str | None
    lease_epoch: int | None
    at: Any
    reason: str | None

    def brief(self) -> dict:
        return {"v": self.version, "from": self.from_state, "to": self.to_state,
                "epoch": self.lease_epoch, "at": self.at, "reason": self.reason}


@dataclasses.dataclass
class Attempt:
    task_id: str
    attempt: int
    lease_epoch: int | None
    outcome: str | None
    error_class: str | None
    row: dict

    def brief(self) -> dict:
        return {"attempt": self.attempt, "epoch": self.lease_epoch, "outcome": self.outcome,
                "error_class": self.error_class}


def _task(row: dict, shard: str) -> Task:
    return Task(
        task_id=str(pick(row, "task_id", "id")), shard=shard,
        state=norm_state(pick(row, "state")), version=_int(pick(row, "version")),
        attempt=_int(pick(row, "attempt", "attempts")), max_attempts=_int(pick(row, "max_attempts")),
        lease_epoch=_int(pick(row, "lease_epoch")),
        payload=as_json(pick(row, "payload", "payload_json")),
        result=as_json(pick(row, "result", "result_json")),
        idempotency_key=pick(row, "idempotency_key") or None,
        tenant_id=pick(row, "tenant_id"), app_id=pick(row, "app_id"),
        cancel_requested=bool(pick(row, "cancel_requested", default=False)), row=row,
        schedule_id=pick(row, "schedule_id") or None, scheduled_time=pick(row, "scheduled_time"))


def _transition(row: dict) -> Transition:
    return Transition(
        task_id=str(row["task_id"]), version=int(pick(row, "version", "seq")),
        from_state=norm_state(pick(row, "from_state", "from")), to_state=norm_state(pick(row, "to_state", "to")),
        lease_epoch=_int(pick(row, "lease_epoch")), at=pick(row, "at", "created_at"),
        reason=pick(row, "reason", "error_class"))


def _attempt(row: dict) -> Attempt:
    return Attempt(task_id=str(row["task_id"]), attempt=int(pick(row, "attempt", "attempt_no")),
                   lease_epoch=_int(pick(row, "lease_epoch")), outcome=norm_outcome(pick(row, "outcome")),
                   error_class=pick(row, "error_class"), row=row)


class Dump:
    """Every shard's rows, merged and indexed by task."""

    def __init__(self, raw: dict):
        self.raw = raw
        self.db_now = raw.get("db_now")
        self.shards: dict[str, dict[str, list[dict]]] = {str(k): v for k, v in raw.get("shards", {}).items()}
        self.tasks: dict[str, Task] = {}
        self.duplicate_rows: list[tuple[str, list[str]]] = []  # task ids present on more than one shard
        self.transitions: dict[str, list[Transition]] = defaultdict(list)
        self.attempts: dict[str, list[Attempt]] = defaultdict(list)
        self.timers: dict[str, list[dict]] = defaultdict(list)
        seen: dict[str, list[str]] = defaultdict(list)
        for shard, tables in self.shards.items():
            for row in tables.get("tasks", []):
                task = _task(row, shard)
                seen[task.task_id].append(shard)
                self.tasks.setdefault(task.task_id, task)
            for row in tables.get("task_transitions", []):
                tr = _transition(row)
                self.transitions[tr.task_id].append(tr)
            for row in tables.get("task_attempts", []):
                at = _attempt(row)
                self.attempts[at.task_id].append(at)
            for row in tables.get("timers", []):
                if pick(row, "task_id"):
                    self.timers[str(row["task_id"])].append(row)
        self.duplicate_rows = [(t, s) for t, s in seen.items() if len(s) > 1]
        for log in self.transitions.values():
            log.sort(key=lambda t: t.version)
        for rows in self.attempts.values():
            rows.sort(key=lambda a: a.attempt)

    def table(self, name: str) -> Iterable[tuple[str, dict]]:
        """Every row of a table on every shard, as (shard, row): for later checkers."""
        for shard, tables in self.shards.items():
            for row in tables.get(name, []):
                yield shard, row

    def task_by_op(self) -> dict[str, list[Task]]:
        by_op: dict[str, list[Task]] = defaultdict(list)
        for task in self.tasks.values():
            if task.op_id is not None:
                by_op[task.op_id].append(task)
        return by_op


def read_jsonl(path: pathlib.Path) -> list[dict]:
    """A JSONL file; a torn last line (the writer was killed mid-write) is skipped."""
    if not path.exists():
        return []
    out = []
    lines = path.read_text().splitlines()
    for n, line in enumerate(lines):
        line = line.strip()
        if not line:
            continue
        try:
            out.append(json.loads(line))
        except ValueError:
            if n == len(lines) - 1:
                continue  # a write cut short by SIGKILL: at most the last line
            raise ValueError(f"{path}:{n + 1}: not JSON: {line[:120]}") from None
    return out


def pair_ops(events: list[dict]) -> tuple[list[Op], list[dict]]:
    """Pair each invoke with the next completion of the same process (a process
    has at most one operation in flight). Returns (client ops, nemesis events)."""
    ops: list[Op] = []
    nemesis: list[dict] = []
    open_: dict[str, Op] = {}
    for ev in events:
        proc = str(ev.get("process"))
        if proc == NEMESIS:
            nemesis.append(ev)
            continue
        kind = ev.get("type")
        if kind == "invoke":
            if proc in open_:  # a process that invoked twice: the first never completed
                open_.pop(proc).type = "info"
            op = Op(len(ops), proc, ev.get("f"), "info", float(ev.get("time", 0)), None, ev.get("value"), None)
            ops.append(op)
            open_[proc] = op
        elif kind in ("ok", "fail", "info"):
            op = open_.pop(proc, None)
            if op is None:
                raise ValueError(f"completion without invoke: {ev}")
            op.type, op.complete_time, op.result = kind, float(ev.get("time", 0)), ev.get("value")
        else:
            raise ValueError(f"unknown history event type {kind!r}: {ev}")
    return ops, nemesis


def enqueue_items(ops: list[Op]) -> list[EnqueueItem]:
    """Every task asked for, one per single enqueue and one per batch item."""
    items: list[EnqueueItem] = []
    for op in ops:
        if op.f in SINGLE_ENQUEUES:
            req = op.value or {}
            tid = (op.result or {}).get("task_id") if op.ok else None
            items.append(EnqueueItem(op, str(req.get("op")), req, tid))
        elif op.f == "enqueue_batch":
            reqs = (op.value or {}).get("items", [])
            ids = (op.result or {}).get("task_ids", []) if op.ok else []
            for i, req in enumerate(reqs):
                items.append(EnqueueItem(op, str(req.get("op")), req, ids[i] if i < len(ids) else None))
    return items


@dataclasses.dataclass
class Run:
    """Everything one checker run looks at."""

    ops: list[Op]
    nemesis: list[dict]
    ledger: list[dict]
    dump: Dump
    meta: dict

    @classmethod
    def load(cls, run_dir: str | pathlib.Path) -> Run:
        d = pathlib.Path(run_dir)
        ops, nemesis = pair_ops(read_jsonl(d / "history.jsonl"))
        dump = json.loads((d / "dump.json").read_text()) if (d / "dump.json").exists() else {"shards": {}}
        meta = json.loads((d / "run.json").read_text()) if (d / "run.json").exists() else {}
        meta.setdefault("run_dir", str(d))
        return cls(ops, nemesis, read_jsonl(d / "ledger.jsonl"), Dump(dump), meta)

    @classmethod
    def from_parts(cls, history: list[dict], ledger: list[dict], dump: dict, meta: dict | None = None) -> Run:
        ops, nemesis = pair_ops(history)
        return cls(ops, nemesis, ledger, Dump(dump), dict(meta or {}))

    # -- derived views, computed once -------------------------------------
    @property
    def items(self) -> list[EnqueueItem]:
        if not hasattr(self, "_items"):
            self._items = enqueue_items(self.ops)
        return self._items

    def ledger_by_task(self) -> dict[str, list[dict]]:
        if not hasattr(self, "_ledger_by_task"):
            by: dict[str, list[dict]] = defaultdict(list)
            for e in self.ledger:
                by[str(e.get("task_id"))].append(e)
            self._ledger_by_task = by
        return self._ledger_by_task

    def ops_for_task(self, task_id: str) -> list[Op]:
        out = []
        for op in self.ops:
            v, r = op.value or {}, op.result or {}
            ids = {v.get("task_id") if isinstance(v, dict) else None, r.get("task_id") if isinstance(r, dict) else None}
            if isinstance(r, dict):
                ids.update(r.get("task_ids") or [])
            if task_id in ids:
                out.append(op)
        return out

    def created_schedules(self) -> dict[str, dict]:
        """{schedule_id: the create's result} for every schedule the harness created."""
        return {str(op.result["schedule_id"]): op.result for op in self.ops
                if op.f == "schedule_create" and op.ok and isinstance(op.result, dict)
                and op.result.get("schedule_id")}

    def final_heal_time(self) -> float | None:
        heals = [float(e.get("time", 0)) for e in self.nemesis if e.get("f") == "heal"]
        return max(heals) if heals else None
