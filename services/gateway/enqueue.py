"""The enqueue pipeline's one form and one path to history.

Every edge (EnqueueTask, EnqueueTasks with items or columns, EnqueueScheduled; over gRPC,
REST or the call stream) builds one `Tasks`: a call's tasks as columns (ids, payloads),
`shared` for what every task of the call has in common, and `columns` for the fields the
tasks differ in. A single enqueue is a batch of one. From there one path: `route` cuts it
into parts, one per shard (and per CREATE_CHUNK_BYTES of payload), `request` encodes a part
as one CreateTasksRequest (`columns` on the wire when nothing but ids and payloads differ
and nothing per task is set, else `tasks` with `shared`), and `Creates` sends the parts and
answers in request order.

Parts of one task (single enqueues) are coalesced per shard while a CreateTasks is in
flight (libs/batching): an RPC costs more client and server CPU than an enqueue's Python
(docs/benchmarks/findings.md), so under load one call and one history statement carry many.
Each caller still gets exactly its own answer. Two parts with one key or one task id never
share a call, and history rolls back a whole request when one of its keys conflicts: the
conflicting callers get their 409 and the others are sent again on their own (creates are
idempotent by task id and key); a call refused for what may be one part's fault is retried
part by part; an unavailable or timed-out shard fails every part of the call. A call's
deadline is the latest of its callers'. Parts of several tasks (a batch call's) go at once,
concurrently: history's group commit merges concurrent ones per shard.
"""

from __future__ import annotations

import asyncio
import dataclasses
from typing import Any

from google.protobuf import timestamp_pb2

from ratchet.api.tasks.v1 import tasks_pb2
from ratchet.internal.history.v1 import history_pb2
from ratchet.libs.batching import Batcher
from ratchet.libs.rpc import errors
from ratchet.libs.shardmap import ShardMap, SlotGroups, new_task_id, slot_for_key, slot_of_prefix, slot_prefix
from ratchet.services.gateway.auth import Principal
from ratchet.services.gateway.history_client import HistoryClient
from ratchet.services.gateway.validation import PlainBatch, ValidTask

# Payload bytes one CreateTasks of a batch call carries at most. A call's unkeyed tasks share one
# shard, so its part for that shard can be nearly the whole public request (up to the 64 MiB
# message limit, libs/rpc/server.py); cut it into calls of this size so the internal message, with
# the fields history adds per task, stays well under the limit.
CREATE_CHUNK_BYTES = 16 * 1024 * 1024
# What each task adds to its payload in a CreateTasks message (ids, names, fingerprint, policy).
TASK_OVERHEAD_BYTES = 512
# Most single enqueues one coalesced CreateTasks carries.
MAX_COALESCED = 200

# The NewTask fields a CreateTasksRequest may send once, in `shared`; the others of a task
# (key, fingerprint, due time, schedule) go on each task even when every task has them.
WIRE_SHARED = frozenset({"tenant_id", "app_id", "task_type", "queue", "retry", "timeouts", "non_retryable"})
# The `shared` fields a deployed handler's wire form holds (handler_wire); the rest of WIRE_SHARED
# (tenant_id, app_id, queue) are the caller's, set on each request.
HANDLER_WIRE = frozenset({"task_type", "retry", "timeouts", "non_retryable"})
# ValidTask's fields that travel, in NewTask's names and order.
_VALID_FIELDS = ("task_type", "queue", "retry", "timeouts", "non_retryable", "idempotency_key", "fingerprint",
                 "delay", "run_at")
_MESSAGES = frozenset({"retry", "timeouts", "delay", "run_at", "scheduled_time", "parent"})
_EMPTY: dict[str, Any] = {"non_retryable": []}  # a field's value when a task does not set it ("" or None)
_WHOLE_CALL = (errors.Unavailable, errors.DeadlineExceeded)


@dataclasses.dataclass(slots=True)
class Tasks:
    """One enqueue call's tasks, as columns in request order: what history needs, built once."""

    ids: list[str]  # canonical: the caller's, or minted here
    payloads: list[bytes]  # JSON text as stored
    sizes: list[int]  # bytes of each payload as sent (what the size chunks count)
    shared: dict[str, Any]  # NewTask field -> the value every task has (unset fields absent)
    columns: dict[str, list]  # NewTask field -> one value per task, for the fields the tasks differ in
    where: str = "tasks[{i}]."  # an item's field path in messages ("" for a single enqueue)
    # The HANDLER_WIRE fields of `shared` encoded, when they are a deployed handler's policy
    # without overrides (its handler_wire, built once per deployment); None: encoded per call.
    wire: history_pb2.NewTask | None = None

    def value(self, name: str, i: int) -> Any:
        """Task i's value of a field ("", None or [] when it sets none)."""
        column = self.columns.get(name)
        if column is not None:
            return column[i]
        return self.shared.get(name, _EMPTY.get(name, ""))


