"""Protos <-> history's values: request validation (INVALID_ARGUMENT with
what to fix) and the public Task / LeasedTask shapes."""

from __future__ import annotations

import dataclasses
import datetime as dt
import functools
import json

from google.protobuf import duration_pb2, json_format, struct_pb2, timestamp_pb2

from ratchet.api.tasks.v1 import tasks_pb2
from ratchet.internal.history.v1 import history_pb2
from ratchet.internal.worker.v1 import worker_pb2
from ratchet.libs import taskstate
from ratchet.libs.fastcheck import first_bad_json
from ratchet.libs.shardmap import all_canonical, parse_task_id
from ratchet.libs.taskstate import TaskState
from ratchet.services.history import policy
from ratchet.services.history.enqueue import Batch, Policy, Request
from ratchet.services.history.errors import InvalidArgument, TooLarge
from ratchet.services.history.model import CompletionIn, ErrorInfo, TaskFilter

MAX_PAYLOAD_BYTES = 256 * 1024
MAX_BATCH = 1000
MAX_NAME = 200
MAX_ERROR_TEXT = 64 * 1024
MAX_CHECKPOINT_BYTES = 64 * 1024
MAX_RULES = 100

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


def _name(value: str, where: str, *, required: bool = True) -> str:
    if required and not value:
        raise InvalidArgument(f"{where} is required")
    if len(value) > MAX_NAME:
        raise InvalidArgument(f"{where} must be at most {MAX_NAME} characters")
    return value


def _json_ok(raw: bytes) -> bool:
    """Whether raw is one UTF-8 JSON value and nothing around it (what the gateway sends):
    libs/fastcheck's C check, far cheaper than json.loads; _payload's json.loads decides
    what it leaves undecided."""
    return first_bad_json((raw,)) == -1


def _payload(raw: bytes, where: str) -> bytes:
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


def _idempotency_key(key: str, where: str) -> str | None:
    if not key:
        return None
    if len(key) > MAX_NAME or not all(32 <= ord(c) < 127 for c in key):
        raise InvalidArgument(f"{where} must be 1..{MAX_NAME} printable ASCII characters")
    return key


# The NewTask fields a CreateTasksRequest may send once, in `shared`, for all of its tasks.
SHARED_FIELDS = ("tenant_id", "app_id", "task_type", "queue", "retry", "timeouts", "non_retryable")


@dataclasses.dataclass(frozen=True)
class Shared:
    """A CreateTasksRequest's `shared` fields, validated once: what a task that leaves the
    field unset takes ("" and None: not shared)."""

    tenant_id: str = ""
    app_id: str = ""
    task_type: str = ""
    queue: str = ""
    retry: tasks_pb2.RetryPolicy | None = None
    timeouts: tasks_pb2.Timeouts | None = None
    non_retryable: tuple[str, ...] = ()
    policy: Policy | None = None  # the policy of a task that sets none of retry/timeouts/non_retryable


NO_SHARED = Shared()


def shared(req: history_pb2.CreateTasksRequest) -> Shared:
    """The request's shared fields, checked (INVALID_ARGUMENT naming `shared.<field>`)."""
    if not req.HasField("shared"):
        return NO_SHARED
    sh = req.shared
    extra = sorted(f.name for f, _ in sh.ListFields() if f.name not in SHARED_FIELDS)
    if extra:
        raise InvalidArgument(f"shared may hold only {', '.join(SHARED_FIELDS)}; it sets {', '.join(extra)}: "
                              "send those on each task")
    retry = sh.retry if sh.HasField("retry") else None
    timeouts = sh.timeouts if sh.HasField("timeouts") else None
    non_retryable = tuple(sh.non_retryable)
    return Shared(tenant_id=_name(sh.tenant_id, "shared.tenant_id", required=False),
                  app_id=_name(sh.app_id, "shared.app_id", required=False),
                  task_type=_name(sh.task_type, "shared.task_type", required=False),
                  queue=_name(sh.queue, "shared.queue", required=False),
                  retry=retry, timeouts=timeouts, non_retryable=non_retryable,
                  policy=_policy(retry or _NO_RETRY, timeouts or _NO_TIMEOUTS, non_retryable, "shared"))


