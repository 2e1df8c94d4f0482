"""The task API's domain: validate each edge's request into the enqueue form
(enqueue.Tasks), which goes to history on one path (enqueue.Creates); GetTask and
CancelTask route by the id.

Ids: new_task_id() for unkeyed enqueues (the unkeyed tasks of one batch call
share one random slot per run of 100, so a call of 100 is one shard's
CreateTasks and one statement); new_task_id(slot_for_key(tenant, key)) for keyed ones (follow-up
Q1), so a retried keyed enqueue always lands on the shard holding the
original and its unique index deduplicates it. A
schedule's slot (EnqueueScheduled, from the cron service) is a keyed enqueue
whose key is the slot, so a double firing yields one task.
"""

from __future__ import annotations

import re
import time
from collections.abc import Callable

from google.protobuf import timestamp_pb2

from ratchet.api.tasks.v1 import tasks_pb2
from ratchet.internal.gateway.v1 import control_pb2
from ratchet.libs.rpc.errors import InvalidArgument, NotFound
from ratchet.libs.shardmap import ShardMap, SlotGroups, parse_task_id
from ratchet.services.gateway import enqueue, validation
from ratchet.services.gateway.auth import Principal
from ratchet.services.gateway.deployments import Deployments
from ratchet.services.gateway.history_client import HistoryClient

SCHEDULE_ID = re.compile(r"^[A-Za-z0-9_.:\-]{1,128}$")
_MIN_TS, _MAX_TS = -62135596800, 253402300799


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


class TaskApi:
    """EnqueueTask(s), GetTask, CancelTask for an authenticated app."""

    def __init__(self, history: HistoryClient, shard_map: ShardMap, deployments: Deployments,
                 max_payload_bytes: int, wall: Callable[[], float] = time.time, calls_in_flight: int = 1):
        self.history = history
        # Every enqueue's one path to history; single enqueues share CreateTasks calls per shard
        # while `calls_in_flight` are out.
        self.creates = enqueue.Creates(history, shard_map, calls_in_flight=calls_in_flight)
        self.shard_map = shard_map
        self.deployments = deployments
        self.max_payload_bytes = max_payload_bytes
        self.wall = wall

    def _validate(self, handlers, reqs, batch: bool, workflow: bool = False) -> list[validation.ValidTask]:
        now = self.wall()
        valid = [validation.validate_task(r, handlers, max_payload_bytes=self.max_payload_bytes, now_s=now,
                                          index=i if batch else None, workflow=workflow) for i, r in enumerate(reqs)]
        validation.check_unique_keys(valid)
        return valid

    async def enqueue(self, p: Principal, req: tasks_pb2.EnqueueTaskRequest,
                      timeout: float, *, workflow: bool = False) -> tasks_pb2.EnqueueTaskResponse:
        """One task: a batch of one. `workflow`: the type must be a workflow handler (StartWorkflow's
        run), else a task handler."""
        (t,) = self._validate(await self.deployments.handlers_for(p.app_id), [req], batch=False, workflow=workflow)
        done = await self.creates.create(enqueue.of_valid(p, [t], where=""), timeout)
        return tasks_pb2.EnqueueTaskResponse(task_id=done.ids[0], deduplicated=bool(done.deduplicated
                                                                                   and done.deduplicated[0]))

    async def enqueue_batch(self, p: Principal, req: tasks_pb2.EnqueueTasksRequest,
                            timeout: float) -> tasks_pb2.EnqueueTasksResponse:
        """All items validated first; then one CreateTasks per shard, concurrently."""
        tasks = self._batch(p, req, await self.deployments.handlers_for(p.app_id))
        return tasks_pb2.EnqueueTasksResponse(task_ids=(await self.creates.create(tasks, timeout)).ids)

    def _batch(self, p: Principal, req: tasks_pb2.EnqueueTasksRequest, handlers) -> enqueue.Tasks:
        """A batch call's tasks: its columns, or its items checked as columns when they are plain
        (validation.plain_batch), else item by item (which also finds and names every error)."""
        if req.HasField("columns"):
            cols = validation.columns_batch(req, handlers, max_payload_bytes=self.max_payload_bytes)
            return enqueue.of_plain(p, cols)
        validation.check_batch_size(len(req.tasks))
        plain = validation.plain_batch(req, handlers, max_payload_bytes=self.max_payload_bytes)
        if plain is not None:
            return enqueue.of_plain(p, plain)
        # (ids minted here share a slot per 100, as the SDK's)
        return enqueue.of_valid(p, self._validate(handlers, req.tasks, batch=True), slots=SlotGroups())

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
        tasks = enqueue.of_valid(Principal(req.tenant_id, req.app_id, ""), [t], where="task.")
        done = await self.creates.create(enqueue.scheduled(tasks, req.schedule_id, req.scheduled_time), timeout)
        return control_pb2.EnqueueScheduledResponse(task_id=done.ids[0], deduplicated=bool(done.deduplicated
                                                                                          and done.deduplicated[0]))

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