def _set(value: Any) -> bool:
    return value is not None and value != "" and value != []


def _same(a: Any, b: Any) -> bool:
    return a is b or a == b  # (a deployed handler's policy without overrides is one object: its Registered)


def handler_wire(task_type: str, retry: tasks_pb2.RetryPolicy, timeouts: tasks_pb2.Timeouts) -> history_pb2.NewTask:
    """The HANDLER_WIRE fields of a task of this type and policy, as CreateTasksRequest.shared
    carries them: built once per deployed handler, copied into each request."""
    wire = history_pb2.NewTask(task_type=task_type)
    wire.retry.CopyFrom(retry)
    wire.timeouts.CopyFrom(timeouts)
    wire.non_retryable.extend(retry.non_retryable)
    return wire


def _wire_of(first: Any, columns: dict[str, list]) -> history_pb2.NewTask | None:
    """first's wire form, when it stands for every task: none of its fields differs between them."""
    wire = first.wire
    return wire if wire is None or not columns or HANDLER_WIRE.isdisjoint(columns) else None


def task_id(p: Principal, t: ValidTask, slots: SlotGroups | None = None) -> str:
    """A task's id: the caller's, else minted (keyed: on the key's slot, Q1; unkeyed: a batch
    call's shared slot per run of 100, or a random one)."""
    if t.task_id:
        return t.task_id  # minted by the caller: its slot routes it, a resend dedupes on it
    return new_task_id(slot_for_key(p.tenant_id, t.idempotency_key) if t.idempotency_key
                       else slots.next() if slots is not None else None)


def of_valid(p: Principal, valid: list[ValidTask], where: str = "tasks[{i}].",
             slots: SlotGroups | None = None) -> Tasks:
    """The form of validated items (validation.validate_task's), ids minted as needed."""
    first = valid[0]
    shared: dict[str, Any] = {"tenant_id": p.tenant_id, "app_id": p.app_id}
    columns: dict[str, list] = {}
    if len(valid) == 1:  # (a single enqueue: everything shared, spelled out on the hot path)
        shared["task_type"], shared["queue"] = first.task_type, first.queue
        shared["retry"], shared["timeouts"] = first.retry, first.timeouts
        for name in ("non_retryable", "idempotency_key", "fingerprint", "delay", "run_at"):
            value = getattr(first, name)
            if _set(value):
                shared[name] = value
        return Tasks(ids=[task_id(p, first, slots)], payloads=[first.payload_json], sizes=[len(first.payload_json)],
                     shared=shared, columns=columns, where=where, wire=first.wire)
    for name in _VALID_FIELDS:
        v0 = getattr(first, name)
        if all(_same(getattr(t, name), v0) for t in valid):
            if _set(v0):
                shared[name] = v0
        else:
            columns[name] = [getattr(t, name) for t in valid]
    payloads = [t.payload_json for t in valid]
    return Tasks(ids=[task_id(p, t, slots) for t in valid], payloads=payloads, sizes=list(map(len, payloads)),
                 shared=shared, columns=columns, where=where, wire=_wire_of(first, columns))


def of_plain(p: Principal, plain: PlainBatch) -> Tasks:
    """The form of a plain batch (validation.plain_batch or columns_batch): two columns and the
    handler's policy (resolved when its deployment was loaded) shared."""
    retry, timeouts, wire = plain.handler.resolve()
    shared: dict[str, Any] = {"tenant_id": p.tenant_id, "app_id": p.app_id, "task_type": plain.task_type,
                              "queue": plain.queue, "retry": retry, "timeouts": timeouts}
    if retry.non_retryable:
        shared["non_retryable"] = list(retry.non_retryable)
    return Tasks(ids=plain.task_ids, payloads=plain.payloads, sizes=plain.sizes, shared=shared, columns={},
                 wire=wire)


