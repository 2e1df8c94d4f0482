"""Edge validation of enqueue requests: every rule that can refuse a task,
checked before anything is sent to history, so bad input writes nothing.

Pure functions over the request messages; no I/O.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import math
import re
from typing import TYPE_CHECKING

from google.protobuf import duration_pb2, json_format, struct_pb2, timestamp_pb2

from ratchet.api.tasks.v1 import tasks_pb2
from ratchet.libs.fastcheck import first_bad_json, json_value_ok
from ratchet.libs.rpc.errors import InvalidArgument, TooLarge
from ratchet.libs.shardmap import all_canonical, new_task_ids, parse_task_id
from ratchet.services.gateway import policy

if TYPE_CHECKING:  # (deployments imports the enqueue path, which imports this module)
    from ratchet.internal.history.v1 import history_pb2
    from ratchet.services.gateway.deployments import Handlers, Registered

MAX_BATCH = 1000
MAX_DELAY_S = 365 * 86400
MAX_KEY_LEN = 200
DEFAULT_QUEUE = "default"
QUEUE_NAME = re.compile(r"^[A-Za-z0-9_.\-]{1,64}$")
_PRINTABLE = re.compile(r"^[\x20-\x7e]{1,200}$")
_MIN_TS, _MAX_TS = -62135596800, 253402300799  # 0001-01-01 .. 9999-12-31, Timestamp's range
_SAFE_INT = 2 ** 53


@dataclasses.dataclass
class ValidTask:
    """One enqueue request that passed every check, with what history needs."""

    task_type: str
    queue: str
    payload_json: bytes
    idempotency_key: str
    delay: duration_pb2.Duration | None
    run_at: timestamp_pb2.Timestamp | None
    retry: tasks_pb2.RetryPolicy
    timeouts: tasks_pb2.Timeouts
    non_retryable: list[str]
    fingerprint: str
    task_id: str = ""  # minted by the caller (canonical form), or "" for the gateway to mint
    wire: history_pb2.NewTask | None = None  # the handler's wire form, when the task takes its policy as is


_encode_str = json.encoder.encode_basestring  # what json.dumps(ensure_ascii=False) quotes strings with


class _NonFinite(Exception):
    """NaN or Infinity in a payload; path collects where, on the way out."""

    def __init__(self) -> None:
        super().__init__()
        self.path: list[str] = []


def payload_json(v: struct_pb2.Value, where: str = "payload") -> str:
    """The stored payload: the Value as compact JSON with sorted keys, integral numbers as
    ints, unicode unescaped; canonical_json of the Value's plain data, rendered straight from
    the Value (half the cost of building the data and dumping it, per enqueued task). A test
    holds the two to the same bytes over generated payloads."""
    try:
        return _render(v)
    except _NonFinite as e:
        raise InvalidArgument(f"{where}{''.join(reversed(e.path))} holds NaN or Infinity, "
                              f"which JSON cannot carry") from None


def _render(v: struct_pb2.Value) -> str:
    kind = v.WhichOneof("kind")
    if kind == "struct_value":
        parts = []
        fields = v.struct_value.fields
        for k in sorted(fields):  # (the map's keys in C; .items() is the ItemsView ABC, per field in Python)
            x = fields[k]
            try:
                parts.append(_encode_str(k) + ":" + _render(x))
            except _NonFinite as e:
                e.path.append(f".{k}")
                raise
        return "{" + ",".join(parts) + "}"
    if kind == "number_value":
        n = v.number_value
        if not math.isfinite(n):
            raise _NonFinite()
        return int.__repr__(int(n)) if n.is_integer() and abs(n) < _SAFE_INT else float.__repr__(n)
    if kind == "string_value":
        return _encode_str(v.string_value)
    if kind == "bool_value":
        return "true" if v.bool_value else "false"
    if kind == "list_value":
        parts = []
        for i, x in enumerate(v.list_value.values):
            try:
                parts.append(_render(x))
            except _NonFinite as e:
                e.path.append(f"[{i}]")
                raise
        return "[" + ",".join(parts) + "]"
    return "null"


class _Constant(ValueError):
    """NaN, Infinity or -Infinity in JSON text: Python's scanner takes them, JSON has none."""


def _no_constant(name: str):
    raise _Constant(f"{name} is not JSON (no NaN or Infinity)")


_strict_loads = json.JSONDecoder(parse_constant=_no_constant).decode


