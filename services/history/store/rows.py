"""The rows the store hands back: typed values built from the statements' records, so no
caller reads an asyncpg.Record by key.

Reads and the paths off the hot loop get frozen dataclasses, converted field by field
(ids as canonical strings, stored JSON parsed). The two hot reads, the lease batch and the
heartbeat batch, get NamedTuples made straight from the record's values in the statement's
column order (`_make`, no per-field Python: a dataclass built per row costs several times
as much, and a tuple's fields read faster than a record's keys, which gives part of it
back); the integration tests hold each NamedTuple's fields to its statement's columns. A
completion's rows and a timer claim's become TaskViews, which the decision reads anyway.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import json
import uuid
from typing import Any, NamedTuple

from ratchet.services.history.model import TaskFilter, TaskView, TimerDue


def _str(value: Any) -> str | None:
    return None if value is None else str(value)


def _json(value: Any) -> Any:
    """A stored jsonb value as Python (asyncpg hands jsonb over as text)."""
    return json.loads(value) if isinstance(value, (str, bytes)) else value


@dataclasses.dataclass(frozen=True, slots=True)
class TaskRow:
    """A whole task row (task_get; a ListTasks page's rows also carry sort_at)."""

    task_id: str
    tenant_id: str
    app_id: str
    queue: str | None  # NULL: 'default' (migration 0013)
    task_type: str
    max_attempts: int
    payload: bytes
    retry_policy: dict | None  # NULL: {}, the stored base
    retry_rules: dict | None
    timeouts: dict | None  # NULL: {}
    non_retryable: list[str] | None
    idempotency_key: str | None
    schedule_id: str | None
    scheduled_time: dt.datetime | None
    retry_of: str | None
    created_at: dt.datetime
    run_at: dt.datetime
    cancel_requested: bool
    attempt: int
    lease_epoch: int
    started_at: dt.datetime | None
    worker_id: str | None
    state: str
    version: int
    updated_at: dt.datetime
    finished_at: dt.datetime | None
    result: bytes | None
    error_class: str | None
    error_message: str | None
    error_stack: str | None
    retried_as: str | None
    cancel_reason: str | None
    checkpoint: bytes | None
    sort_at: dt.datetime | None = None  # a ListTasks row's sort time
    parent_id: str | None = None  # a fan-out child's parent run (Task.parent_workflow_id)

    @classmethod
    def of(cls, r) -> TaskRow:
        return cls(
            task_id=str(r["task_id"]), tenant_id=r["tenant_id"], app_id=r["app_id"], queue=r["queue"],
            task_type=r["task_type"], max_attempts=r["max_attempts"], payload=r["payload"],
            retry_policy=_json(r["retry_policy"]), retry_rules=_json(r["retry_rules"]), timeouts=_json(r["timeouts"]),
            non_retryable=r["non_retryable"], idempotency_key=r["idempotency_key"], schedule_id=r["schedule_id"],
            scheduled_time=r["scheduled_time"], retry_of=_str(r["retry_of"]), created_at=r["created_at"],
            run_at=r["run_at"], cancel_requested=r["cancel_requested"], attempt=r["attempt"],
            lease_epoch=r["lease_epoch"], started_at=r["started_at"], worker_id=r["worker_id"], state=r["state"],
            version=r["version"], updated_at=r["updated_at"], finished_at=r["finished_at"], result=r["result"],
            error_class=r["error_class"], error_message=r["error_message"], error_stack=r["error_stack"],
            retried_as=_str(r["retried_as"]), cancel_reason=r["cancel_reason"], checkpoint=r["checkpoint"],
            sort_at=r.get("sort_at"), parent_id=_str(r["parent_id"]))


@dataclasses.dataclass(frozen=True, slots=True)
class AttemptRow:
    """One attempt of a task (the task_attempts view)."""

    attempt: int
    lease_epoch: int
    worker_id: str | None
    started_at: dt.datetime | None
    finished_at: dt.datetime | None
    outcome: str | None
    error_class: str | None
    error_message: str | None
    error_stack: str | None

    @classmethod
    def of(cls, r) -> AttemptRow:
        return cls(attempt=r["attempt"], lease_epoch=r["lease_epoch"], worker_id=r["worker_id"],
                   started_at=r["started_at"], finished_at=r["finished_at"], outcome=r["outcome"],
                   error_class=r["error_class"], error_message=r["error_message"], error_stack=r["error_stack"])


@dataclasses.dataclass(frozen=True, slots=True)
class TransitionRow:
    """One entry of a task's transition log (the task_transitions view)."""

    version: int
    from_state: str | None
    to_state: str
    lease_epoch: int
    at: dt.datetime
    reason: str | None

    @classmethod
    def of(cls, r) -> TransitionRow:
        return cls(version=r["version"], from_state=r["from_state"], to_state=r["to_state"],
                   lease_epoch=r["lease_epoch"], at=r["at"], reason=r["reason"])


@dataclasses.dataclass(frozen=True, slots=True)
class LockedTask:
    """What a single-task decision (a cancel) reads of the task it locked."""

    task_id: str
    tenant_id: str
    state: str
    lease_epoch: int
    cancel_requested: bool

    @classmethod
    def of(cls, r) -> LockedTask:
        return cls(task_id=str(r["task_id"]), tenant_id=r["tenant_id"], state=r["state"],
                   lease_epoch=r["lease_epoch"], cancel_requested=r["cancel_requested"])


@dataclasses.dataclass(frozen=True, slots=True)
class CancelLocked:
    """What CancelTask reads of the task it locked (task_cancel_lock): task_lock's columns and
    whether its cancel keeps it for compensations."""

    task_id: str
    tenant_id: str
    state: str
    lease_epoch: int
    cancel_requested: bool
    has_compensations: bool  # its step log holds an ON_CANCEL row
    cancelled: bool  # it holds a cancel for its compensations already (workflow_cancels)

    @classmethod
    def of(cls, r) -> CancelLocked:
        return cls(task_id=str(r["task_id"]), tenant_id=r["tenant_id"], state=r["state"],
                   lease_epoch=r["lease_epoch"], cancel_requested=r["cancel_requested"],
                   has_compensations=r["has_compensations"], cancelled=r["cancelled"])


@dataclasses.dataclass(frozen=True, slots=True)
class RetryCandidate:
    """A terminal task a RETRY operation's scan locked."""

    task_id: str
    state: str
    finished_at: dt.datetime
    task_type: str
    retried_as: str | None

    @classmethod
    def of(cls, r) -> RetryCandidate:
        return cls(task_id=str(r["task_id"]), state=r["state"], finished_at=r["finished_at"],
                   task_type=r["task_type"], retried_as=_str(r["retried_as"]))


@dataclasses.dataclass(frozen=True, slots=True)
class CancelCandidate:
    """A live task a CANCEL operation's scan locked."""

    task_id: str
    state: str
    lease_epoch: int

    @classmethod
    def of(cls, r) -> CancelCandidate:
        return cls(task_id=str(r["task_id"]), state=r["state"], lease_epoch=r["lease_epoch"])


@dataclasses.dataclass(frozen=True, slots=True)
class BulkOperationRow:
    """This shard's part of a bulk operation."""

    operation_id: str
    tenant_id: str
    app_id: str
    kind: str  # RETRY | CANCEL
    filter: TaskFilter
    registered_task_types: tuple[str, ...]
    state: str  # RUNNING | SUCCEEDED | CANCELED
    matched: int
    processed: int
    succeeded: int
    failed: int
    skipped: int
    bound_at: dt.datetime
    cursor_state: str | None
    cursor_time: dt.datetime | None
    cursor_task_id: str | None
    created_at: dt.datetime
    updated_at: dt.datetime
    finished_at: dt.datetime | None

    @classmethod
    def of(cls, r) -> BulkOperationRow:
        return cls(operation_id=r["operation_id"], tenant_id=r["tenant_id"], app_id=r["app_id"], kind=r["kind"],
                   filter=TaskFilter.from_json(r["filter"]), registered_task_types=tuple(r["registered_task_types"]),
                   state=r["state"], matched=r["matched"], processed=r["processed"], succeeded=r["succeeded"],
                   failed=r["failed"], skipped=r["skipped"], bound_at=r["bound_at"], cursor_state=r["cursor_state"],
                   cursor_time=r["cursor_time"], cursor_task_id=_str(r["cursor_task_id"]),
                   created_at=r["created_at"], updated_at=r["updated_at"], finished_at=r["finished_at"])


class LeasedRow(NamedTuple):
    """A task task_lease_batch leased (fields in the statement's column order)."""

    task_id: uuid.UUID
    tenant_id: str
    app_id: str
    task_type: str
    queue: str
    payload: bytes
    attempt: int
    max_attempts: int
    lease_epoch: int
    run_at: dt.datetime
    start_to_close_s: float | None
    schedule_id: str | None
    scheduled_time: dt.datetime | None
    checkpoint: bytes | None


class HeldLease(NamedTuple):
    """A lease task_heartbeat_batch extended (fields in the statement's column order)."""

    task_id: uuid.UUID
    lease_epoch: int
    cancel_requested: bool
    cancel_reason: str | None
    kill_after_s: float | None


@dataclasses.dataclass(frozen=True, slots=True)
class DueTask:
    """A task timer_claim_due claimed, with its due timers oldest first."""

    view: TaskView
    dues: list[TimerDue]


@dataclasses.dataclass(frozen=True, slots=True)
class StepRow:
    """One row of a workflow run's step log (workflow_steps), with, from the statements that
    read it for a decision, the seconds until its wake_at on the shard clock."""

    position: int
    name: str
    kind: str  # STEP | VERSION | SLEEP | WAIT
    state: str  # RUNNING | COMPLETED | FAILED
    lease_epoch: int
    attempt: int
    result: bytes | None
    error_class: str | None
    error_message: str | None
    error_stack: str | None
    fatal: bool
    wake_at: dt.datetime | None
    started_at: dt.datetime
    finished_at: dt.datetime | None
    wake_in_s: float | None = None

    @classmethod
    def of(cls, r) -> StepRow:
        return cls(position=r["position"], name=r["name"], kind=r["kind"], state=r["state"],
                   lease_epoch=r["lease_epoch"], attempt=r["attempt"],
                   result=bytes(r["result"]) if r["result"] is not None else None, error_class=r["error_class"],
                   error_message=r["error_message"], error_stack=r["error_stack"], fatal=r["fatal"],
                   wake_at=r["wake_at"], started_at=r["started_at"], finished_at=r["finished_at"],
                   wake_in_s=r["wake_in_s"])


@dataclasses.dataclass(frozen=True, slots=True)
class PendingRow:
    """The sleep or wait a suspended run waits on (the last RUNNING one of its log)."""

    position: int
    name: str
    kind: str  # SLEEP | WAIT
    wake_at: dt.datetime | None
    match: dict | None  # a wait's match fields

    @classmethod
    def of(cls, r) -> PendingRow:
        return cls(position=r["position"], name=r["name"], kind=r["kind"], wake_at=r["wake_at"],
                   match=_json(r["match"]))


@dataclasses.dataclass(frozen=True, slots=True)
class SuspendedRow:
    """A run workflow_suspend_batch moved to WAITING; awaiting: its awaited step is still RUNNING
    (False: an event completed it first, so the run wakes at once)."""

    task_id: str
    state: str
    version: int
    awaiting: bool

    @classmethod
    def of(cls, r) -> SuspendedRow:
        return cls(task_id=str(r["task_id"]), state=r["state"], version=r["version"], awaiting=r["awaiting"])


@dataclasses.dataclass(frozen=True, slots=True)
class FanoutRow:
    """The log's row at a fan-out's position, as a fan-out BEGIN reads it."""

    name: str
    kind: str
    state: str
    attempt: int
    child_count: int | None
    on_failure: str | None

    @classmethod
    def of(cls, r) -> FanoutRow:
        return cls(name=r["name"], kind=r["kind"], state=r["state"], attempt=r["attempt"],
                   child_count=r["child_count"], on_failure=r["on_failure"])


@dataclasses.dataclass(frozen=True, slots=True)
class ChildDoneRow:
    """A fan-out child's end as recorded on the parent's shard (workflow_child_done)."""

    child_index: int
    child_id: str
    state: str
    result: bytes | None
    error_class: str | None
    error_message: str | None

    @classmethod
    def of(cls, r) -> ChildDoneRow:
        return cls(child_index=r["child_index"], child_id=str(r["child_id"]), state=r["state"],
                   result=bytes(r["result"]) if r["result"] is not None else None,
                   error_class=r["error_class"], error_message=r["error_message"])


@dataclasses.dataclass(frozen=True, slots=True)
class ChildEnd:
    """A fan-out child's end in its shard's outbox, to record on the parent's shard."""

    child_id: str
    parent_id: str
    position: int
    child_index: int
    state: str
    result: bytes | None
    error_class: str | None
    error_message: str | None
    ended_at: dt.datetime

    @classmethod
    def of(cls, r) -> ChildEnd:
        return cls(child_id=str(r["child_id"]), parent_id=str(r["parent_id"]), position=r["position"],
                   child_index=r["child_index"], state=r["state"],
                   result=bytes(r["result"]) if r["result"] is not None else None,
                   error_class=r["error_class"], error_message=r["error_message"], ended_at=r["ended_at"])
