"""The task API's domain: validate, mint ids, route to shards, call history.

Ids: new_task_id() for unkeyed enqueues (the unkeyed tasks of one batch call
share one random slot per run of 100, so a call of 100 is one shard's
CreateTasks and one statement); new_task_id(slot_for_key(tenant, key)) for keyed ones (follow-up
Q1), so a retried keyed enqueue always lands on the shard holding the
original and its unique index deduplicates it. A
schedule's slot (EnqueueScheduled, from the cron service) is a keyed enqueue
whose key is the slot, so a double firing yields one task.
"""

from __future__ import annotations

import asyncio
import re
import time
from collections.abc import Callable

from google.protobuf import timestamp_pb2

from ratchet.api.tasks.v1 import tasks_pb2
from ratchet.internal.gateway.v1 import control_pb2
from ratchet.internal.history.v1 import history_pb2
from ratchet.libs.shardmap import (
    ShardMap,
    SlotGroups,
    new_task_id,
    parse_task_id,
    slot_for_key,
    slot_of_canonical,
    slot_of_prefix,
    slot_prefix,
)
from ratchet.services.gateway import policy, validation
from ratchet.services.gateway.auth import Principal
from ratchet.services.gateway.coalesce import CoalescedCreates
from ratchet.services.gateway.deployments import Deployments
from ratchet.services.gateway.errors import AlreadyExists, GatewayError, Internal, InvalidArgument, NotFound
from ratchet.services.gateway.history_client import HistoryClient

SCHEDULE_ID = re.compile(r"^[A-Za-z0-9_.:\-]{1,128}$")
# Payload bytes one CreateTasks of a batch call carries at most. A call's unkeyed tasks share one
# shard, so its part for that shard can be nearly the whole public request (up to the 64 MiB
# message limit, libs/rpc/server.py); cut it into calls of this size so the internal message, with
# the fields history adds per task, stays well under the limit.
CREATE_CHUNK_BYTES = 16 * 1024 * 1024
# What each task adds to its payload in a CreateTasks message (ids, names, fingerprint, policy).
_TASK_OVERHEAD_BYTES = 512
_MIN_TS, _MAX_TS = -62135596800, 253402300799


def _task_id(p: Principal, t: validation.ValidTask, slots: SlotGroups | None = None) -> str:
    """slots: where an unkeyed task's new id takes its slot (a batch call's), None for a random one."""
    if t.task_id:
        return t.task_id  # minted by the caller: its slot routes it, a resend dedupes on it
    return new_task_id(slot_for_key(p.tenant_id, t.idempotency_key) if t.idempotency_key
                       else slots.next() if slots is not None else None)


def _new_task(p: Principal, t: validation.ValidTask) -> history_pb2.NewTask:
    """A single enqueue's NewTask, every field on the task."""
    msg = history_pb2.NewTask(
        task_id=_task_id(p, t), tenant_id=p.tenant_id, app_id=p.app_id, task_type=t.task_type,
        queue=t.queue, payload_json=t.payload_json, idempotency_key=t.idempotency_key,
        fingerprint=t.fingerprint, retry=t.retry, timeouts=t.timeouts, non_retryable=t.non_retryable)
    if t.delay is not None:
        msg.delay.CopyFrom(t.delay)
    if t.run_at is not None:
        msg.run_at.CopyFrom(t.run_at)
    return msg


def _shared(p: Principal, valid: list[validation.ValidTask]) -> tuple[history_pb2.NewTask, frozenset[str]]:
    """What every task of a batch call has in common, sent once per CreateTasks
    (CreateTasksRequest.shared), and the names of those fields. The policies of tasks
    without overrides are one object (policy.resolve caches them): compared by identity first."""
    first = valid[0]
    shared = history_pb2.NewTask(tenant_id=p.tenant_id, app_id=p.app_id)
    names = {"tenant_id", "app_id"}
    if all(t.task_type == first.task_type for t in valid):
        shared.task_type = first.task_type
        names.add("task_type")
    if all(t.queue == first.queue for t in valid):
        shared.queue = first.queue
        names.add("queue")
    if all(t.retry is first.retry or t.retry == first.retry for t in valid):
        shared.retry.CopyFrom(first.retry)
        names.add("retry")
    if all(t.timeouts is first.timeouts or t.timeouts == first.timeouts for t in valid):
        shared.timeouts.CopyFrom(first.timeouts)
        names.add("timeouts")
    if all(t.non_retryable == first.non_retryable for t in valid):
        shared.non_retryable.extend(first.non_retryable)
        names.add("non_retryable")
    return shared, frozenset(names)


