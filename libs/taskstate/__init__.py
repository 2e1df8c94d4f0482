"""The task state machine: the one place that declares task states, which
transitions are allowed, and how attempts end.

Everything else is checked against this module: the diagram in
docs/state-machine.md, the guards of every state-changing SQL statement in
services/history/store/*.sql (tests parse their `-- transitions:` comments),
and the history service's decisions at run time (`check`).
"""

from __future__ import annotations

import enum
import typing

from ratchet.api.tasks.v1 import tasks_pb2


class TaskState(str, enum.Enum):
    """A task's lifecycle state, stored by name in tasks.state."""

    ENQUEUED = "ENQUEUED"
    LEASED = "LEASED"
    RETRY_WAIT = "RETRY_WAIT"
    SUCCEEDED = "SUCCEEDED"
    FAILED = "FAILED"
    CANCELED = "CANCELED"
    EXPIRED = "EXPIRED"
    # A workflow run suspended between activations (a sleep, a wait): no lease, no sandbox.
    WAITING = "WAITING"

    def __str__(self) -> str:
        return self.value


# The source of the (create) edge: a task that does not exist yet.
CREATE = None

TERMINAL: frozenset[TaskState] = frozenset(
    {TaskState.SUCCEEDED, TaskState.FAILED, TaskState.CANCELED, TaskState.EXPIRED})

# Every allowed (from, to) pair; from is CREATE (None) for the insert.
ALLOWED: frozenset[tuple[TaskState | None, TaskState]] = frozenset({
    (CREATE, TaskState.ENQUEUED),
    (TaskState.ENQUEUED, TaskState.LEASED),
    (TaskState.ENQUEUED, TaskState.CANCELED),
    (TaskState.ENQUEUED, TaskState.EXPIRED),
    (TaskState.LEASED, TaskState.SUCCEEDED),
    (TaskState.LEASED, TaskState.RETRY_WAIT),
    (TaskState.LEASED, TaskState.FAILED),
    (TaskState.LEASED, TaskState.CANCELED),
    (TaskState.RETRY_WAIT, TaskState.ENQUEUED),
    (TaskState.RETRY_WAIT, TaskState.CANCELED),
    (TaskState.RETRY_WAIT, TaskState.EXPIRED),
    # Workflows: an activation suspends, a timer, an event or a wait's timeout wakes the run.
    (TaskState.LEASED, TaskState.WAITING),
    (TaskState.WAITING, TaskState.ENQUEUED),
    (TaskState.WAITING, TaskState.CANCELED),
    (TaskState.WAITING, TaskState.EXPIRED),
})


class IllegalTransition(ValueError):
    """A transition the state machine does not allow was attempted."""

    def __init__(self, frm: TaskState | None, to: TaskState):
        self.frm, self.to = frm, to
        super().__init__(f"illegal task transition {frm or '(create)'} -> {to}")


@typing.overload
def parse(value: None) -> None: ...
@typing.overload
def parse(value: str | TaskState) -> TaskState: ...
def parse(value: str | TaskState | None) -> TaskState | None:
    """A TaskState from its stored name; None stays None (the create edge)."""
    if value is None or isinstance(value, TaskState):
        return value
    try:
        return TaskState(value)
    except ValueError:
        raise ValueError(f"unknown task state {value!r}") from None


def allowed(frm: str | TaskState | None, to: str | TaskState) -> bool:
    """True when frm -> to is an edge of the state machine."""
    return (parse(frm), parse(to)) in ALLOWED


def check(frm: str | TaskState | None, to: str | TaskState) -> None:
    """Raise IllegalTransition unless frm -> to is allowed."""
    if not allowed(frm, to):
        raise IllegalTransition(parse(frm), parse(to))


def is_terminal(state: str | TaskState) -> bool:
    """True for SUCCEEDED, FAILED, CANCELED and EXPIRED."""
    return parse(state) in TERMINAL


def successors(state: str | TaskState | None) -> frozenset[TaskState]:
    """The states reachable from `state` in one transition."""
    s = parse(state)
    return frozenset(to for frm, to in ALLOWED if frm == s)


_TO_PROTO = {s: tasks_pb2.TaskState.Value(f"TASK_STATE_{s.value}") for s in TaskState}
_FROM_PROTO = {v: k for k, v in _TO_PROTO.items()}


def to_proto(state: str | TaskState) -> int:
    """The ratchet.api.tasks.v1.TaskState enum value of a state."""
    return _TO_PROTO[parse(state)]


def from_proto(value: int) -> TaskState:
    """The TaskState of a proto enum value; UNSPECIFIED and unknown raise ValueError."""
    try:
        return _FROM_PROTO[value]
    except KeyError:
        raise ValueError(f"no task state for proto value {value}") from None


class AttemptOutcome(str, enum.Enum):
    """How one attempt ended, stored by name in task_attempts.outcome."""

    RUNNING = "RUNNING"
    SUCCEEDED = "SUCCEEDED"
    FAILED = "FAILED"
    LEASE_EXPIRED = "LEASE_EXPIRED"
    TIMED_OUT = "TIMED_OUT"
    CRASHED = "CRASHED"
    CANCELED = "CANCELED"
    SUSPENDED = "SUSPENDED"

    def __str__(self) -> str:
        return self.value


_OUTCOME_TO_PROTO = {o: tasks_pb2.AttemptOutcome.Value(f"ATTEMPT_OUTCOME_{o.value}") for o in AttemptOutcome}
_OUTCOME_FROM_PROTO = {v: k for k, v in _OUTCOME_TO_PROTO.items()}


def outcome_to_proto(outcome: str | AttemptOutcome) -> int:
    """The ratchet.api.tasks.v1.AttemptOutcome enum value of an outcome."""
    return _OUTCOME_TO_PROTO[AttemptOutcome(outcome)]


def outcome_from_proto(value: int) -> AttemptOutcome:
    """The AttemptOutcome of a proto enum value; UNSPECIFIED raises ValueError."""
    try:
        return _OUTCOME_FROM_PROTO[value]
    except KeyError:
        raise ValueError(f"no attempt outcome for proto value {value}") from None


class ErrorClass:
    """Platform error classes recorded when the platform, not the handler, ends an attempt."""

    LEASE_EXPIRED = "LeaseExpired"
    SANDBOX_CRASHED = "SandboxCrashed"
    START_TO_CLOSE = "StartToCloseTimeout"
    SCHEDULE_TO_CLOSE = "ScheduleToCloseTimeout"
    SCHEDULE_TO_START = "ScheduleToStartTimeout"
    CANCELED = "Canceled"


class CancelReason(str, enum.Enum):
    """Why a running attempt was asked to stop (tasks.cancel_reason).

    A user cancel ends the task CANCELED; a start_to_close cancel is a failed
    attempt that may retry; a schedule_to_close cancel fails the task.
    """

    USER = "user"
    START_TO_CLOSE = "start_to_close"
    SCHEDULE_TO_CLOSE = "schedule_to_close"

    def __str__(self) -> str:
        return self.value