def scheduled(tasks: Tasks, schedule_id: str, scheduled_time: timestamp_pb2.Timestamp) -> Tasks:
    """A schedule's slot: the task carries the schedule it fired from (NewTask 14/15)."""
    tasks.shared["schedule_id"] = schedule_id
    tasks.shared["scheduled_time"] = scheduled_time
    return tasks


def merge(forms: list[Tasks]) -> Tasks:
    """Several calls' tasks as one form (coalesced single enqueues), in order: a field all of
    them share with one value stays shared, any other becomes a column. (Plain loops: this runs
    per coalesced call.)"""
    if len(forms) == 1:
        return forms[0]
    first, rest = forms[0], forms[1:]
    names = set(first.shared)
    for f in rest:
        names.update(f.shared)
    for f in forms:
        names.update(f.columns)
    shared: dict[str, Any] = {}
    columns: dict[str, list] = {}
    for name in names:
        v0 = first.shared.get(name)
        if v0 is not None:
            for f in rest:
                v = f.shared.get(name)
                if v is not v0 and (v is None or v != v0):
                    break
            else:
                shared[name] = v0
                continue
        columns[name] = [f.value(name, i) for f in forms for i in range(len(f.ids))]
    ids: list[str] = []
    payloads: list[bytes] = []
    sizes: list[int] = []
    for f in forms:
        ids.extend(f.ids)
        payloads.extend(f.payloads)
        sizes.extend(f.sizes)
    return Tasks(ids=ids, payloads=payloads, sizes=sizes, shared=shared, columns=columns,
                 wire=_wire_of(first, columns))


def _size_chunks(sizes: list[int], idx: list[int]) -> list[list[int]]:
    """The indexes of one shard's tasks (payloads of these sizes) cut into CreateTasks calls of
    at most CREATE_CHUNK_BYTES."""
    if sum(sizes[i] for i in idx) + len(idx) * TASK_OVERHEAD_BYTES <= CREATE_CHUNK_BYTES:
        return [idx]
    out: list[list[int]] = [[]]
    size = 0
    for i in idx:
        n = sizes[i] + TASK_OVERHEAD_BYTES
        if out[-1] and size + n > CREATE_CHUNK_BYTES:
            out.append([])
            size = 0
        out[-1].append(i)
        size += n
    return out


def route(tasks: Tasks, shard_map: ShardMap) -> list[tuple[int, list[int] | None]]:
    """(shard, indexes of its tasks, or None for every task) of each CreateTasks call, in shard
    order. A slot is read once per distinct slot prefix (the SDK mints a call's ids in runs of
    100 sharing one), and the per-task steps are C loops (map, a keyed sort, count): a call of
    1,000 spans most shards."""
    ids, sizes = tasks.ids, tasks.sizes
    n = len(ids)
    if n == 1:  # (a single enqueue: its payload is far under a chunk)
        return [(shard_map.shard_for_slot(slot_of_prefix(slot_prefix(ids[0]))), None)]
    prefixes = list(map(slot_prefix, ids))
    shard_of = {pre: shard_map.shard_for_slot(slot_of_prefix(pre)) for pre in set(prefixes)}
    shards = sorted(set(shard_of.values()))
    if len(shards) == 1:
        by_shard: list[tuple[int, list[int] | None]] = [(shards[0], None)]
    else:  # (indexes ordered by shard, a stable sort: each shard's in call order)
        of = list(map(shard_of.__getitem__, prefixes))
        order = sorted(range(n), key=of.__getitem__)
        by_shard, k = [], 0
        for s in shards:
            m = of.count(s)
            by_shard.append((s, order[k:k + m]))
            k += m
    if sum(sizes) + n * TASK_OVERHEAD_BYTES <= CREATE_CHUNK_BYTES:  # (every part fits one call)
        return by_shard
    return [(s, chunk) for s, idx in by_shard
            for chunk in _size_chunks(sizes, list(range(n)) if idx is None else idx)]


def _put(msg: history_pb2.NewTask, name: str, value: Any) -> None:
    if name in _MESSAGES:
        getattr(msg, name).CopyFrom(value)
    elif name == "non_retryable":
        msg.non_retryable.extend(value)
    else:
        setattr(msg, name, value)


