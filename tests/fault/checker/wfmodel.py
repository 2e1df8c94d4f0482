"""What the workflow invariants read, normalised in one place: the step log, the
open waits and the inbox of every shard (migration 0016), the workflow code's
layout, and the fault app's records of step executions in the ledger.

Ledger lines of the fault app's workflow (tests/fault/app/app.py), each with
``task_id`` (the run), ``lease_epoch`` (the activation's lease), ``attempt`` (the
run's task attempt), ``pid`` and ``time``:

* ``phase: "step"``: a step's side effect starts (``position``, ``name``,
  ``step_attempt``: the claim's attempt as the SDK told the step function);
* ``phase: "step_end"``: it ended (``outcome``: ok | raise | fatal);
* ``phase: "step_done"``: the workflow code got the step's outcome back from
  ctx.step (``outcome`` ok | fatal; ``result_epoch``/``result_attempt``: the
  execution that produced the value it got). Written after the platform answered
  DONE, so the step was committed by then: any later claim is a re-execution of
  a committed step.

The layout (``run.json``'s ``workflow_layouts``: ``{workflow_type: [[name, KIND],
...]}``) is what the workflow code calls at each position; the harness copies it
from the app (``LAYOUTS``), so the checker and the app cannot drift apart unseen.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
from collections import defaultdict
from typing import Any

from .model import Run, Task, as_json, pick

STEP, VERSION, SLEEP, WAIT = "STEP", "VERSION", "SLEEP", "WAIT"
RUNNING, COMPLETED, FAILED = "RUNNING", "COMPLETED", "FAILED"
STEP_PHASES = ("step", "step_end", "step_done")


def when(value: Any) -> dt.datetime | None:
    """A dumped timestamp (ISO text, or a datetime in crafted runs)."""
    if value in (None, ""):
        return None
    if isinstance(value, dt.datetime):
        return value
    return dt.datetime.fromisoformat(str(value))


@dataclasses.dataclass(frozen=True)
class StepRow:
    """One row of workflow_steps."""

    run_id: str
    position: int
    name: str
    kind: str
    state: str
    lease_epoch: int
    attempt: int
    result: Any
    error_class: str | None
    fatal: bool
    wake_at: dt.datetime | None
    started: dt.datetime | None  # started_at: when the row was made or last claimed
    finished_at: dt.datetime | None
    shard: str

    def brief(self) -> dict:
        return {"pos": self.position, "name": self.name, "kind": self.kind, "state": self.state,
                "epoch": self.lease_epoch, "attempt": self.attempt, "error_class": self.error_class,
                "fatal": self.fatal, "result": self.result}


@dataclasses.dataclass(frozen=True)
class Execution:
    """One ledger line of a step (phase step, step_end or step_done)."""

    run_id: str
    phase: str
    position: int
    name: str | None
    lease_epoch: int
    step_attempt: int | None
    outcome: str | None
    time: float
    raw: dict


def _step_row(shard: str, row: dict) -> StepRow:
    return StepRow(
        run_id=str(pick(row, "workflow_id", "task_id")), position=int(row["position"]), name=str(row["name"]),
        kind=str(row["kind"]).upper(), state=str(row["state"]).upper(), lease_epoch=int(row["lease_epoch"]),
        attempt=int(row["attempt"]), result=as_json(row.get("result")), error_class=row.get("error_class"),
        fatal=bool(row.get("fatal")), wake_at=when(row.get("wake_at")), started=when(row.get("started_at")),
        finished_at=when(row.get("finished_at")), shard=shard)


def _execution(e: dict) -> Execution:
    attempt = e.get("step_attempt")
    return Execution(run_id=str(e["task_id"]), phase=str(e["phase"]), position=int(e["position"]),
                     name=e.get("name"), lease_epoch=int(e["lease_epoch"]),
                     step_attempt=None if attempt is None else int(attempt), outcome=e.get("outcome"),
                     time=float(e.get("time", 0)), raw=e)


class Workflows:
    """Every workflow run of a dump, with its step log, waits, inbox and step executions."""

    def __init__(self, run: Run):
        self.run = run
        self.layouts: dict[str, list[tuple[str, str]]] = {
            str(t): [(str(n), str(k).upper()) for n, k in steps]
            for t, steps in (run.meta.get("workflow_layouts") or {}).items()}
        self.steps: dict[str, dict[int, StepRow]] = defaultdict(dict)
        self.duplicate_steps: list[tuple[str, int]] = []
        for shard, row in run.dump.table("workflow_steps"):
            s = _step_row(shard, row)
            if s.position in self.steps[s.run_id]:
                self.duplicate_steps.append((s.run_id, s.position))
            self.steps[s.run_id][s.position] = s
        self.waits: dict[str, dict[int, dict]] = defaultdict(dict)
        for _, row in run.dump.table("workflow_waits"):
            self.waits[str(row["workflow_id"])][int(row["position"])] = row
        self.inbox: dict[str, list[dict]] = defaultdict(list)
        for _, row in run.dump.table("workflow_inbox"):
            self.inbox[str(row["workflow_id"])].append({**row, "data": as_json(row.get("data"))})
        self.executions: dict[str, list[Execution]] = defaultdict(list)
        for e in run.ledger:
            if e.get("phase") in STEP_PHASES:
                x = _execution(e)
                self.executions[x.run_id].append(x)

    @classmethod
    def of(cls, run: Run) -> Workflows:
        """The view of a run, built once and kept on it (every workflow invariant reads it)."""
        view = getattr(run, "_workflows", None)
        if view is None:
            view = cls(run)
            run._workflows = view  # type: ignore[attr-defined]  # a memo on the run, not a field of it
        return view

    def task_type(self, task: Task | None) -> str | None:
        return None if task is None else pick(task.row, "task_type")

    def run_ids(self) -> list[str]:
        """Every run: a task of a workflow type, or anything with a step row or a step execution."""
        ids = {t.task_id for t in self.run.dump.tasks.values() if self.task_type(t) in self.layouts}
        return sorted(ids | set(self.steps) | set(self.executions))

    def log(self, run_id: str) -> list[StepRow]:
        return [self.steps[run_id][p] for p in sorted(self.steps.get(run_id, {}))]

    def runs_of(self, run_id: str, phase: str, position: int | None = None) -> list[Execution]:
        """The run's ledger lines of one phase (at one position), by lease epoch then time."""
        out = [x for x in self.executions.get(run_id, []) if x.phase == phase
               and (position is None or x.position == position)]
        return sorted(out, key=lambda x: (x.lease_epoch, x.time))

    def leases(self, run_id: str) -> dict[int, Any]:
        """{lease epoch: the transition that granted it}."""
        return {t.lease_epoch: t for t in self.run.dump.transitions.get(run_id, [])
                if t.to_state == "LEASED" and t.lease_epoch is not None}

    def attempt_of(self, run_id: str, epoch: int):
        return next((a for a in self.run.dump.attempts.get(run_id, []) if a.lease_epoch == epoch), None)

    def evidence(self, run_id: str, position: int | None = None) -> dict:
        """A counterexample's workflow slices: the step log, the step ledger lines, waits and inbox."""
        lines = [x.raw for x in self.executions.get(run_id, []) if position is None or x.position == position]
        return {"steps": [s.brief() for s in self.log(run_id)], "step_ledger": lines[:30],
                "waits": list(self.waits.get(run_id, {}).values()), "inbox": self.inbox.get(run_id, [])[:10]}
