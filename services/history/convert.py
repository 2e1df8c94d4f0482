"""Protos <-> history's values: request validation (INVALID_ARGUMENT with
what to fix) and the public Task / LeasedTask shapes. A create request's own conversion is
enqueue/convert.py, which checks its fields with the ones here."""

from __future__ import annotations

import dataclasses
import datetime as dt
import json
from collections.abc import Sequence

from google.protobuf import duration_pb2, json_format, struct_pb2, timestamp_pb2

from ratchet.api.tasks.v1 import tasks_pb2
from ratchet.internal.worker.v1 import worker_pb2
from ratchet.libs import taskstate
from ratchet.libs.fastcheck import first_bad_json
from ratchet.libs.shardmap import parse_task_id
from ratchet.libs.taskstate import TaskState
from ratchet.services.history import policy
from ratchet.services.history.errors import InvalidArgument, TooLarge
from ratchet.services.history.model import CompletionIn, ErrorInfo, TaskFilter
from ratchet.services.history.store.rows import AttemptRow, BulkOperationRow, LeasedRow, TaskRow

MAX_PAYLOAD_BYTES = 256 * 1024
MAX_BATCH = 1000
MAX_NAME = 200
MAX_ERROR_TEXT = 64 * 1024
MAX_CHECKPOINT_BYTES = 64 * 1024

_OUTCOMES = {
    worker_pb2.COMPLETION_OUTCOME_SUCCEEDED: "SUCCEEDED",
    worker_pb2.COMPLETION_OUTCOME_FAILED: "FAILED",
    worker_pb2.COMPLETION_OUTCOME_CANCELED: "CANCELED",
    worker_pb2.COMPLETION_OUTCOME_CRASHED: "CRASHED",
}


def task_id(value: str, where: str) -> str:
    """The canonical task id, or INVALID_ARGUMENT naming the field."""
    canonical = parse_task_id(value)
    if canonical is None:
        raise InvalidArgument(f"{where} must be a Ratchet task id (a UUID version 8), got {value!r}")
    return canonical


def name(value: str, where: str, *, required: bool = True) -> str:
    """A name field (tenant, app, type, queue...): at most MAX_NAME characters, else
    INVALID_ARGUMENT naming the field."""
    if required and not value:
        raise InvalidArgument(f"{where} is required")
    if len(value) > MAX_NAME:
        raise InvalidArgument(f"{where} must be at most {MAX_NAME} characters")
    return value


def _json_ok(raw: bytes) -> bool:
    """Whether raw is one UTF-8 JSON value and nothing around it (what the gateway sends):
    libs/fastcheck's C check, far cheaper than json.loads; payload's json.loads decides
    what it leaves undecided."""
    return first_bad_json((raw,)) == -1


def payload(raw: bytes, where: str) -> bytes:
    """A JSON value as sent (a task's payload, a result): at most MAX_PAYLOAD_BYTES, else
    TooLarge; not JSON, INVALID_ARGUMENT naming the field."""
    if len(raw) > MAX_PAYLOAD_BYTES:
        raise TooLarge(f"{where} is {len(raw)} bytes; the inline limit is {MAX_PAYLOAD_BYTES} bytes")
    if not raw:
        raise InvalidArgument(f"{where} is required (canonical JSON; use null for no payload)")
    if _json_ok(raw):
        return raw
    try:
        json.loads(raw.decode())  # (str: no encoding sniffing) the verdict on anything else
    except (UnicodeDecodeError, json.JSONDecodeError):
        raise InvalidArgument(f"{where} must be JSON") from None
    return raw


def checkpoint(raw: bytes, where: str) -> bytes:
    """A checkpoint as sent: JSON text of at most 64 KiB, else INVALID_ARGUMENT."""
    if len(raw) > MAX_CHECKPOINT_BYTES:
        raise InvalidArgument(f"{where} is {len(raw)} bytes; a checkpoint may be at most {MAX_CHECKPOINT_BYTES} "
                              "bytes (store a cursor, not the data)")
    try:
        json.loads(raw.decode())  # (str: no encoding sniffing)
    except (UnicodeDecodeError, json.JSONDecodeError):
        raise InvalidArgument(f"{where} must be JSON text") from None
    return raw


def _error(p: tasks_pb2.TaskError) -> ErrorInfo | None:
    if not p.error_class and not p.message:
        return None
    return ErrorInfo(p.error_class or "Error", p.message[:MAX_ERROR_TEXT], p.stack[:MAX_ERROR_TEXT])


