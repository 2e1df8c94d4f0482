"""The values the history service decides with and writes."""

from __future__ import annotations

import dataclasses
import datetime as dt
import functools
import json

from ratchet.libs import taskstate
from ratchet.libs.taskstate import AttemptOutcome, CancelReason, TaskState
from ratchet.services.history.policy import Retry, Rule, rules_from_json


@dataclasses.dataclass(frozen=True)
class ErrorInfo:
    """An error recorded on an attempt or a task."""

    error_class: str
    message: str = ""
    stack: str = ""


@dataclasses.dataclass(frozen=True)
class Transition:
    """One decided state change, applied as a compare-and-set on
    (task_id, from_state, lease_epoch). Building one checks the edge against
    the state machine, so an illegal decision never reaches the database."""

    task_id: str
    from_state: TaskState
    to_state: TaskState
    lease_epoch: int
    reason: str
    delay_s: float | None = None
    result: bytes | None = None
    error: ErrorInfo | None = None
    attempt_outcome: AttemptOutcome | None = None
    attempt_error: ErrorInfo | None = None
    checkpoint: bytes | None = None  # stored with the outcome when set (a completion's last checkpoint)
    # The cancel request the decision read, for a decision made without a row lock:
    # the transition then applies only if the row still holds it.
    cancel_seen: str | None = None

    def __post_init__(self) -> None:
        taskstate.check(self.from_state, self.to_state)
        if (self.to_state == TaskState.RETRY_WAIT) != (self.delay_s is not None):
            raise ValueError("a RETRY_WAIT transition needs a delay, and only it")


# NULL: the stored base (migration 0013), what most tasks hold (Retry is frozen: safe to share).
_BASE_RETRY = Retry.from_json({})


def _retry(stored) -> Retry:
    if stored is None:
        return _BASE_RETRY
    if not isinstance(stored, str):
        return Retry.from_json(stored)
    return _stored_retry(stored)


# The tasks of one type share one retry policy, and parsing its stored text was most of
# building a TaskView, once per completion: a pure memo by that text (Retry is frozen).
@functools.lru_cache(maxsize=4096)
def _stored_retry(stored: str) -> Retry:
    return Retry.from_json(json.loads(stored))


@dataclasses.dataclass
class TaskView:
    """The fields of a locked task row that decisions read. Timer firing
    folds several decisions over one view, so it is mutable."""

    task_id: str
    state: TaskState
    lease_epoch: int
    attempt: int
    max_attempts: int
    retry: Retry
    non_retryable: frozenset[str]
    cancel_requested: bool
    cancel_reason: CancelReason | None
    rules: dict[str, Rule] = dataclasses.field(default_factory=dict)
    # A workflow run that holds a cancel for its compensations (workflow_cancels): its user cancel
    # does not end it before they ran. Read only where such a cancel can matter (a CANCELED
    # completion, a user-cancelled attempt's end, a kill after the grace); False elsewhere.
    compensating: bool = False

    @classmethod
    def from_row(cls, row) -> TaskView:
        """From a record with the columns selected by task_complete_lock / timer_claim_due."""
        rules = row.get("retry_rules")
        if isinstance(rules, str):
            rules = json.loads(rules)
        return cls(
            task_id=str(row["task_id"]),
            state=TaskState(row["state"]),
            lease_epoch=row["lease_epoch"],
            attempt=row["attempt"],
            max_attempts=row["max_attempts"],
            retry=_retry(row["retry_policy"]),
            non_retryable=frozenset(row["non_retryable"] or ()),
            cancel_requested=row["cancel_requested"],
            cancel_reason=CancelReason(row["cancel_reason"]) if row["cancel_reason"] else None,
            rules=rules_from_json(rules),
        )

    @property
    def cancel_seen(self) -> str:
        """The cancel request as task_transition_apply compares it: '' or 'requested:<reason>'."""
        return f"requested:{self.cancel_reason.value if self.cancel_reason else ''}" if self.cancel_requested else ""


@dataclasses.dataclass(frozen=True)
class CompletionIn:
    """One reported attempt end, as CompleteTasks received it."""

    task_id: str
    lease_epoch: int
    outcome: str  # SUCCEEDED | FAILED | CANCELED | CRASHED (SUSPENDED: a SuspendIn)
    result: bytes | None = None
    error: ErrorInfo | None = None
    fatal: bool = False
    retry_after_s: float | None = None
    checkpoint: bytes | None = None


@dataclasses.dataclass(frozen=True)
class SuspendIn(CompletionIn):
    """A SUSPENDED completion: a workflow activation stopped at the sleep or wait at
    suspend_position (outcome "SUSPENDED"). Its own type, so the fields an ordinary completion
    never has cost the completion path nothing."""

    suspend_position: int = 0
    wake_after_s: float | None = None  # None: only the awaited step's completion wakes the run


@dataclasses.dataclass(frozen=True)
class TimerDue:
    """A claimed timer with the DB-clock facts about its task."""

    task_id: str
    kind: str
    timer_epoch: int
    due_now: bool
    lease_expired: bool
    deadline_passed: bool
    kill_passed: bool


_UTC = dt.UTC
# Bounds passed instead of NULL (asyncpg sends these as -infinity/infinity),
# so range conditions stay index conditions in generic plans.
NEVER = dt.datetime.max.replace(tzinfo=_UTC)
DAWN = dt.datetime.min.replace(tzinfo=_UTC)
NIL_ID = "00000000-0000-0000-0000-000000000000"
MAX_ID = "ffffffff-ffff-ffff-ffff-ffffffffffff"


@dataclasses.dataclass(frozen=True)
class TaskFilter:
    """A validated TaskFilter: empty fields match everything; sort time
    (finished_at when terminal, created_at otherwise) in [since, until)."""

    states: tuple[TaskState, ...] = ()
    task_type: str | None = None
    queue: str | None = None
    error_class: str | None = None
    since: dt.datetime | None = None
    until: dt.datetime | None = None

    def terminal_states(self) -> list[str]:
        """The terminal states it matches, by name."""
        return [s.value for s in (self.states or tuple(TaskState)) if taskstate.is_terminal(s)]

    def live_states(self) -> list[str]:
        """The non-terminal states it matches, by name."""
        return [s.value for s in (self.states or tuple(TaskState)) if not taskstate.is_terminal(s)]

    def bounds(self) -> tuple[dt.datetime, dt.datetime]:
        """[since, until) with open ends as -infinity/infinity."""
        return self.since or DAWN, self.until or NEVER

    def to_json(self) -> dict:
        """The stored jsonb form (bulk_operations.filter)."""
        out: dict = {"states": [s.value for s in self.states]}
        for name in ("task_type", "queue", "error_class"):
            if getattr(self, name) is not None:
                out[name] = getattr(self, name)
        for name in ("since", "until"):
            if getattr(self, name) is not None:
                out[name] = getattr(self, name).isoformat()
        return out

    @classmethod
    def from_json(cls, data: dict | str) -> TaskFilter:
        """From the stored jsonb form."""
        if isinstance(data, str):
            data = json.loads(data)
        return cls(states=tuple(TaskState(s) for s in data.get("states", ())),
                   task_type=data.get("task_type"), queue=data.get("queue"), error_class=data.get("error_class"),
                   since=dt.datetime.fromisoformat(data["since"]) if data.get("since") else None,
                   until=dt.datetime.fromisoformat(data["until"]) if data.get("until") else None)