_NO_RETRY = tasks_pb2.RetryPolicy()
_NO_TIMEOUTS = tasks_pb2.Timeouts()


def _own_or_shared(own: str, common: str, where: str, *, required: bool = True) -> str:
    """A task's name field: its own (checked), else the request's shared one (checked once)."""
    if own:
        if common:
            raise InvalidArgument(f"{where} is set on the task and in shared: send it in one place")
        return _name(own, where)
    if required and not common:
        raise InvalidArgument(f"{where} is required")
    return common


def _task_policy(p: history_pb2.NewTask, sh: Shared, w: str) -> Policy:
    own_retry, own_timeouts = p.HasField("retry"), p.HasField("timeouts")
    if not own_retry and not own_timeouts and not p.non_retryable and sh.policy is not None:
        return sh.policy  # (the common case of a batch: the policy validated once per request)
    for name, own, common in (("retry", own_retry, sh.retry), ("timeouts", own_timeouts, sh.timeouts),
                              ("non_retryable", bool(p.non_retryable), sh.non_retryable)):
        if own and common:
            raise InvalidArgument(f"{w}.{name} is set on the task and in shared: send it in one place")
    return _policy(p.retry if own_retry else sh.retry or _NO_RETRY,
                   p.timeouts if own_timeouts else sh.timeouts or _NO_TIMEOUTS,
                   tuple(p.non_retryable) or sh.non_retryable, w)


def new_task(p: history_pb2.NewTask, i: int, sh: Shared = NO_SHARED) -> tuple:
    """Validate one NewTask (with its request's shared fields): its values in the order
    task_id, payload, then enqueue.COLUMNS."""
    w = f"tasks[{i}]"
    delay_s, run_at = None, None
    if p.HasField("delay"):
        if p.HasField("run_at"):
            raise InvalidArgument(f"{w}: set delay or run_at, not both")
        delay_s = policy.seconds(p.delay)
        if delay_s < 0:
            raise InvalidArgument(f"{w}.delay must not be negative")
    elif p.HasField("run_at"):
        run_at = p.run_at.ToDatetime(tzinfo=dt.UTC)
    key = _idempotency_key(p.idempotency_key, f"{w}.idempotency_key") if p.idempotency_key else None
    if key is not None and not p.fingerprint:
        raise InvalidArgument(f"{w}.fingerprint is required with an idempotency_key")
    pol = _task_policy(p, sh, w)
    schedule_id = _name(p.schedule_id, f"{w}.schedule_id") if p.schedule_id else None
    scheduled_time = p.scheduled_time.ToDatetime(tzinfo=dt.UTC) if p.HasField("scheduled_time") else None
    return (task_id(p.task_id, f"{w}.task_id"), _payload(p.payload_json, f"{w}.payload_json"),
            _own_or_shared(p.tenant_id, sh.tenant_id, f"{w}.tenant_id"),
            _own_or_shared(p.app_id, sh.app_id, f"{w}.app_id"),
            _own_or_shared(p.task_type, sh.task_type, f"{w}.task_type"),
            _own_or_shared(p.queue, sh.queue, f"{w}.queue", required=False) or "default",
            pol, delay_s, run_at, key, p.fingerprint if key is not None else None, schedule_id, scheduled_time)


def _column(values: tuple) -> list:
    """A column as one value when every task holds it (list.count compares in C, identity first)."""
    if len(values) > 1 and values.count(values[0]) == len(values):
        return [values[0]]
    return list(values)


