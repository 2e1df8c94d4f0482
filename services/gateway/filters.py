"""Task filters of ListTasks, RetryTasks and CancelTasks: checked at the edge
(so a bad filter is a 400 naming the field and reaches no shard), defaulted
per operation kind, and hashed so a page token stays bound to its filter.

Pure functions; no I/O.
"""

from __future__ import annotations

import hashlib

from google.protobuf import timestamp_pb2

from ratchet.api.tasks.v1 import tasks_pb2
from ratchet.libs.rpc.errors import InvalidArgument
from ratchet.services.gateway import policy, validation
from ratchet.services.gateway.deployments import HANDLER_NAME

S = tasks_pb2
TERMINAL = frozenset({S.TASK_STATE_SUCCEEDED, S.TASK_STATE_FAILED, S.TASK_STATE_CANCELED, S.TASK_STATE_EXPIRED})
# A bulk retry makes a new task from one that ended without success; a
# SUCCEEDED task is not something to replay in bulk.
RETRYABLE = (S.TASK_STATE_FAILED, S.TASK_STATE_CANCELED, S.TASK_STATE_EXPIRED)
LIVE = (S.TASK_STATE_ENQUEUED, S.TASK_STATE_LEASED, S.TASK_STATE_RETRY_WAIT)
DEFAULT_PAGE, MAX_PAGE = 100, 500
_MIN_TS, _MAX_TS = -62135596800, 253402300799


def state_name(state: int) -> str:
    """TASK_STATE_FAILED -> FAILED, for messages."""
    return S.TaskState.Name(state).removeprefix("TASK_STATE_")


def _check_time(ts: timestamp_pb2.Timestamp, where: str) -> None:
    if not (_MIN_TS <= ts.seconds <= _MAX_TS and 0 <= ts.nanos <= 999_999_999):
        raise InvalidArgument(f"{where} is not a valid timestamp")


def check_filter(f: tasks_pb2.TaskFilter, where: str = "filter") -> tasks_pb2.TaskFilter:
    """A checked copy of f with its states de-duplicated (first occurrence kept)."""
    out = tasks_pb2.TaskFilter()
    out.CopyFrom(f)
    del out.states[:]
    for i, s in enumerate(f.states):
        if s == S.TASK_STATE_UNSPECIFIED or s not in S.TaskState.values():
            raise InvalidArgument(f"{where}.states[{i}] must be a task state such as FAILED, got {s}")
        if s not in out.states:
            out.states.append(s)
    if f.task_type and not HANDLER_NAME.match(f.task_type):
        raise InvalidArgument(f"{where}.task_type must be 1..200 characters of [A-Za-z0-9_.:-], "
                              f"got {f.task_type[:80]!r}")
    if f.queue and not validation.QUEUE_NAME.match(f.queue):
        raise InvalidArgument(f"{where}.queue must be 1..64 characters of [A-Za-z0-9_.-], got {f.queue[:80]!r}")
    if f.error_class:
        policy.check_class_name(f.error_class, f"{where}.error_class")
    for name in ("since", "until"):
        if f.HasField(name):
            _check_time(getattr(f, name), f"{where}.{name}")
    if f.HasField("since") and f.HasField("until") and \
            (f.since.seconds, f.since.nanos) >= (f.until.seconds, f.until.nanos):
        raise InvalidArgument(f"{where}.since ({f.since.ToJsonString()}) must be before {where}.until "
                              f"({f.until.ToJsonString()})")
    return out


def list_filter(req: tasks_pb2.ListTasksRequest) -> tasks_pb2.TaskFilter:
    """ListTasks' flat query fields as a checked TaskFilter (state unset: every state)."""
    f = tasks_pb2.TaskFilter(task_type=req.task_type, queue=req.queue, error_class=req.error_class)
    if req.state:
        f.states.append(req.state)
    for name in ("since", "until"):
        if req.HasField(name):
            getattr(f, name).CopyFrom(getattr(req, name))
    try:
        return check_filter(f, where="filter")
    except InvalidArgument as e:
        # The caller sent flat fields: name them as they were sent.
        e.message = e.message.replace("filter.states[0]", "state").replace("filter.", "")
        raise


def page_size(value: int) -> int:
    """0 means the default (100); else 1..500."""
    if value == 0:
        return DEFAULT_PAGE
    if not 1 <= value <= MAX_PAGE:
        raise InvalidArgument(f"page_size must be 1..{MAX_PAGE}, got {value}")
    return value


def bulk_filter(f: tasks_pb2.TaskFilter, kind: int) -> tasks_pb2.TaskFilter:
    """The checked filter of a bulk operation with the kind's default states.

    RETRY: FAILED, CANCELED, EXPIRED only (default FAILED). CANCEL: ENQUEUED,
    LEASED, RETRY_WAIT only (default all three).
    """
    out = check_filter(f)
    allowed, default = (RETRYABLE, (S.TASK_STATE_FAILED,)) if kind == S.BULK_OPERATION_KIND_RETRY else (LIVE, LIVE)
    for i, s in enumerate(out.states):
        if s not in allowed:
            what = "retry" if kind == S.BULK_OPERATION_KIND_RETRY else "cancel"
            raise InvalidArgument(f"filter.states[{i}] is {state_name(s)}, but a bulk {what} applies only to "
                                  f"{', '.join(state_name(a) for a in allowed)}")
    if not out.states:
        out.states.extend(default)
    return out


def _micros(ts: timestamp_pb2.Timestamp) -> tuple[int, int] | None:
    return (ts.seconds, ts.nanos // 1000)


def same_filter(a: tasks_pb2.TaskFilter, b: tasks_pb2.TaskFilter) -> bool:
    """Equal as history stores them (states as a set, times to the microsecond)."""
    def norm(f):
        return (frozenset(f.states), f.task_type, f.queue, f.error_class,
                _micros(f.since) if f.HasField("since") else None,
                _micros(f.until) if f.HasField("until") else None)
    return norm(a) == norm(b)


def filter_hash(tenant_id: str, app_id: str, f: tasks_pb2.TaskFilter) -> str:
    """A short hash of who is listing and what: a page token carries it."""
    canon = tasks_pb2.TaskFilter()
    canon.CopyFrom(f)
    key = b"\0".join([tenant_id.encode(), app_id.encode(), canon.SerializeToString(deterministic=True)])
    return hashlib.sha256(key).hexdigest()[:24]
