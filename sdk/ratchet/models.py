"""What the client returns: plain, immutable records with `to_dict()`.

States and kinds are short upper-case names ("FAILED", "RETRY", "OPEN");
timestamps are aware UTC datetimes; payloads, results and checkpoints are
plain JSON values.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
from typing import Any

TERMINAL_STATES = frozenset({"SUCCEEDED", "FAILED", "CANCELED", "EXPIRED"})
OVERLAP_POLICIES = ("allow", "skip", "cancel_previous", "buffer_one")


def jsonable(value: Any) -> Any:
    """value with datetimes as ISO 8601 strings, ready for json.dumps."""
    if isinstance(value, dict):
        return {k: jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [jsonable(v) for v in value]
    if isinstance(value, dt.datetime):
        return value.isoformat()
    return value


class _Record:
    def to_dict(self) -> dict:
        """A JSON-ready dict (timestamps as ISO 8601 strings)."""
        return jsonable(dataclasses.asdict(self))  # type: ignore[call-overload]  # subclasses are dataclasses


@dataclasses.dataclass(frozen=True)
class TaskError(_Record):
    """Why an attempt or a task failed."""

    error_class: str
    message: str
    stack: str = ""


@dataclasses.dataclass(frozen=True)
class AttemptInfo(_Record):
    """One attempt: who ran it, when, and how it ended (outcome like "FAILED")."""

    attempt: int
    lease_epoch: int
    worker_id: str
    outcome: str
    started_at: dt.datetime | None
    finished_at: dt.datetime | None
    error: TaskError | None


@dataclasses.dataclass(frozen=True)
class TaskInfo(_Record):
    """A task as its owner sees it. `state` is a name like "SUCCEEDED".

    `schedule_id`/`scheduled_time` are set when a schedule fired it,
    `checkpoint` is the last value a handler stored with ctx.checkpoint(),
    `retried_as`/`retry_of` link a bulk retry's new task and its original,
    `parent_workflow_id` names the run whose fan-out (ctx.parallel, ctx.child) started it.
    """

    task_id: str
    task_type: str
    queue: str
    state: str
    attempt: int
    max_attempts: int
    version: int
    payload: Any
    result: Any
    error: TaskError | None
    idempotency_key: str
    cancel_requested: bool
    created_at: dt.datetime | None
    run_at: dt.datetime | None
    updated_at: dt.datetime | None
    started_at: dt.datetime | None
    finished_at: dt.datetime | None
    retry: dict
    timeouts: dict
    attempts: list[AttemptInfo]
    schedule_id: str | None = None
    scheduled_time: dt.datetime | None = None
    checkpoint: Any = None
    retried_as: str | None = None
    retry_of: str | None = None
    parent_workflow_id: str | None = None

    @property
    def terminal(self) -> bool:
        return self.state in TERMINAL_STATES

    @property
    def succeeded(self) -> bool:
        return self.state == "SUCCEEDED"


@dataclasses.dataclass(frozen=True)
class TaskPage(_Record):
    """One page of a search; pass next_page_token (None on the last page) to get the next."""

    tasks: list[TaskInfo]
    next_page_token: str | None


@dataclasses.dataclass(frozen=True)
class ItemFailure(_Record):
    """A task a bulk operation could not process, and why."""

    task_id: str
    reason: str


@dataclasses.dataclass(frozen=True)
class OperationInfo(_Record):
    """A bulk retry or cancel: `kind` "RETRY"/"CANCEL", `state` "RUNNING",
    "SUCCEEDED" (every item processed; some may have failed) or "CANCELED"."""

    operation_id: str
    kind: str
    state: str
    filter: dict
    matched: int
    processed: int
    succeeded: int
    failed: int
    skipped: int
    failures: list[ItemFailure]
    created_at: dt.datetime | None
    finished_at: dt.datetime | None

    @property
    def done(self) -> bool:
        return self.state != "RUNNING"


@dataclasses.dataclass(frozen=True)
class BulkResult(_Record):
    """What retry_tasks / cancel_tasks answered: the count, and the operation unless a dry run."""

    matched: int
    operation: OperationInfo | None


@dataclasses.dataclass(frozen=True)
class ScheduleInfo(_Record):
    """A cron schedule. `overlap_policy` is "allow", "skip", "cancel_previous"
    or "buffer_one"; `state` "ACTIVE" or "PAUSED"."""

    schedule_id: str
    cron: str
    timezone: str
    task_type: str
    payload: Any
    queue: str
    retry: dict
    timeouts: dict
    overlap_policy: str
    catchup_window_s: float | None
    state: str
    next_fire_time: dt.datetime | None
    last_fire_time: dt.datetime | None
    last_task_id: str | None
    created_at: dt.datetime | None
    updated_at: dt.datetime | None


@dataclasses.dataclass(frozen=True)
class SchedulePage(_Record):
    """One page of schedules."""

    schedules: list[ScheduleInfo]
    next_page_token: str | None


@dataclasses.dataclass(frozen=True)
class TriggerResult(_Record):
    """The task a trigger enqueued; `skipped` when the overlap policy held it back."""

    task_id: str | None
    skipped: bool


@dataclasses.dataclass(frozen=True)
class BreakerCrash(_Record):
    """A recent sandbox crash on a breaker's task type."""

    task_id: str
    error_class: str
    message: str
    at: dt.datetime | None