def json_text_ok(text: str) -> bool:
    """Whether text is one JSON value, alone: the C check, then Python's scanner for what
    it leaves undecided (libs/fastcheck)."""
    return first_bad_json((text,)) == -1 or json_value_ok(text)


def _present(texts: list[str]) -> list[str]:
    """The payloads a batch sets (an empty one is stored as null, not checked)."""
    return texts if "" not in texts else [x for x in texts if x]


def check_json_text(text: str, where: str) -> None:
    """INVALID_ARGUMENT naming `where` unless text is one JSON value (whitespace around it allowed)."""
    if json_text_ok(text):
        return
    try:
        _strict_loads(text)
    except ValueError as e:
        raise InvalidArgument(f"{where} must be one JSON value: {e}") from None


def _json_as_printed(x):
    """Plain data parsed from JSON text as _value_as_printed renders the same value held in a
    Value (numbers are doubles there), so a fingerprint reads payload and payload_json alike."""
    if isinstance(x, dict):
        return {k: _json_as_printed(v) for k, v in x.items()}
    if isinstance(x, list):
        return [_json_as_printed(v) for v in x]
    if isinstance(x, int) and not isinstance(x, bool):
        try:
            return float(x)
        except OverflowError:  # beyond a double: no Value holds it; the digits stay
            return x
    return x


def canonical_json(data) -> bytes:
    """Compact JSON with sorted keys: the stored payload and the fingerprint's input."""
    return json.dumps(data, sort_keys=True, separators=(",", ":"), ensure_ascii=False,
                      allow_nan=False).encode()


def check_batch_size(n: int) -> None:
    if n == 0:
        raise InvalidArgument("tasks is empty: send 1..1000 tasks")
    if n > MAX_BATCH:
        raise InvalidArgument(f"a batch holds at most {MAX_BATCH} tasks, got {n}; split it (nothing was enqueued)")


def _check_schedule(req: tasks_pb2.EnqueueTaskRequest, where: str, now_s: float) -> None:
    if req.HasField("delay") and req.HasField("run_at"):
        raise InvalidArgument(f"{where}delay and {where}run_at are exclusive: set one of them")
    if req.HasField("delay"):
        s = policy.check_duration(req.delay, f"{where}delay")
        if s < 0:
            raise InvalidArgument(f"{where}delay must be >= 0, got {s}s")
        if s > MAX_DELAY_S:
            raise InvalidArgument(f"{where}delay must be at most 365 days, got {s}s")
    if req.HasField("run_at"):
        ts = req.run_at
        if not (_MIN_TS <= ts.seconds <= _MAX_TS and 0 <= ts.nanos <= 999_999_999):
            raise InvalidArgument(f"{where}run_at is not a valid timestamp")
        if ts.seconds - now_s > MAX_DELAY_S:
            raise InvalidArgument(f"{where}run_at must be at most 365 days from now")


def _check_task_id(req: tasks_pb2.EnqueueTaskRequest, where: str) -> str:
    if not req.task_id:
        return ""
    if req.idempotency_key:
        raise InvalidArgument(f"{where}task_id and {where}idempotency_key are exclusive: send the key for "
                              f"deduplication by content, or a task_id minted per call for retries")
    canonical = parse_task_id(req.task_id)
    if canonical is None:
        raise InvalidArgument(f"{where}task_id {req.task_id[:80]!r} is not a Ratchet task id (a UUIDv8 carrying "
                              f"its routing slot): mint it with the SDK, or leave it empty")
    return canonical


def _check_queue(queue: str, where: str) -> str:
    """The queue's name ("default" when empty), or INVALID_ARGUMENT naming `{where}queue`."""
    if not queue:
        return DEFAULT_QUEUE
    if not QUEUE_NAME.match(queue):
        raise InvalidArgument(f"{where}queue must be 1..64 characters of [A-Za-z0-9_.-], got {queue[:80]!r}")
    return queue


def _check_names(req: tasks_pb2.EnqueueTaskRequest, where: str) -> str:
    queue = _check_queue(req.queue, where)
    key = req.idempotency_key
    if key and not _PRINTABLE.match(key):
        raise InvalidArgument(f"{where}idempotency_key must be 1..{MAX_KEY_LEN} printable ASCII characters "
                              f"(got {len(key)} characters)")
    return queue


