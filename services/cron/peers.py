"""The cron service's calls to the rest of the mesh, over the generated gRPC
clients only: the gateway's ControlService.EnqueueScheduled (authorised by
the mesh token) and history's GetTask/CancelTask (routed with the shard map).
Every call carries a deadline; failures come out as errors.Transient or
errors.Refused."""

from __future__ import annotations

import datetime as dt

import grpc
from google.protobuf import timestamp_pb2

from ratchet.api.tasks.v1 import tasks_pb2
from ratchet.internal.gateway.v1 import control_pb2, control_pb2_grpc
from ratchet.internal.history.v1 import history_pb2, history_pb2_grpc
from ratchet.libs.shardmap import ShardMap, parse_task_id
from ratchet.services.cron import errors

TERMINAL = frozenset({tasks_pb2.TASK_STATE_SUCCEEDED, tasks_pb2.TASK_STATE_FAILED,
                      tasks_pb2.TASK_STATE_CANCELED, tasks_pb2.TASK_STATE_EXPIRED})


def timestamp(value: dt.datetime) -> timestamp_pb2.Timestamp:
    ts = timestamp_pb2.Timestamp()
    ts.FromDatetime(value.astimezone(dt.UTC))
    return ts


class Gateway:
    """ControlService.EnqueueScheduled with the mesh token."""

    def __init__(self, channel: grpc.aio.Channel, mesh_token: str, timeout_s: float):
        self._stub = control_pb2_grpc.ControlServiceStub(channel)
        self._metadata = (("authorization", f"Bearer {mesh_token}"),)
        self.timeout = timeout_s

    async def enqueue_scheduled(self, tenant_id: str, app_id: str, schedule_id: str, slot: dt.datetime,
                                task: tasks_pb2.EnqueueTaskRequest) -> control_pb2.EnqueueScheduledResponse:
        """Enqueue one slot's task; the gateway's key `sched:<id>@<slot>` makes a re-send return the same task."""
        request = control_pb2.EnqueueScheduledRequest(tenant_id=tenant_id, app_id=app_id, schedule_id=schedule_id,
                                                      scheduled_time=timestamp(slot), task=task)
        try:
            return await self._stub.EnqueueScheduled(request, timeout=self.timeout, metadata=self._metadata)
        except grpc.aio.AioRpcError as e:
            original = _original_task_id(e)
            if original:
                # The slot's key already names a task (e.g. a re-send after a deploy changed the
                # resolved policy): the slot fired, as that task.
                return control_pb2.EnqueueScheduledResponse(task_id=original, deduplicated=True)
            raise errors.from_rpc_error("gateway EnqueueScheduled", e) from None


def _original_task_id(e: grpc.aio.AioRpcError) -> str | None:
    if e.code() != grpc.StatusCode.ALREADY_EXISTS:
        return None
    for key, value in e.trailing_metadata() or ():
        if key == "ratchet-original-task-id" and isinstance(value, str) and parse_task_id(value):
            return value
    return None


class History:
    """GetTask / CancelTask on the shard that holds the task."""

    def __init__(self, channel: grpc.aio.Channel, shard_ids: list[int], timeout_s: float):
        self._stub = history_pb2_grpc.HistoryServiceStub(channel)
        self._map = ShardMap.even(shard_ids)
        self.timeout = timeout_s

    def _shard(self, task_id: str) -> int | None:
        return self._map.shard_for_task(task_id) if parse_task_id(task_id) else None

    async def task_state(self, task_id: str, tenant_id: str) -> int | None:
        """The task's TaskState, or None when history does not know it (gone or not ours)."""
        shard = self._shard(task_id)
        if shard is None:
            return None
        request = history_pb2.GetTaskRequest(shard_id=shard, task_id=task_id, tenant_id=tenant_id)
        try:
            response = await self._stub.GetTask(request, timeout=self.timeout)
        except grpc.aio.AioRpcError as e:
            if e.code() == grpc.StatusCode.NOT_FOUND:
                return None
            raise errors.from_rpc_error(f"history GetTask (shard {shard})", e) from None
        return response.task.state

    async def cancel(self, task_id: str, tenant_id: str) -> None:
        """Cancel the task (a no-op once terminal, or when history does not know it)."""
        shard = self._shard(task_id)
        if shard is None:
            return
        request = history_pb2.CancelTaskRequest(shard_id=shard, task_id=task_id, tenant_id=tenant_id)
        try:
            await self._stub.CancelTask(request, timeout=self.timeout)
        except grpc.aio.AioRpcError as e:
            if e.code() == grpc.StatusCode.NOT_FOUND:
                return
            raise errors.from_rpc_error(f"history CancelTask (shard {shard})", e) from None
