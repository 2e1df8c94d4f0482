"""The dispatcher's only way to touch task state: history's batch RPCs over
gRPC, each with a deadline, failures classified into domain errors."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Sequence

import grpc
from google.protobuf import duration_pb2

from ratchet.internal.history.v1 import history_pb2 as hpb
from ratchet.internal.history.v1 import history_pb2_grpc as hgrpc
from ratchet.internal.worker.v1 import worker_pb2 as wpb
from ratchet.services.dispatcher.errors import from_rpc_error

# Time kept back from a caller's deadline to send our answer.
CALLER_MARGIN_S = 0.1
MIN_BUDGET_S = 0.05


def duration(seconds: float) -> duration_pb2.Duration:
    """A protobuf Duration of `seconds`."""
    d = duration_pb2.Duration()
    d.FromNanoseconds(round(seconds * 1e9))
    return d


class HistoryClient:
    """Typed wrappers over HistoryService for one dispatcher process.

    `reachable` is set after the first call history answers (successfully or
    with a refusal: either way it is up), which drives the health status.
    """

    def __init__(self, channel: grpc.aio.Channel, rpc_timeout_s: float, lease_duration_s: float):
        self._stub = hgrpc.HistoryServiceStub(channel)
        self.rpc_timeout_s = rpc_timeout_s
        self._lease = duration(lease_duration_s)
        self.reachable = asyncio.Event()

    def budget(self, caller_remaining_s: float | None) -> float:
        """The deadline for a call made on behalf of a caller with this much
        time left: answer before the caller gives up, never beyond rpc_timeout_s."""
        if caller_remaining_s is None:
            return self.rpc_timeout_s
        return max(MIN_BUDGET_S, min(self.rpc_timeout_s, caller_remaining_s - CALLER_MARGIN_S))

    async def _call(self, shard_id: int, method, request, timeout: float | None):
        try:
            response = await method(request, timeout=timeout or self.rpc_timeout_s)
        except grpc.aio.AioRpcError as err:
            if err.code() not in (grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.DEADLINE_EXCEEDED,
                                  grpc.StatusCode.CANCELLED):
                self.reachable.set()
            raise from_rpc_error(shard_id, err) from None
        self.reachable.set()
        return response

    async def lease_tasks(self, shard_id: int, worker_id: str, max_tasks: int, app_ids: Sequence[str],
                          tenant_cursor: str, timeout: float | None = None,
                          type_limits: Sequence[hpb.TaskTypeLimit] = ()) -> hpb.LeaseTasksResponse:
        """Lease up to max_tasks ready tasks of shard_id, round-robin after
        tenant_cursor, within the per-type caps of the circuit breakers."""
        request = hpb.LeaseTasksRequest(shard_id=shard_id, worker_id=worker_id, max_tasks=max_tasks,
                                        app_ids=list(app_ids), tenant_cursor=tenant_cursor,
                                        lease_duration=self._lease, type_limits=list(type_limits))
        return await self._call(shard_id, self._stub.LeaseTasks, request, timeout)

    async def record_heartbeats(self, shard_id: int, leases: Sequence[wpb.LeaseRef],
                                timeout: float | None = None) -> hpb.RecordHeartbeatsResponse:
        """Extend the given leases of shard_id by the configured lease duration."""
        request = hpb.RecordHeartbeatsRequest(shard_id=shard_id, leases=list(leases), lease_duration=self._lease)
        return await self._call(shard_id, self._stub.RecordHeartbeats, request, timeout)

    async def complete_tasks(self, shard_id: int, completions: Sequence[wpb.Completion]) -> hpb.CompleteTasksResponse:
        """Apply attempt outcomes on shard_id in one history transaction."""
        request = hpb.CompleteTasksRequest(shard_id=shard_id, completions=list(completions))
        return await self._call(shard_id, self._stub.CompleteTasks, request, None)

    async def workflow_step(self, step: wpb.StepRequest, timeout: float | None = None) -> wpb.StepResponse:
        """One step operation of a workflow run, on the shard its lease names (history
        fences it by the lease: a stale one comes back HistoryRejected FAILED_PRECONDITION)."""
        shard_id = step.lease.shard_id
        response = await self._call(shard_id, self._stub.WorkflowStep, hpb.WorkflowStepRequest(step=step), timeout)
        return response.step

    async def watch_ready(self, requests: AsyncIterator[hpb.WatchReadyRequest], shard_ids: Sequence[int],
                          timeout: float) -> AsyncIterator[int]:
        """Yield shard ids as history reports ready work, while `requests` say events are wanted
        (history.proto); ends when the stream does. Errors come out as ShardUnavailable/
        HistoryRejected for the first shard. The stream carries a (long) deadline too, so a
        silently dead peer is noticed and the watch reconnects."""
        call = self._stub.WatchReady(requests, timeout=timeout)
        try:
            await call.initial_metadata()  # history sends its headers once it accepted the shards
            if not call.done():
                self.reachable.set()  # up, even while no event is wanted
            async for event in call:
                self.reachable.set()
                yield event.shard_id
        except grpc.aio.AioRpcError as err:
            raise from_rpc_error(shard_ids[0] if shard_ids else -1, err) from None
        finally:
            call.cancel()