def completion(p: worker_pb2.Completion, i: int, shard_id: int) -> CompletionIn:
    """Validate one Completion."""
    w = f"completions[{i}]"
    if p.shard_id and p.shard_id != shard_id:
        raise InvalidArgument(f"{w}.shard_id is {p.shard_id} but the request is for shard {shard_id}")
    outcome = _OUTCOMES.get(p.outcome)
    if outcome is None:
        raise InvalidArgument(f"{w}.outcome must be SUCCEEDED, FAILED, CANCELED or CRASHED")
    result = None
    if outcome == "SUCCEEDED":
        result = payload(p.result_json or b"null", f"{w}.result_json")
    retry_after = policy.seconds(p.retry_after) if p.HasField("retry_after") else None
    if retry_after is not None and retry_after < 0:
        raise InvalidArgument(f"{w}.retry_after must not be negative")
    cp = checkpoint(p.checkpoint_json, f"{w}.checkpoint_json") if p.HasField("checkpoint_json") else None
    return CompletionIn(task_id=task_id(p.task_id, f"{w}.task_id"), lease_epoch=p.lease_epoch,
                        outcome=outcome, result=result, error=_error(p.error), fatal=p.fatal,
                        retry_after_s=retry_after, checkpoint=cp)


def lease_ref(p: worker_pb2.LeaseRef, i: int, shard_id: int) -> tuple[str, int, bytes | None]:
    """Validate one LeaseRef: (task_id, lease_epoch, checkpoint or None)."""
    if p.shard_id and p.shard_id != shard_id:
        raise InvalidArgument(f"leases[{i}].shard_id is {p.shard_id} but the request is for shard {shard_id}")
    cp = checkpoint(p.checkpoint_json, f"leases[{i}].checkpoint_json") if p.HasField("checkpoint_json") else None
    return task_id(p.task_id, f"leases[{i}].task_id"), p.lease_epoch, cp


def type_limits(limits) -> list[tuple[tuple[str, str, str], int]]:
    """Validate LeaseTasksRequest.type_limits: [((tenant_id, app_id, task_type), max_tasks)]."""
    if len(limits) > MAX_BATCH:
        raise InvalidArgument(f"type_limits holds {len(limits)} items; send at most {MAX_BATCH}")
    out = []
    for i, p in enumerate(limits):
        w = f"type_limits[{i}]"
        key = (name(p.tenant_id, f"{w}.tenant_id"), name(p.app_id, f"{w}.app_id"),
               name(p.task_type, f"{w}.task_type"))
        if p.max_tasks < 0:
            raise InvalidArgument(f"{w}.max_tasks must be 0 (paused) or more, got {p.max_tasks}")
        out.append((key, p.max_tasks))
    return out


def lease_seconds(d, default_s: float, where: str = "lease_duration") -> float:
    """A requested lease length, or the default when unset."""
    if d is None or (d.seconds == 0 and d.nanos == 0):
        return default_s
    value = policy.seconds(d)
    if value <= 0 or value > 3600:
        raise InvalidArgument(f"{where} must be between 0s and 1h, got {value}s")
    return value


_EPOCH = dt.datetime(1970, 1, 1, tzinfo=dt.UTC)


def timestamp(value: dt.datetime | None) -> timestamp_pb2.Timestamp | None:
    """A datetime as a Timestamp (None stays None; naive means UTC). Computed from the
    timedelta since the epoch: Timestamp.FromDatetime's Python was a large share of
    turning a leased row into its message."""
    if value is None:
        return None
    if value.tzinfo is None:
        value = value.replace(tzinfo=dt.UTC)
    d = value - _EPOCH
    return timestamp_pb2.Timestamp(seconds=d.days * 86400 + d.seconds, nanos=d.microseconds * 1000)


def json_value(raw: bytes | None) -> struct_pb2.Value | None:
    """Stored JSON bytes as a google.protobuf.Value."""
    if raw is None:
        return None
    return json_format.Parse(bytes(raw).decode(), struct_pb2.Value())


def _task_error(cls: str | None, msg: str | None, stack: str | None) -> tasks_pb2.TaskError | None:
    if not cls:
        return None
    return tasks_pb2.TaskError(error_class=cls, message=msg or "", stack=stack or "")


def attempt_to_proto(a: AttemptRow) -> tasks_pb2.Attempt:
    """A task_attempts row in the public Attempt shape."""
    out = tasks_pb2.Attempt(attempt=a.attempt, lease_epoch=a.lease_epoch, worker_id=a.worker_id,
                            outcome=taskstate.outcome_to_proto(a.outcome),
                            started_at=timestamp(a.started_at), finished_at=timestamp(a.finished_at))
    err = _task_error(a.error_class, a.error_message, a.error_stack)
    if err is not None:
        out.error.CopyFrom(err)
    return out