def handler_for(task_type: str, handlers: Handlers | None, where: str, field: str = "task_type") -> Registered:
    """The registered handler of a type, or INVALID_ARGUMENT naming `{where}{field}` (the enqueue's
    task_type, StartWorkflow's workflow_type) and what the deployment registers."""
    if handlers is None:
        raise InvalidArgument("the app has no deployment: deploy the app first (`ratchet deploy DIR --app NAME`)")
    if not task_type:
        raise InvalidArgument(f"{where}{field} is required; registered types: {', '.join(sorted(handlers))}")
    handler = handlers.get(task_type)
    if handler is None:
        raise InvalidArgument(f"{where}{field} {task_type[:200]!r} is not registered by the app's active "
                              f"deployment; registered types: {', '.join(sorted(handlers))}")
    return handler


def check_kind(handler: Registered, workflow: bool, where: str, field: str = "task_type") -> None:
    """A handler of the kind the edge serves: TaskService enqueues tasks, WorkflowService starts
    workflows (a run is a task, but the two APIs keep to their own kind)."""
    if handler.workflow == workflow:
        return
    name = handler.handler.name
    if handler.workflow:
        raise InvalidArgument(f"{where}{field} {name!r} is a workflow; start it with POST /v1/workflows "
                              f"(WorkflowService.StartWorkflow, Client.start_workflow)")
    raise InvalidArgument(f"{where}{field} {name!r} is a task handler; enqueue it with POST /v1/tasks "
                          f"(TaskService.EnqueueTask, Client.enqueue)")


# The fields the fast fingerprint renders itself; any other field set takes the general path.
_FAST_FIELDS = frozenset({"task_type", "payload", "payload_json", "queue", "idempotency_key"})


def _value_as_printed(v: struct_pb2.Value):
    """A Value exactly as json_format.MessageToDict renders it (numbers stay floats)."""
    kind = v.WhichOneof("kind")
    if kind is None or kind == "null_value":
        return None
    if kind == "struct_value":
        return {k: _value_as_printed(x) for k, x in v.struct_value.fields.items()}
    if kind == "list_value":
        return [_value_as_printed(x) for x in v.list_value.values]
    return getattr(v, kind)


def fingerprint(req: tasks_pb2.EnqueueTaskRequest, queue: str) -> str:
    """sha256 of the canonical request (key excluded): a retry matches, a changed request does not.

    Stored with the key and compared on every retry for 24 h, so its bytes never change: the
    common request (type, queue, payload) is rendered here as MessageToDict would render it,
    without its cost (it was half of validate_task); anything else goes through MessageToDict.
    A test compares the two paths over generated requests."""
    names = {f.name for f, _ in req.ListFields()}
    if names <= _FAST_FIELDS:
        data = {"queue": queue}
        if req.task_type:
            data["task_type"] = req.task_type
        if "payload" in names:
            data["payload"] = _value_as_printed(req.payload)
        elif "payload_json" in names:
            data["payload"] = _json_as_printed(json.loads(req.payload_json))
        return "sha256:" + hashlib.sha256(canonical_json(data)).hexdigest()
    return fingerprint_general(req, queue)


def fingerprint_general(req: tasks_pb2.EnqueueTaskRequest, queue: str) -> str:
    """The fingerprint of any request: its canonical ProtoJSON, key excluded, queue resolved."""
    canon = tasks_pb2.EnqueueTaskRequest()
    canon.CopyFrom(req)
    canon.queue = queue
    canon.ClearField("idempotency_key")
    canon.ClearField("payload_json")
    data = json_format.MessageToDict(canon, preserving_proto_field_name=True)
    if req.payload_json:  # (read as `payload` is: one fingerprint for both forms)
        data["payload"] = _json_as_printed(json.loads(req.payload_json))
    return "sha256:" + hashlib.sha256(canonical_json(data)).hexdigest()