def request(shard_id: int, tasks: Tasks, idx: list[int] | None) -> history_pb2.CreateTasksRequest:
    """One CreateTasks of the tasks at idx (None: all): `columns` when only ids and payloads
    differ and no task sets anything of its own, else `tasks` with `shared`."""
    req = history_pb2.CreateTasksRequest(shard_id=shard_id)
    shared, wire, out = tasks.shared, tasks.wire, req.shared
    if wire is not None:  # (the handler's fields built once: copying them is a fraction of encoding them)
        out.CopyFrom(wire)
        out.tenant_id = shared.get("tenant_id", "")  # (the caller's fields; "" leaves one unset)
        out.app_id = shared.get("app_id", "")
        out.queue = shared.get("queue", "")
    else:
        for name, value in shared.items():
            if name in WIRE_SHARED:
                _put(out, name, value)
    own = [(name, value) for name, value in tasks.shared.items() if name not in WIRE_SHARED]
    ids, payloads = tasks.ids, tasks.payloads
    if not own and not tasks.columns:
        cols = req.columns
        if idx is None:
            cols.task_ids.extend(ids)
            cols.payloads_json.extend(payloads)
        else:
            cols.task_ids.extend(map(ids.__getitem__, idx))
            cols.payloads_json.extend(map(payloads.__getitem__, idx))
        return req
    add, columns = req.tasks.add, list(tasks.columns.items())
    for i in range(len(ids)) if idx is None else idx:
        msg = add(task_id=ids[i], payload_json=payloads[i])
        for name, value in own:
            _put(msg, name, value)
        for name, column in columns:
            if _set(column[i]):
                _put(msg, name, column[i])
    return req


@dataclasses.dataclass(slots=True)
class Part:
    """The tasks of one call that go to one shard in one CreateTasks."""

    shard_id: int
    tasks: Tasks
    idx: list[int] | None  # indexes into tasks (None: all of them)
    deadline: float  # loop time its caller gives up at

    @property
    def n(self) -> int:
        return len(self.tasks.ids) if self.idx is None else len(self.idx)

    def one(self) -> int:
        """The index of a part of one task."""
        return 0 if self.idx is None else self.idx[0]


# A part's answer: history's results for its tasks in order, or None (every task created now
# under the id it was sent with: all_created).
Answer = list[history_pb2.CreateResult] | None


def _marks(part: Part) -> tuple:
    """What a single enqueue may not share a call with: its task id and its key, once per call
    (history would refuse the request); the next call takes the other."""
    i = part.one()
    key = part.tasks.value("idempotency_key", i)
    tid = ("id", part.tasks.ids[i])
    return (tid, ("key", key)) if key else (tid,)


def _conflict(key: str, task_id: str, where: str = "") -> errors.AlreadyExists:
    return errors.AlreadyExists(
        f"{where}idempotency_key {key!r} was already used for a different request, by task {task_id}; "
        f"repeat the original request or use a new key", original_task_id=task_id)


@dataclasses.dataclass(slots=True)
class Created:
    """A call's outcome in request order: each task's id and whether it was there already."""

    ids: list[str]
    deduplicated: list[bool] | None  # None: every task is new


