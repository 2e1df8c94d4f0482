"""CreateTasksRequest -> the committer's one form (enqueue.Request): validation
(INVALID_ARGUMENT with what to fix, nothing written) into columns, and each policy converted
once per wire form. The field checks every RPC shares are convert.py's (one level up)."""

from __future__ import annotations

import dataclasses
import datetime as dt
import functools

from ratchet.api.tasks.v1 import tasks_pb2
from ratchet.internal.history.v1 import history_pb2
from ratchet.libs.fastcheck import first_bad_json
from ratchet.libs.shardmap import all_canonical
from ratchet.services.history import convert, policy
from ratchet.services.history.enqueue import Batch, Policy, Request
from ratchet.services.history.errors import InvalidArgument

MAX_RULES = 100


def _idempotency_key(key: str, where: str) -> str | None:
    if not key:
        return None
    if len(key) > convert.MAX_NAME or not all(32 <= ord(c) < 127 for c in key):
        raise InvalidArgument(f"{where} must be 1..{convert.MAX_NAME} printable ASCII characters")
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
    return Shared(tenant_id=convert.name(sh.tenant_id, "shared.tenant_id", required=False),
                  app_id=convert.name(sh.app_id, "shared.app_id", required=False),
                  task_type=convert.name(sh.task_type, "shared.task_type", required=False),
                  queue=convert.name(sh.queue, "shared.queue", required=False),
                  retry=retry, timeouts=timeouts, non_retryable=non_retryable,
                  policy=_policy(retry or _NO_RETRY, timeouts or _NO_TIMEOUTS, non_retryable, "shared"))


_NO_RETRY = tasks_pb2.RetryPolicy()
_NO_TIMEOUTS = tasks_pb2.Timeouts()


def _own_or_shared(own: str, common: str, where: str, *, required: bool = True) -> str:
    """A task's name field: its own (checked), else the request's shared one (checked once)."""
    if own:
        if common:
            raise InvalidArgument(f"{where} is set on the task and in shared: send it in one place")
        return convert.name(own, where)
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
    schedule_id = convert.name(p.schedule_id, f"{w}.schedule_id") if p.schedule_id else None
    scheduled_time = p.scheduled_time.ToDatetime(tzinfo=dt.UTC) if p.HasField("scheduled_time") else None
    return (convert.task_id(p.task_id, f"{w}.task_id"), convert.payload(p.payload_json, f"{w}.payload_json"),
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
    if not 1 <= n <= convert.MAX_BATCH:
        raise InvalidArgument(f"columns.task_ids holds {n} ids; send 1..{convert.MAX_BATCH}")
    if len(payloads) != n:
        raise InvalidArgument(f"columns holds {n} task_ids and {len(payloads)} payloads_json: "
                              "send one of each per task")
    if not all_canonical(ids):
        ids = [convert.task_id(v, f"columns.task_ids[{i}]") for i, v in enumerate(ids)]
    if len(set(ids)) != n:
        seen: dict[str, int] = {}
        for i, v in enumerate(ids):
            if v in seen:
                raise InvalidArgument(f"columns.task_ids[{seen[v]}] and columns.task_ids[{i}] are the same task id")
            seen[v] = i
    if first_bad_json(payloads) != -1 or max(map(len, payloads)) > convert.MAX_PAYLOAD_BYTES:
        for i, raw in enumerate(payloads):
            convert.payload(raw, f"columns.payloads_json[{i}]")  # (raises for the first bad one)
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
        convert.name(name, f"{w}.non_retryable[{j}]")
    for j, name in enumerate(retry_p.non_retryable):
        convert.name(name, f"{w}.retry.non_retryable[{j}]")
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
        convert.name(name, f"{where} key")
        out[name] = policy.rule_from_proto(p.rules[name], f"{where}[{name!r}]")
    return out