def tasks(msgs, sh: Shared = NO_SHARED) -> Batch:
    """A request's NewTasks (with its shared fields), validated, as columns."""
    ids, payloads, *cols = zip(*(new_task(p, i, sh) for i, p in enumerate(msgs)), strict=True)
    return Batch(list(ids), list(payloads), *map(_column, cols))


def create_request(req: history_pb2.CreateTasksRequest) -> Request:
    """A CreateTasksRequest validated (INVALID_ARGUMENT naming the field; nothing written), as
    the one form the committer takes. An empty request is one of no tasks (nothing to do)."""
    if req.HasField("columns"):
        return Request(columns_batch(req), columns=True)
    if not req.tasks:
        return Request(Batch([], [], [], [], [], [], [], [], [], [], [], [], []))
    return Request(tasks(req.tasks, shared(req)))


def columns_batch(req: history_pb2.CreateTasksRequest) -> Batch:
    """The request's uniform tasks (CreateTasksRequest.columns), checked (INVALID_ARGUMENT naming
    `columns.<field>[i]`): per request, not per task, except the JSON scan of each payload."""
    if req.tasks:
        raise InvalidArgument("columns and tasks are exclusive: send the request's tasks in one of them")
    sh = shared(req)
    for name in ("tenant_id", "app_id", "task_type"):
        if not getattr(sh, name):
            raise InvalidArgument(f"shared.{name} is required with columns")
    ids, payloads = list(req.columns.task_ids), list(req.columns.payloads_json)
    n = len(ids)
    if not 1 <= n <= MAX_BATCH:
        raise InvalidArgument(f"columns.task_ids holds {n} ids; send 1..{MAX_BATCH}")
    if len(payloads) != n:
        raise InvalidArgument(f"columns holds {n} task_ids and {len(payloads)} payloads_json: "
                              "send one of each per task")
    if not all_canonical(ids):
        ids = [task_id(v, f"columns.task_ids[{i}]") for i, v in enumerate(ids)]
    if len(set(ids)) != n:
        seen: dict[str, int] = {}
        for i, v in enumerate(ids):
            if v in seen:
                raise InvalidArgument(f"columns.task_ids[{seen[v]}] and columns.task_ids[{i}] are the same task id")
            seen[v] = i
    if first_bad_json(payloads) != -1 or max(map(len, payloads)) > MAX_PAYLOAD_BYTES:
        for i, raw in enumerate(payloads):
            _payload(raw, f"columns.payloads_json[{i}]")  # (raises for the first bad one)
    return Batch(ids, payloads, [sh.tenant_id], [sh.app_id], [sh.task_type], [sh.queue or "default"],
                 [sh.policy], _NONE, _NONE, _NONE, _NONE, _NONE, _NONE)


_NONE: list = [None]  # a column nobody sets (shared by every uniform batch: never mutated)


def _policy(retry_p: tasks_pb2.RetryPolicy, timeouts_p: tasks_pb2.Timeouts, non_retryable: tuple[str, ...],
            w: str) -> Policy:
    """The validated policy, converted once per distinct wire form (_policy_of); a refused one
    is converted again here, so the error names this task's field."""
    # (a cache key only: equal bytes are equal policies; the same policy serialized in another
    # map order would only miss the cache)
    try:
        return _policy_of(retry_p.SerializeToString(), timeouts_p.SerializeToString(), non_retryable)
    except InvalidArgument:
        return _converted_policy(retry_p, timeouts_p, non_retryable, w)  # (raises, naming w)


# A batch (or a stream of enqueues) of one task type carries one policy, and converting it per
# task was a large share of history's CPU per batched task: a pure memo of the conversion by its
# wire form (a refused policy raises and is not remembered).
@functools.lru_cache(maxsize=4096)
def _policy_of(retry_b: bytes, timeouts_b: bytes, non_retryable: tuple[str, ...]) -> Policy:
    return _converted_policy(tasks_pb2.RetryPolicy.FromString(retry_b), tasks_pb2.Timeouts.FromString(timeouts_b),
                             non_retryable, "policy")