def _add_task(req: history_pb2.CreateTasksRequest, t: validation.ValidTask, task_id: str,
              shared: frozenset[str]) -> None:
    """A batch item's NewTask, added to its request in place, without the fields the request
    sends once (`shared`)."""
    msg = req.tasks.add(task_id=task_id, payload_json=t.payload_json)
    if t.idempotency_key:
        msg.idempotency_key = t.idempotency_key
        msg.fingerprint = t.fingerprint
    if "task_type" not in shared:
        msg.task_type = t.task_type
    if "queue" not in shared:
        msg.queue = t.queue
    if "retry" not in shared:
        msg.retry.CopyFrom(t.retry)
    if "timeouts" not in shared:
        msg.timeouts.CopyFrom(t.timeouts)
    if "non_retryable" not in shared:
        msg.non_retryable.extend(t.non_retryable)
    if t.delay is not None:
        msg.delay.CopyFrom(t.delay)
    if t.run_at is not None:
        msg.run_at.CopyFrom(t.run_at)


def _size_chunks(sizes: list[int], idx: list[int]) -> list[list[int]]:
    """The indexes of one shard's tasks (payloads of these sizes) cut into CreateTasks calls of
    at most CREATE_CHUNK_BYTES."""
    if sum(sizes[i] for i in idx) + len(idx) * _TASK_OVERHEAD_BYTES <= CREATE_CHUNK_BYTES:
        return [idx]
    out: list[list[int]] = [[]]
    size = 0
    for i in idx:
        n = sizes[i] + _TASK_OVERHEAD_BYTES
        if out[-1] and size + n > CREATE_CHUNK_BYTES:
            out.append([])
            size = 0
        out[-1].append(i)
        size += n
    return out


def schedule_key(schedule_id: str, scheduled_time: timestamp_pb2.Timestamp) -> str:
    """The idempotency key of one slot: `sched:<schedule_id>@<scheduled time, RFC 3339 UTC>`."""
    return f"sched:{schedule_id}@{scheduled_time.ToJsonString()}"


def _check_slot(req: control_pb2.EnqueueScheduledRequest) -> None:
    for name in ("tenant_id", "app_id"):
        if not getattr(req, name):
            raise InvalidArgument(f"{name} is required")
    if not SCHEDULE_ID.match(req.schedule_id):
        raise InvalidArgument(f"schedule_id must be 1..128 characters of [A-Za-z0-9_.:-], "
                              f"got {req.schedule_id[:80]!r}")
    ts = req.scheduled_time
    if not req.HasField("scheduled_time") or not (_MIN_TS <= ts.seconds <= _MAX_TS and 0 <= ts.nanos < 10 ** 9):
        raise InvalidArgument("scheduled_time is required: the slot's time, a valid timestamp")
    if not req.HasField("task"):
        raise InvalidArgument("task is required: the schedule's task template as an enqueue")
    for name in ("idempotency_key", "task_id", "delay", "run_at"):
        given = bool(getattr(req.task, name)) if name in ("idempotency_key", "task_id") else req.task.HasField(name)
        if given:
            raise InvalidArgument(f"task.{name} must be empty: a scheduled task is due at its slot and keyed "
                                  f"by it (sched:<schedule_id>@<scheduled_time>)")


def _conflict(key: str, task_id: str, where: str = "") -> AlreadyExists:
    return AlreadyExists(
        f"{where}idempotency_key {key!r} was already used for a different request, by task {task_id}; "
        f"repeat the original request or use a new key", original_task_id=task_id)