class Creates:
    """The one path from a call's Tasks to history: route, encode, send (single enqueues
    coalesced per shard while `calls_in_flight` CreateTasks are out), answer in order."""

    def __init__(self, history: HistoryClient, shard_map: ShardMap, calls_in_flight: int = 1):
        self._history = history
        self._shard_map = shard_map
        self._singles: Batcher[int, Part, Answer] = Batcher(self._flush, max_in_flight=calls_in_flight,
                                                            max_items=MAX_COALESCED, distinct=_marks)

    @property
    def calls(self) -> int:
        """Coalesced CreateTasks calls made for single enqueues, for tests."""
        return self._singles.flushes

    async def create(self, tasks: Tasks, timeout: float) -> Created:
        """Every task of the call created (or found: deduplicated), in request order; raises
        AlreadyExists for a key conflict (the first item's, counting the others), else the
        first failed part's error."""
        deadline = asyncio.get_running_loop().time() + timeout
        parts = [Part(s, tasks, idx, deadline) for s, idx in route(tasks, self._shard_map)]
        if len(parts) == 1:  # (the usual call: one shard; no task to gather)
            try:
                outcomes: list[Answer | BaseException] = [await self._send(parts[0])]
            except Exception as e:  # noqa: BLE001 - as gather's return_exceptions: answered below
                outcomes = [e]
        else:
            outcomes = await asyncio.gather(*map(self._send, parts), return_exceptions=True)
        return _answered(tasks, parts, outcomes)

    async def _send(self, part: Part) -> Answer:
        # A fan-out's child goes in a request of its own: history tells a request of children by
        # its first and last task (a scan of every task would cost each ordinary create).
        if part.n == 1 and "parent" not in part.tasks.columns:
            return await self._singles.submit(part.shard_id, part)
        (outcome,) = await self._call(part.shard_id, [part])
        if isinstance(outcome, BaseException):
            raise outcome
        return outcome

    async def _call(self, shard_id: int, parts: list[Part]) -> list[Answer | BaseException]:
        """One CreateTasks for these parts (one shard's); each part's answer, or the error."""
        timeout = max(0.001, max(p.deadline for p in parts) - asyncio.get_running_loop().time())
        if len(parts) == 1:
            req = request(shard_id, parts[0].tasks, parts[0].idx)
        else:
            req = request(shard_id, merge([_alone(p) for p in parts]), None)
        try:
            results = await self._history.create(req, timeout)
        except errors.ServiceError as e:
            return [e] * len(parts)
        if results is None:
            return [None] * len(parts)
        out: list[Answer | BaseException] = []
        k = 0
        for p in parts:
            out.append(results[k:k + p.n])
            k += p.n
        return out

    async def _flush(self, shard_id: int, parts: list[Part]) -> list[Answer | BaseException]:
        """Coalesced single enqueues: one call. A conflict rolled the whole request back in
        history, and a refusal may be one part's fault: the other parts go again, alone."""
        outcomes = await self._call(shard_id, parts)
        first = outcomes[0]
        if len(parts) == 1 or isinstance(first, _WHOLE_CALL):
            return outcomes
        if isinstance(first, BaseException):
            again = list(range(len(parts)))
        else:
            again = [i for i, o in enumerate(outcomes) if o is not None and not isinstance(o, BaseException)
                     and not o[0].conflict]
            if len(again) == len(parts) or first is None:
                return outcomes  # no conflict: every part has its answer
        alone = await asyncio.gather(*(self._call(shard_id, [parts[i]]) for i in again))
        for i, (o,) in zip(again, alone, strict=True):
            outcomes[i] = o
        return outcomes

    async def close(self) -> None:
        """Wait for coalesced calls in flight (shutdown)."""
        await self._singles.close()


def _alone(part: Part) -> Tasks:
    """A single enqueue's part as a form of its own (what merge concatenates)."""
    t = part.tasks
    if part.idx is None:
        return t
    (i,) = part.idx
    return Tasks(ids=[t.ids[i]], payloads=[t.payloads[i]], sizes=[t.sizes[i]],
                 shared={**t.shared, **{n: c[i] for n, c in t.columns.items() if _set(c[i])}}, columns={},
                 wire=t.wire)


def _answered(tasks: Tasks, parts: list[Part], outcomes: list[Answer | BaseException]) -> Created:
    """The call's ids in request order from its parts' answers; a conflict (definitive, unlike
    an unavailable shard) is raised first, then the first failed part's error."""
    if len(outcomes) == 1 and outcomes[0] is None:
        return Created(ids=tasks.ids, deduplicated=None)  # (the usual call: one part, all created)
    ids, dedup = tasks.ids, None
    conflicts: list[tuple[int, str]] = []
    failures: list[BaseException] = []
    for part, outcome in zip(parts, outcomes, strict=True):
        if isinstance(outcome, BaseException):
            failures.append(outcome)
            continue
        if outcome is None:
            continue  # every task created under the id it was sent with
        if ids is tasks.ids:
            ids, dedup = list(ids), [False] * len(ids)
        for i, res in zip(range(len(tasks.ids)) if part.idx is None else part.idx, outcome, strict=True):
            ids[i] = res.task_id
            dedup[i] = res.deduplicated
            if res.conflict:
                conflicts.append((i, res.task_id))
    if conflicts:
        i, original = min(conflicts)
        err = _conflict(tasks.value("idempotency_key", i), original, tasks.where.format(i=i))
        if len(conflicts) > 1:
            err.message += f" ({len(conflicts)} items conflict)"
        raise err
    for f in failures:
        raise f if isinstance(f, errors.ServiceError) else errors.Internal(f"shard call failed: {f}")
    return Created(ids=ids, deduplicated=dedup)