def task_to_proto(row: TaskRow, attempts: Sequence[AttemptRow] = ()) -> tasks_pb2.Task:
    """A task row and its attempt rows in the public shape (ListTasks passes none)."""
    state = TaskState(row.state)
    retry = policy.Retry.from_json(_json(row.retry_policy))
    rules = policy.rules_from_json(row.retry_rules)
    timeouts = policy.Timeouts.from_json(_json(row.timeouts))
    out = tasks_pb2.Task(
        task_id=row.task_id, task_type=row.task_type, queue=row.queue or "default",
        state=taskstate.to_proto(state), attempt=row.attempt, max_attempts=row.max_attempts,
        version=row.version, payload=json_value(row.payload), result=json_value(row.result),
        idempotency_key=row.idempotency_key or "", cancel_requested=row.cancel_requested,
        created_at=timestamp(row.created_at), run_at=timestamp(row.run_at),
        updated_at=timestamp(row.updated_at), started_at=timestamp(row.started_at),
        finished_at=timestamp(row.finished_at),
        retry=policy.retry_to_proto(retry, row.non_retryable or (), rules),
        timeouts=policy.timeouts_to_proto(timeouts), attempts=[attempt_to_proto(a) for a in attempts],
        schedule_id=row.schedule_id or "", scheduled_time=timestamp(row.scheduled_time),
        checkpoint=json_value(row.checkpoint), retried_as=row.retried_as or "", retry_of=row.retry_of or "",
        parent_workflow_id=row.parent_id or "")
    if state in (TaskState.FAILED, TaskState.EXPIRED):
        err = _task_error(row.error_class, row.error_message, row.error_stack)
        if err is not None:
            out.error.CopyFrom(err)
    return out


def leased_to_proto(shard_id: int, r: LeasedRow, lease: duration_pb2.Duration) -> worker_pb2.LeasedTask:
    """A row returned by task_lease_batch as a LeasedTask (lease: the batch's lease duration,
    made once for all its rows and copied into each)."""
    # Every field once, by one unpacking (the row's fields in LeasedRow's order): per leased
    # task it costs less than a lookup per field, which gives back what making the row took.
    (task_id, tenant_id, app_id, task_type, queue, payload, attempt, max_attempts, lease_epoch, run_at,
     start_to_close_s, schedule_id, scheduled_time, checkpoint) = r
    out = worker_pb2.LeasedTask(
        shard_id=shard_id, task_id=str(task_id), tenant_id=tenant_id, app_id=app_id, task_type=task_type,
        queue=queue, payload_json=bytes(payload), attempt=attempt, max_attempts=max_attempts,
        lease_epoch=lease_epoch, lease_duration=lease, scheduled_at=timestamp(run_at),
        schedule_id=schedule_id or "", scheduled_time=timestamp(scheduled_time))
    if start_to_close_s is not None:
        out.start_to_close.CopyFrom(policy.duration(start_to_close_s))
    if checkpoint is not None:
        out.last_checkpoint_json = bytes(checkpoint)
    return out


def _json(value: dict | None) -> dict:
    """A stored policy or timeouts (parsed by the store's rows); NULL is {} (migration 0013)."""
    return {} if value is None else value


MAX_PAGE = 1000
DEFAULT_PAGE = 100
_BULK_KINDS = {tasks_pb2.BULK_OPERATION_KIND_RETRY: "RETRY", tasks_pb2.BULK_OPERATION_KIND_CANCEL: "CANCEL"}
_BULK_STATES = {"RUNNING": tasks_pb2.BULK_OPERATION_STATE_RUNNING,
                "SUCCEEDED": tasks_pb2.BULK_OPERATION_STATE_SUCCEEDED,
                "CANCELED": tasks_pb2.BULK_OPERATION_STATE_CANCELED}


def scope(tenant_id: str, app_id: str) -> tuple[str, str]:
    """(tenant_id, app_id), both required."""
    return name(tenant_id, "tenant_id"), name(app_id, "app_id")