def validate_task(req: tasks_pb2.EnqueueTaskRequest, handlers: Handlers | None,
                  *, max_payload_bytes: int, now_s: float, index: int | None = None,
                  where: str | None = None, workflow: bool = False) -> ValidTask:
    """Check one request and resolve its policy; raise InvalidArgument/TooLarge naming the field
    (prefixed with where, e.g. "task_template.", else "tasks[i]." in a batch). The type must be
    a handler of the kind asked for (a task unless `workflow`: StartWorkflow's enqueue).

    Runs per task of a batch call: each presence test is made once."""
    if where is None:
        where = "" if index is None else f"tasks[{index}]."
    queue = _check_names(req, where)
    task_id = _check_task_id(req, where)
    has_delay, has_run_at = req.HasField("delay"), req.HasField("run_at")
    if has_delay or has_run_at:
        _check_schedule(req, where, now_s)
    has_retry, has_timeouts = req.HasField("retry"), req.HasField("timeouts")
    if has_retry:
        policy.check_retry(req.retry, f"{where}retry")
    if has_timeouts:
        policy.check_timeouts(req.timeouts, f"{where}timeouts")
    if req.payload_json:
        if req.HasField("payload"):
            raise InvalidArgument(f"{where}payload and {where}payload_json are exclusive: send the payload in one of "
                                  f"them")
        check_json_text(req.payload_json, f"{where}payload_json")
        payload = req.payload_json.encode()
    else:
        payload = payload_json(req.payload, f"{where}payload").encode() if req.HasField("payload") else b"null"
    if len(payload) > max_payload_bytes:
        raise TooLarge(f"{where}payload is {len(payload)} bytes as compact JSON; the limit is {max_payload_bytes} "
                       f"bytes: store large data elsewhere and pass a reference")
    registered = handler_for(req.task_type, handlers, where)
    if registered.workflow != workflow:
        check_kind(registered, workflow, where)
    retry, timeouts, wire = registered.resolve(req.retry if has_retry else None,
                                               req.timeouts if has_timeouts else None, f"{where}retry")
    return ValidTask(
        task_type=req.task_type, queue=queue, payload_json=payload, idempotency_key=req.idempotency_key,
        delay=req.delay if has_delay else None, run_at=req.run_at if has_run_at else None,
        retry=retry, timeouts=timeouts, non_retryable=list(retry.non_retryable),
        # Only a key's fingerprint is ever compared (history refuses a key reused for another request).
        fingerprint=fingerprint(req, queue) if req.idempotency_key else "", task_id=task_id, wire=wire)


@dataclasses.dataclass(slots=True)
class PlainBatch:
    """A batch call of plain tasks, checked as columns: one task type and one queue, each item
    with its own id and its payload as JSON text, nothing else (the SDK's enqueue_batch)."""

    task_type: str
    queue: str  # resolved ("default" when unset)
    handler: Registered
    task_ids: list[str]  # canonical, unique
    payloads: list[bytes]  # JSON text, b"null" where none was sent
    sizes: list[int]  # len of each payload as sent (0: none)


def _varint_len(n: int) -> int:
    size = 1
    while n >= 0x80:
        n >>= 7
        size += 1
    return size


def _field_len(n: int) -> int:
    """Bytes a length-delimited field with a one-byte tag and n bytes of content takes (0: unset)."""
    return 1 + _varint_len(n) + n if n else 0


def _plain_size(type_len: int, queue_len: int, sizes: list[int]) -> int:
    """EnqueueTasksRequest.ByteSize() of tasks that set only task_type, queue (these lengths),
    task_id (36 characters) and payload_json (sizes); any other field set adds to it."""
    const = _field_len(type_len) + _field_len(queue_len) + 38
    n, largest = len(sizes), max(sizes)
    if largest < 0x80 and const + largest + 2 < 0x80:  # every length is one byte: sums in C
        return n * (2 + const) + sum(sizes) + 2 * (n - sizes.count(0))
    total = 0
    for k in sizes:
        inner = const + _field_len(k)
        total += 1 + _varint_len(inner) + inner
    return total


def plain_batch(req: tasks_pb2.EnqueueTasksRequest, handlers: Handlers | None, *,
                max_payload_bytes: int) -> PlainBatch | None:
    """The batch as columns when every item is plain and valid, else None: the per-task path
    (validate_task), which also finds and names every error. A few C calls and list builds per
    call instead of a run of Python steps per task: one type and queue compared by list.count, ids
    by one regex, "nothing else set" by the request's serialized size."""
    tasks = req.tasks
    n = len(tasks)
    if handlers is None or n < 2:
        return None
    first = tasks[0]
    task_type, queue = first.task_type, first.queue
    handler = handlers.get(task_type)
    if handler is None or handler.workflow or (queue and not QUEUE_NAME.match(queue)):
        return None  # (the per-task path names the error)
    if [t.task_type for t in tasks].count(task_type) != n:
        return None
    if queue and [t.queue for t in tasks].count(queue) != n:  # (an empty one differs in size)
        return None
    ids = [t.task_id for t in tasks]
    if not all_canonical(ids) or len(set(ids)) != n:
        return None
    texts = [t.payload_json for t in tasks]
    payloads = list(map(str.encode, texts))
    sizes = list(map(len, payloads))
    if max(sizes) > max_payload_bytes:
        return None
    if req.ByteSize() != _plain_size(len(task_type.encode()), len(queue.encode()), sizes):
        return None  # some item sets another field (or one unknown to this gateway)
    check = _present(texts)
    if first_bad_json(check) != -1 and not all(map(json_value_ok, check)):
        return None
    if 0 in sizes:
        payloads = [p or b"null" for p in payloads]
    return PlainBatch(task_type=task_type, queue=queue or DEFAULT_QUEUE, handler=handler, task_ids=ids,
                      payloads=payloads, sizes=sizes)