def _converted_policy(retry_p: tasks_pb2.RetryPolicy, timeouts_p: tasks_pb2.Timeouts,
                      non_retryable: tuple[str, ...], w: str) -> Policy:
    retry = policy.retry_from_proto(retry_p, f"{w}.retry")
    timeouts = policy.timeouts_from_proto(timeouts_p, f"{w}.timeouts")
    for j, name in enumerate(non_retryable):
        _name(name, f"{w}.non_retryable[{j}]")
    for j, name in enumerate(retry_p.non_retryable):
        _name(name, f"{w}.retry.non_retryable[{j}]")
    rules = _rules(retry_p, f"{w}.retry.rules")
    return Policy(max_attempts=retry.max_attempts, retry_json=retry.to_json(), timeouts_json=timeouts.to_json(),
                  non_retryable=sorted(set(non_retryable) | set(retry_p.non_retryable)),
                  rules_json={k: r.to_json() for k, r in rules.items()} or None,
                  schedule_to_start_s=timeouts.schedule_to_start_s,
                  schedule_to_close_s=timeouts.schedule_to_close_s)


def _rules(p: tasks_pb2.RetryPolicy, where: str) -> dict[str, policy.Rule]:
    if len(p.rules) > MAX_RULES:
        raise InvalidArgument(f"{where} holds {len(p.rules)} rules; at most {MAX_RULES} are allowed")
    out = {}
    for name in sorted(p.rules):
        _name(name, f"{where} key")
        out[name] = policy.rule_from_proto(p.rules[name], f"{where}[{name!r}]")
    return out


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
        result = _payload(p.result_json or b"null", f"{w}.result_json")
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
        key = (_name(p.tenant_id, f"{w}.tenant_id"), _name(p.app_id, f"{w}.app_id"),
               _name(p.task_type, f"{w}.task_type"))
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


def attempt_to_proto(a) -> tasks_pb2.Attempt:
    """A task_attempts row in the public Attempt shape."""
    out = tasks_pb2.Attempt(attempt=a["attempt"], lease_epoch=a["lease_epoch"], worker_id=a["worker_id"],
                            outcome=taskstate.outcome_to_proto(a["outcome"]),
                            started_at=timestamp(a["started_at"]), finished_at=timestamp(a["finished_at"]))
    err = _task_error(a["error_class"], a["error_message"], a["error_stack"])
    if err is not None:
        out.error.CopyFrom(err)
    return out


def task_to_proto(row, attempts=()) -> tasks_pb2.Task:
    """A task row and its attempt rows in the public shape (ListTasks passes none)."""
    state = TaskState(row["state"])
    retry = policy.Retry.from_json(_json(row["retry_policy"]))
    rules = policy.rules_from_json(_json(row["retry_rules"]) if row["retry_rules"] is not None else None)
    timeouts = policy.Timeouts.from_json(_json(row["timeouts"]))
    out = tasks_pb2.Task(
        task_id=str(row["task_id"]), task_type=row["task_type"], queue=row["queue"] or "default",
        state=taskstate.to_proto(state), attempt=row["attempt"], max_attempts=row["max_attempts"],
        version=row["version"], payload=json_value(row["payload"]), result=json_value(row["result"]),
        idempotency_key=row["idempotency_key"] or "", cancel_requested=row["cancel_requested"],
        created_at=timestamp(row["created_at"]), run_at=timestamp(row["run_at"]),
        updated_at=timestamp(row["updated_at"]), started_at=timestamp(row["started_at"]),
        finished_at=timestamp(row["finished_at"]),
        retry=policy.retry_to_proto(retry, row["non_retryable"] or (), rules),
        timeouts=policy.timeouts_to_proto(timeouts), attempts=[attempt_to_proto(a) for a in attempts],
        schedule_id=row["schedule_id"] or "", scheduled_time=timestamp(row["scheduled_time"]),
        checkpoint=json_value(row["checkpoint"]),
        retried_as=str(row["retried_as"]) if row["retried_as"] else "",
        retry_of=str(row["retry_of"]) if row["retry_of"] else "")
    if state in (TaskState.FAILED, TaskState.EXPIRED):
        err = _task_error(row["error_class"], row["error_message"], row["error_stack"])
        if err is not None:
            out.error.CopyFrom(err)
    return out