def task_filter(p: tasks_pb2.TaskFilter, where: str = "filter") -> TaskFilter:
    """Validate a TaskFilter."""
    states = []
    for i, v in enumerate(p.states):
        try:
            states.append(taskstate.from_proto(v))
        except ValueError:
            raise InvalidArgument(f"{where}.states[{i}] must be a task state, got {v}") from None
    since = p.since.ToDatetime(tzinfo=dt.UTC) if p.HasField("since") else None
    until = p.until.ToDatetime(tzinfo=dt.UTC) if p.HasField("until") else None
    if since is not None and until is not None and since >= until:
        raise InvalidArgument(f"{where}.since must be before {where}.until")
    return TaskFilter(states=tuple(dict.fromkeys(states)),
                      task_type=name(p.task_type, f"{where}.task_type", required=False) or None,
                      queue=name(p.queue, f"{where}.queue", required=False) or None,
                      error_class=name(p.error_class, f"{where}.error_class", required=False) or None,
                      since=since, until=until)


def filter_to_proto(f: TaskFilter) -> tasks_pb2.TaskFilter:
    """A stored filter in the public TaskFilter shape."""
    return tasks_pb2.TaskFilter(states=[taskstate.to_proto(s) for s in f.states], task_type=f.task_type or "",
                                queue=f.queue or "", error_class=f.error_class or "",
                                since=timestamp(f.since), until=timestamp(f.until))


def page_size(value: int) -> int:
    """A ListTasks page size: 0 means the default."""
    if value == 0:
        return DEFAULT_PAGE
    if not 1 <= value <= MAX_PAGE:
        raise InvalidArgument(f"page_size must be 1..{MAX_PAGE}, got {value}")
    return value


def list_cursor(value: str) -> tuple[dt.datetime, str] | None:
    """Parse "<sort time RFC 3339>|<task_id>"; empty means the first page."""
    if not value:
        return None
    at, sep, tid = value.rpartition("|")
    try:
        when = dt.datetime.fromisoformat(at.replace("Z", "+00:00"))
    except ValueError:
        when = None
    if not sep or when is None or when.tzinfo is None:
        raise InvalidArgument("cursor must be \"<sort time RFC 3339>|<task_id>\" as returned in next_cursor")
    return when, task_id(tid, "cursor task_id")


def format_cursor(sort_at: dt.datetime, tid) -> str:
    """The cursor naming one listed task (microsecond precision, UTC)."""
    return f"{sort_at.astimezone(dt.UTC).isoformat(timespec='microseconds').replace('+00:00', 'Z')}|{tid}"


def bulk_kind(value: int) -> str:
    """RETRY or CANCEL."""
    kind = _BULK_KINDS.get(value)
    if kind is None:
        raise InvalidArgument("kind must be BULK_OPERATION_KIND_RETRY or BULK_OPERATION_KIND_CANCEL")
    return kind


def bulk_filter(p: tasks_pb2.TaskFilter, kind: str) -> TaskFilter:
    """A filter valid for the kind: RETRY names terminal states (default FAILED),
    CANCEL live ones (default all three)."""
    f = task_filter(p)
    if kind == "RETRY":
        if any(not taskstate.is_terminal(s) for s in f.states):
            raise InvalidArgument("a RETRY operation only applies to terminal states (FAILED, CANCELED, EXPIRED)")
        states = f.states or (TaskState.FAILED,)
    else:
        if any(taskstate.is_terminal(s) for s in f.states):
            raise InvalidArgument("a CANCEL operation only applies to ENQUEUED, LEASED and RETRY_WAIT")
        states = f.states or (TaskState.ENQUEUED, TaskState.LEASED, TaskState.RETRY_WAIT)
    return dataclasses.replace(f, states=states)


def task_type_name(value: str, where: str) -> str:
    """A required task type name."""
    return name(value, where)


def operation_id(value: str) -> str:
    """A bulk operation id: 1..200 printable ASCII characters."""
    if not value or len(value) > MAX_NAME or not all(32 < ord(c) < 127 for c in value):
        raise InvalidArgument(f"operation_id must be 1..{MAX_NAME} printable ASCII characters without spaces")
    return value


def bulk_to_proto(row: BulkOperationRow, failures: Sequence[tuple[str, str]]) -> tasks_pb2.BulkOperation:
    """An operation part and its recorded failures in the public shape."""
    return tasks_pb2.BulkOperation(
        operation_id=row.operation_id,
        kind=tasks_pb2.BulkOperationKind.Value(f"BULK_OPERATION_KIND_{row.kind}"),
        state=_BULK_STATES[row.state], filter=filter_to_proto(row.filter),
        matched=row.matched, processed=row.processed, succeeded=row.succeeded, failed=row.failed,
        skipped=row.skipped, failures=[tasks_pb2.BulkItemFailure(task_id=t, reason=r) for t, r in failures],
        created_at=timestamp(row.created_at), finished_at=timestamp(row.finished_at))