def columns_batch(req: tasks_pb2.EnqueueTasksRequest, handlers: Handlers | None, *,
                  max_payload_bytes: int) -> PlainBatch:
    """EnqueueTasksRequest.columns checked, as the PlainBatch plain_batch finds in items:
    INVALID_ARGUMENT (or RESOURCE_EXHAUSTED for a payload over the limit) naming
    `columns.<field>[i]`. Ids left empty are minted here (task_ids empty: one per payload)."""
    if req.tasks:
        raise InvalidArgument("tasks and columns are exclusive: send the batch in one of them")
    cols = req.columns
    ids, texts = list(cols.task_ids), list(cols.payloads_json)
    if ids and texts and len(ids) != len(texts):
        raise InvalidArgument(f"columns holds {len(ids)} task_ids and {len(texts)} payloads_json: send one of "
                              f"each per task (or leave one of them empty)")
    n = len(ids) or len(texts)
    if n == 0:
        raise InvalidArgument("columns is empty: send 1..1000 task_ids or payloads_json (one per task)")
    check_batch_size(n)
    handler = handler_for(cols.task_type, handlers, "columns.")
    check_kind(handler, False, "columns.")
    queue = _check_queue(cols.queue, "columns.")
    ids = _column_ids(ids, n)
    payloads, sizes = _column_payloads(texts or [""] * n, max_payload_bytes)
    return PlainBatch(task_type=cols.task_type, queue=queue, handler=handler, task_ids=ids,
                      payloads=payloads, sizes=sizes)


def _column_ids(ids: list[str], n: int) -> list[str]:
    """columns.task_ids canonical and unique (n minted when it is empty), or the first bad one named."""
    if not ids:
        return new_task_ids(n)
    if not all_canonical(ids):
        for i, v in enumerate(ids):
            canonical = parse_task_id(v)
            if canonical is None:
                raise InvalidArgument(f"columns.task_ids[{i}] {v[:80]!r} is not a Ratchet task id (a UUIDv8 "
                                      f"carrying its routing slot): mint it with the SDK, or leave task_ids empty")
            ids[i] = canonical
    if len(set(ids)) != n:
        seen: dict[str, int] = {}
        for i, v in enumerate(ids):
            if v in seen:
                raise InvalidArgument(f"columns.task_ids[{seen[v]}] and columns.task_ids[{i}] are the same task "
                                      f"id; task ids must be unique within a batch")
            seen[v] = i
    return ids


def _column_payloads(texts: list[str], max_payload_bytes: int) -> tuple[list[bytes], list[int]]:
    """columns.payloads_json as (payloads, sizes as sent), b"null" for an empty one, or the
    first one over the limit or not JSON named."""
    payloads = list(map(str.encode, texts))
    sizes = list(map(len, payloads))
    if max(sizes) > max_payload_bytes:
        i = next(i for i, k in enumerate(sizes) if k > max_payload_bytes)
        raise TooLarge(f"columns.payloads_json[{i}] is {sizes[i]} bytes; the limit is {max_payload_bytes} bytes: "
                       f"store large data elsewhere and pass a reference")
    if first_bad_json(_present(texts)) != -1:
        for i, x in enumerate(texts):
            if x:
                check_json_text(x, f"columns.payloads_json[{i}]")  # (raises for one not JSON)
    if 0 in sizes:
        payloads = [p or b"null" for p in payloads]
    return payloads, sizes


def check_unique_keys(tasks: list[ValidTask]) -> None:
    """Two items of one batch may not share an idempotency key or a task id: which one would
    win is undefined."""
    seen: dict[str, int] = {}
    for i, t in enumerate(tasks):
        for what, value in (("idempotency_key", t.idempotency_key), ("task_id", t.task_id)):
            if not value:
                continue
            if (what, value) in seen:
                raise InvalidArgument(f"tasks[{seen[what, value]}] and tasks[{i}] share {what} {value!r}; "
                                      f"{what}s must be unique within a batch")
            seen[what, value] = i