def leased_to_proto(shard_id: int, r, lease: duration_pb2.Duration) -> worker_pb2.LeasedTask:
    """A row returned by task_lease_batch as a LeasedTask (lease: the batch's lease duration,
    made once for all its rows and copied into each)."""
    out = worker_pb2.LeasedTask(
        shard_id=shard_id, task_id=str(r["task_id"]), tenant_id=r["tenant_id"], app_id=r["app_id"],
        task_type=r["task_type"], queue=r["queue"], payload_json=bytes(r["payload"]), attempt=r["attempt"],
        max_attempts=r["max_attempts"], lease_epoch=r["lease_epoch"], lease_duration=lease,
        scheduled_at=timestamp(r["run_at"]), schedule_id=r["schedule_id"] or "",
        scheduled_time=timestamp(r["scheduled_time"]))
    if r["start_to_close_s"] is not None:
        out.start_to_close.CopyFrom(policy.duration(r["start_to_close_s"]))
    if r["checkpoint"] is not None:
        out.last_checkpoint_json = bytes(r["checkpoint"])
    return out


def _json(value) -> dict:
    """A stored policy or timeouts; NULL is {} (migration 0013)."""
    if value is None:
        return {}
    return json.loads(value) if isinstance(value, (str, bytes)) else value


MAX_PAGE = 1000
DEFAULT_PAGE = 100
_BULK_KINDS = {tasks_pb2.BULK_OPERATION_KIND_RETRY: "RETRY", tasks_pb2.BULK_OPERATION_KIND_CANCEL: "CANCEL"}
_BULK_STATES = {"RUNNING": tasks_pb2.BULK_OPERATION_STATE_RUNNING,
                "SUCCEEDED": tasks_pb2.BULK_OPERATION_STATE_SUCCEEDED,
                "CANCELED": tasks_pb2.BULK_OPERATION_STATE_CANCELED}


def scope(tenant_id: str, app_id: str) -> tuple[str, str]:
    """(tenant_id, app_id), both required."""
    return _name(tenant_id, "tenant_id"), _name(app_id, "app_id")


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
                      task_type=_name(p.task_type, f"{where}.task_type", required=False) or None,
                      queue=_name(p.queue, f"{where}.queue", required=False) or None,
                      error_class=_name(p.error_class, f"{where}.error_class", required=False) or None,
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
    return _name(value, where)


def operation_id(value: str) -> str:
    """A bulk operation id: 1..200 printable ASCII characters."""
    if not value or len(value) > MAX_NAME or not all(32 < ord(c) < 127 for c in value):
        raise InvalidArgument(f"operation_id must be 1..{MAX_NAME} printable ASCII characters without spaces")
    return value


def bulk_to_proto(row, failures) -> tasks_pb2.BulkOperation:
    """An operation part and its recorded failures in the public shape."""
    return tasks_pb2.BulkOperation(
        operation_id=row["operation_id"],
        kind=tasks_pb2.BulkOperationKind.Value(f"BULK_OPERATION_KIND_{row['kind']}"),
        state=_BULK_STATES[row["state"]], filter=filter_to_proto(TaskFilter.from_json(row["filter"])),
        matched=row["matched"], processed=row["processed"], succeeded=row["succeeded"], failed=row["failed"],
        skipped=row["skipped"], failures=[tasks_pb2.BulkItemFailure(task_id=t, reason=r) for t, r in failures],
        created_at=timestamp(row["created_at"]), finished_at=timestamp(row["finished_at"]))