class TaskApi:
    """EnqueueTask(s), GetTask, CancelTask for an authenticated app."""

    def __init__(self, history: HistoryClient, shard_map: ShardMap, deployments: Deployments,
                 max_payload_bytes: int, wall: Callable[[], float] = time.time, calls_in_flight: int = 1):
        self.history = history
        # Single enqueues share CreateTasks calls per shard while `calls_in_flight` are out.
        self.creates = CoalescedCreates(history, max_in_flight=calls_in_flight)
        self.shard_map = shard_map
        self.deployments = deployments
        self.max_payload_bytes = max_payload_bytes
        self.wall = wall

    def _validate(self, handlers, reqs, batch: bool) -> list[validation.ValidTask]:
        now = self.wall()
        valid = [validation.validate_task(r, handlers, max_payload_bytes=self.max_payload_bytes, now_s=now,
                                          index=i if batch else None) for i, r in enumerate(reqs)]
        validation.check_unique_keys(valid)
        return valid

    async def enqueue(self, p: Principal, req: tasks_pb2.EnqueueTaskRequest,
                      timeout: float) -> tasks_pb2.EnqueueTaskResponse:
        (t,) = self._validate(await self.deployments.handlers_for(p.app_id), [req], batch=False)
        new = _new_task(p, t)
        res = await self.creates.create(self.shard_map.shard_for_task(new.task_id), new, timeout)
        if res.conflict:
            raise _conflict(t.idempotency_key, res.task_id)
        return tasks_pb2.EnqueueTaskResponse(task_id=res.task_id, deduplicated=res.deduplicated)

    async def enqueue_batch(self, p: Principal, req: tasks_pb2.EnqueueTasksRequest,
                            timeout: float) -> tasks_pb2.EnqueueTasksResponse:
        """All items validated first; then one CreateTasks per shard, concurrently."""
        handlers = await self.deployments.handlers_for(p.app_id)
        if req.HasField("columns"):
            cols = validation.columns_batch(req, handlers, max_payload_bytes=self.max_payload_bytes)
            return await self._enqueue_plain(p, cols, timeout)
        validation.check_batch_size(len(req.tasks))
        plain = validation.plain_batch(req, handlers, max_payload_bytes=self.max_payload_bytes)
        if plain is not None:
            return await self._enqueue_plain(p, plain, timeout)
        valid = self._validate(handlers, req.tasks, batch=True)
        by_shard: dict[int, list[int]] = {}
        slots = SlotGroups()  # ids minted here share a slot per 100 (as the SDK's)
        shared, names = _shared(p, valid)
        minted = [_task_id(p, t, slots) for t in valid]  # (canonical: checked or minted here)
        shard_for_slot = self.shard_map.shard_for_slot
        for i, task_id in enumerate(minted):
            by_shard.setdefault(shard_for_slot(slot_of_canonical(task_id)), []).append(i)
        sizes = [len(t.payload_json) for t in valid]
        parts = [(s, chunk) for s in sorted(by_shard) for chunk in _size_chunks(sizes, by_shard[s])]
        reqs = []
        for s, chunk in parts:
            req = history_pb2.CreateTasksRequest(shard_id=s, shared=shared)
            for i in chunk:
                _add_task(req, valid[i], minted[i], names)
            reqs.append(req)
        outcomes = await asyncio.gather(*(self.history.create(req, timeout) for req in reqs),
                                        return_exceptions=True)
        ids: list[str] = [""] * len(valid)
        conflicts: list[tuple[int, str]] = []
        failures: list[BaseException] = []
        for (_, chunk), outcome in zip(parts, outcomes, strict=True):
            if isinstance(outcome, BaseException):
                failures.append(outcome)
                continue
            if outcome is None:  # (never for `tasks`: all_created answers plain requests only)
                raise Internal("history answered all_created to a request of tasks")
            for i, res in zip(chunk, outcome, strict=True):
                ids[i] = res.task_id
                if res.conflict:
                    conflicts.append((i, res.task_id))
        if conflicts:
            # Definitive, unlike an unavailable shard: report it first.
            i, original = min(conflicts)
            err = _conflict(valid[i].idempotency_key, original, f"tasks[{i}].")
            if len(conflicts) > 1:
                err.message += f" ({len(conflicts)} items conflict)"
            raise err
        for f in failures:
            raise f if isinstance(f, GatewayError) else GatewayError(f"shard call failed: {f}")
        return tasks_pb2.EnqueueTasksResponse(task_ids=ids)

    async def _enqueue_plain(self, p: Principal, plain: validation.PlainBatch,
                             timeout: float) -> tasks_pb2.EnqueueTasksResponse:
        """enqueue_batch of plain tasks: CreateTasksRequest.columns per shard (no NewTask
        per task); the ids come back as sent unless history answers per task."""
        retry, timeouts = policy.resolve(None, None, plain.handler, where="retry")
        shared = history_pb2.NewTask(tenant_id=p.tenant_id, app_id=p.app_id, task_type=plain.task_type,
                                     queue=plain.queue, retry=retry, timeouts=timeouts,
                                     non_retryable=retry.non_retryable)
        ids, payloads = plain.task_ids, plain.payloads
        parts = self._plain_parts(plain)
        reqs = []
        for s, chunk in parts:
            cols = (history_pb2.TaskColumns(task_ids=ids, payloads_json=payloads) if chunk is None else
                    history_pb2.TaskColumns(task_ids=list(map(ids.__getitem__, chunk)),
                                           payloads_json=list(map(payloads.__getitem__, chunk))))
            reqs.append(history_pb2.CreateTasksRequest(shard_id=s, shared=shared, columns=cols))
        if len(reqs) == 1:  # (the usual call: one shard; no task to gather)
            try:
                outcomes = [await self.history.create(reqs[0], timeout)]
            except Exception as e:  # noqa: BLE001 - as gather's return_exceptions
                outcomes = [e]
        else:
            outcomes = await asyncio.gather(*(self.history.create(req, timeout) for req in reqs),
                                            return_exceptions=True)
        out = ids
        for (_, chunk), outcome in zip(parts, outcomes, strict=True):
            if isinstance(outcome, BaseException):
                raise outcome if isinstance(outcome, GatewayError) else GatewayError(f"shard call failed: {outcome}")
            if outcome is not None:  # answered per task (a resent id): the ids it names
                out = list(out) if out is ids else out
                for i, res in zip(range(len(ids)) if chunk is None else chunk, outcome, strict=True):
                    out[i] = res.task_id
        return tasks_pb2.EnqueueTasksResponse(task_ids=out)

    def _plain_parts(self, plain: validation.PlainBatch) -> list[tuple[int, list[int] | None]]:
        """(shard, indexes of its tasks, or None for every task) of each CreateTasks call, in shard
        order. A slot is read once per distinct slot prefix (the SDK mints a call's ids in runs of
        100 sharing one), and the per-task steps are C loops (map, a keyed sort, count): a call of
        1,000 spans most shards."""
        ids, sizes = plain.task_ids, plain.sizes
        n = len(ids)
        prefixes = list(map(slot_prefix, ids))
        shard_of = {pre: self.shard_map.shard_for_slot(slot_of_prefix(pre)) for pre in set(prefixes)}
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
        if sum(sizes) + n * _TASK_OVERHEAD_BYTES <= CREATE_CHUNK_BYTES:  # (every part fits one call)
            return by_shard
        return [(s, chunk) for s, idx in by_shard
                for chunk in _size_chunks(sizes, list(range(n)) if idx is None else idx)]

    async def enqueue_scheduled(self, req: control_pb2.EnqueueScheduledRequest,
                                timeout: float) -> control_pb2.EnqueueScheduledResponse:
        """One slot of a schedule: a public enqueue for (tenant, app), keyed by the slot.

        The key routes every re-send of the slot to one shard, whose unique
        index returns the original task (deduplicated) instead of a second one.
        """
        _check_slot(req)
        owner, handlers = await self.deployments.owner_and_handlers(req.app_id)
        if owner is not None and owner != req.tenant_id:
            raise InvalidArgument(f"app {req.app_id[:64]} does not belong to tenant {req.tenant_id[:64]}")
        keyed = tasks_pb2.EnqueueTaskRequest()
        keyed.CopyFrom(req.task)
        keyed.idempotency_key = schedule_key(req.schedule_id, req.scheduled_time)
        t = validation.validate_task(keyed, handlers, max_payload_bytes=self.max_payload_bytes, now_s=self.wall(),
                                     where="task.")
        new = _new_task(Principal(req.tenant_id, req.app_id, ""), t)
        new.schedule_id = req.schedule_id
        new.scheduled_time.CopyFrom(req.scheduled_time)
        res = await self.creates.create(self.shard_map.shard_for_task(new.task_id), new, timeout)
        if res.conflict:
            raise _conflict(t.idempotency_key, res.task_id, "task.")
        return control_pb2.EnqueueScheduledResponse(task_id=res.task_id, deduplicated=res.deduplicated)

    def _route(self, task_id: str) -> tuple[str, int]:
        canonical = parse_task_id(task_id)
        if canonical is None:
            raise InvalidArgument(f"task_id {task_id[:80]!r} is not a Ratchet task id (a UUID as returned by enqueue)")
        return canonical, self.shard_map.shard_for_task(canonical)

    async def get(self, p: Principal, req: tasks_pb2.GetTaskRequest, timeout: float) -> tasks_pb2.GetTaskResponse:
        task_id, shard = self._route(req.task_id)
        try:
            resp = await self.history.get_task(shard, task_id, p.tenant_id, timeout)
        except NotFound:
            raise NotFound(f"task {task_id} not found") from None
        return tasks_pb2.GetTaskResponse(task=resp.task)

    async def cancel(self, p: Principal, req: tasks_pb2.CancelTaskRequest,
                     timeout: float) -> tasks_pb2.CancelTaskResponse:
        task_id, shard = self._route(req.task_id)
        try:
            resp = await self.history.cancel_task(shard, task_id, p.tenant_id, timeout)
        except NotFound:
            raise NotFound(f"task {task_id} not found") from None
        return tasks_pb2.CancelTaskResponse(state=resp.state, cancel_requested=resp.cancel_requested)