@dataclasses.dataclass(frozen=True)
class BreakerInfo(_Record):
    """A circuit breaker of one task type: `state` "CLOSED", "OPEN" (dispatch
    paused) or "HALF_OPEN" (one probe may run)."""

    task_type: str
    state: str
    reason: str
    crashes: int
    opened_at: dt.datetime | None
    probe_at: dt.datetime | None
    last_crashes: list[BreakerCrash]


@dataclasses.dataclass(frozen=True)
class WorkflowStep(_Record):
    """One entry of a run's step log: `kind` "STEP", "VERSION", "SLEEP", "WAIT", "PARALLEL" or
    "CHILD"; `state` "RUNNING" (claimed, a sleep or wait not over, a fan-out's children not all
    ended), "COMPLETED" or "FAILED". `result` is the step's value (a version's branch, a wait's
    event data); `wake_at` a sleep's end or a wait's timeout; a fan-out's `child_count` and
    `children_done` (0 for other kinds) say how many children it has and how many have ended
    (list_workflow_children reads them)."""

    position: int
    name: str
    kind: str
    state: str
    attempt: int
    result: Any
    error: TaskError | None
    fatal: bool
    started_at: dt.datetime | None
    finished_at: dt.datetime | None
    wake_at: dt.datetime | None
    child_count: int = 0
    children_done: int = 0


@dataclasses.dataclass(frozen=True)
class ChildRun(_Record):
    """One child of a fan-out, by `index` (its place in ctx.parallel's list): `child_id` (a
    task or a run: get() or get_workflow() reads it), `task_type`, `state` ("" while the
    child is not created yet), its `result` or `error` once it has ended."""

    index: int
    child_id: str
    task_type: str
    state: str
    result: Any
    error: TaskError | None


@dataclasses.dataclass(frozen=True)
class ChildPage(_Record):
    """One page of a fan-out's children; pass next_page_token (None on the last page) back."""

    children: list[ChildRun]
    next_page_token: str | None


@dataclasses.dataclass(frozen=True)
class PendingWait(_Record):
    """What a WAITING run waits on: a sleep or a wait (`kind` "SLEEP" or "WAIT") at `position`,
    a wait's `match` fields, and when it ends or times out (`wake_at`; None: no timeout)."""

    position: int
    kind: str
    name: str
    match: dict | None
    wake_at: dt.datetime | None


@dataclasses.dataclass(frozen=True)
class WorkflowInfo(_Record):
    """A workflow run. `state` is its task state ("ENQUEUED", "LEASED" while an activation
    runs, "WAITING" while suspended, "RETRY_WAIT", or terminal); `activations` counts its
    leases. From get_workflow: `steps` is one page of the step log (position order, the first
    page unless a token was given), `next_step_page_token` the next page's (None: the last),
    `pending` the sleep or wait a WAITING run is suspended on. From list_workflows: no steps,
    step_count 0 and no pending (lists carry no step logs)."""

    workflow_id: str
    workflow_type: str
    state: str
    input: Any
    result: Any
    error: TaskError | None
    activations: int
    idempotency_key: str
    cancel_requested: bool
    created_at: dt.datetime | None
    updated_at: dt.datetime | None
    finished_at: dt.datetime | None
    step_count: int
    pending: PendingWait | None
    steps: list[WorkflowStep]
    next_step_page_token: str | None = None

    @property
    def terminal(self) -> bool:
        return self.state in TERMINAL_STATES

    @property
    def succeeded(self) -> bool:
        return self.state == "SUCCEEDED"


@dataclasses.dataclass(frozen=True)
class WorkflowPage(_Record):
    """One page of runs; pass next_page_token (None on the last page) to get the next."""

    workflows: list[WorkflowInfo]
    next_page_token: str | None
