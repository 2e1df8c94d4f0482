"""Calls to the history service (gRPC only: services never import each other).

Every call carries a deadline. Failures become gateway errors that name the
shard, and an ambiguous outcome (deadline passed after sending) says so.

CreateTasks travels as messages on one long-lived CreateTasksStream
(`CreateStream`): in grpc.aio a unary call costs the gateway and history several
times the CPU of a message on an open stream (docs/benchmarks/findings.md: call
streams). Each call is a message with its own call id and
timeout, answered once with its response or the status it failed with. The
stream is opened on first use and again after it ends; calls the stream ended
before answering fail UNAVAILABLE and say they may have taken effect (the
caller retries with the same task ids and keys, which deduplicate).
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable

import grpc

from ratchet.api.tasks.v1 import tasks_pb2
from ratchet.internal.history.v1 import history_pb2, history_pb2_grpc
from ratchet.libs.rpc import errors
from ratchet.libs.rpc.callstream import CallStream, StreamBroken

_CODES = {c.value[0]: c for c in grpc.StatusCode}


class CreateStream(CallStream):
    """One CreateTasksStream to history, shared by every caller; calls ready together
    share a message."""

    def __init__(self, stub: history_pb2_grpc.HistoryServiceStub,
                 unary: Callable[[history_pb2.CreateTasksRequest, float], Awaitable[history_pb2.CreateTasksResponse]],
                 clock: Callable[[], float] = time.monotonic, enabled: bool = True):
        super().__init__(lambda metadata: stub.CreateTasksStream(metadata=metadata), _wrap, _answers,
                         unary, peer="history", method="CreateTasks", clock=clock, enabled=enabled)


def _wrap(calls: list[tuple[int, history_pb2.CreateTasksRequest, int]]) -> history_pb2.CreateTasksStreamRequest:
    return history_pb2.CreateTasksStreamRequest(calls=[
        history_pb2.CreateTasksCall(call_id=c, request=r, timeout_ms=t) for c, r, t in calls])


def _answers(reply: history_pb2.CreateTasksStreamResponse):
    for a in reply.answers:
        yield a.call_id, (a.response if a.WhichOneof("outcome") == "response" else a.error)


class HistoryClient:
    """One channel to history; history serves every shard, each call names one."""

    def __init__(self, channel: grpc.aio.Channel, target: str, enqueue_stream: bool = True):
        self.stub = history_pb2_grpc.HistoryServiceStub(channel)
        self.target = target
        self.creates = CreateStream(self.stub, self._create_unary, enabled=enqueue_stream)

    async def _create_unary(self, req: history_pb2.CreateTasksRequest,
                            timeout: float) -> history_pb2.CreateTasksResponse:
        # A request too large for a stream message, or every call when the stream is off.
        return await self.stub.CreateTasks(req, timeout=timeout)

    async def close(self) -> None:
        """End the enqueue stream (gateway shutdown)."""
        await self.creates.close()

    def _error(self, e: grpc.aio.AioRpcError, shard_id: int, timeout: float) -> errors.ServiceError:
        return self._status(e.code(), e.details(), shard_id, timeout)

    def _status(self, code: grpc.StatusCode, details: str, shard_id: int, timeout: float) -> errors.ServiceError:
        if code == grpc.StatusCode.UNAVAILABLE:
            return errors.Unavailable(f"shard {shard_id} is unavailable (history at {self.target}: "
                                      f"{details}); retry later (with the same idempotency key if enqueuing)",
                                      shard_id=str(shard_id))
        if code == grpc.StatusCode.DEADLINE_EXCEEDED:
            return errors.DeadlineExceeded(f"shard {shard_id} did not answer within {timeout:g}s; the call may "
                                           f"have taken effect: retry with the same idempotency key",
                                           shard_id=str(shard_id))
        return errors.from_code(code, f"shard {shard_id}: {details}")

    async def create_tasks(self, shard_id: int, tasks: list[history_pb2.NewTask],
                           timeout: float) -> list[history_pb2.CreateResult]:
        """CreateTasks of these tasks (a request without `shared`): `create` of one built here."""
        return await self.create(history_pb2.CreateTasksRequest(shard_id=shard_id, tasks=tasks), timeout)

    async def create(self, req: history_pb2.CreateTasksRequest,
                     timeout: float) -> list[history_pb2.CreateResult] | None:
        """create_tasks for a request the caller built (a batch call's, in place, with `shared`,
        or its plain tasks as columns). None: every plain task was created under its own id
        (all_created)."""
        shard_id, n = req.shard_id, len(req.tasks) or len(req.columns.task_ids)
        try:
            resp = await self.creates.call(req, timeout)
        except grpc.aio.AioRpcError as e:  # a unary call's failure
            raise self._error(e, shard_id, timeout) from None
        except StreamBroken as e:
            raise self._status(e.code, e.details, shard_id, timeout) from None
        except TimeoutError:
            raise self._status(grpc.StatusCode.DEADLINE_EXCEEDED, "", shard_id, timeout) from None
        if isinstance(resp, history_pb2.CallError):
            raise self._status(_CODES.get(resp.code, grpc.StatusCode.UNKNOWN), resp.message, shard_id, timeout)
        if resp.all_created and req.HasField("columns") and not resp.results:
            return None
        if len(resp.results) != n:
            raise errors.Internal(f"shard {shard_id} answered {len(resp.results)} results for {n} tasks")
        return list(resp.results)

    async def _call(self, rpc: str, shard_id: int, req, timeout: float):
        try:
            return await getattr(self.stub, rpc)(req, timeout=timeout)
        except grpc.aio.AioRpcError as e:
            raise self._error(e, shard_id, timeout) from None

    async def get_task(self, shard_id: int, task_id: str, tenant_id: str,
                       timeout: float) -> history_pb2.GetTaskResponse:
        req = history_pb2.GetTaskRequest(shard_id=shard_id, task_id=task_id, tenant_id=tenant_id)
        return await self._call("GetTask", shard_id, req, timeout)

    async def cancel_task(self, shard_id: int, task_id: str, tenant_id: str,
                          timeout: float) -> history_pb2.CancelTaskResponse:
        req = history_pb2.CancelTaskRequest(shard_id=shard_id, task_id=task_id, tenant_id=tenant_id)
        return await self._call("CancelTask", shard_id, req, timeout)

    async def list_tasks(self, req: history_pb2.ListTasksRequest, timeout: float) -> history_pb2.ListTasksResponse:
        return await self._call("ListTasks", req.shard_id, req, timeout)

    async def count_tasks(self, req: history_pb2.CountTasksRequest, timeout: float) -> int:
        return (await self._call("CountTasks", req.shard_id, req, timeout)).count

    async def start_bulk(self, req: history_pb2.StartBulkOperationRequest,
                         timeout: float) -> tasks_pb2.BulkOperation:
        return (await self._call("StartBulkOperation", req.shard_id, req, timeout)).operation

    async def get_bulk(self, shard_id: int, operation_id: str, tenant_id: str,
                       timeout: float) -> tasks_pb2.BulkOperation:
        req = history_pb2.GetBulkOperationRequest(shard_id=shard_id, operation_id=operation_id, tenant_id=tenant_id)
        return (await self._call("GetBulkOperation", shard_id, req, timeout)).operation

    async def cancel_bulk(self, shard_id: int, operation_id: str, tenant_id: str,
                          timeout: float) -> tasks_pb2.BulkOperation:
        req = history_pb2.CancelBulkOperationRequest(shard_id=shard_id, operation_id=operation_id,
                                                     tenant_id=tenant_id)
        return (await self._call("CancelBulkOperation", shard_id, req, timeout)).operation

    async def get_workflow_steps(self, shard_id: int, workflow_id: str, tenant_id: str, from_position: int,
                                 page_size: int, timeout: float) -> history_pb2.GetWorkflowStepsResponse:
        req = history_pb2.GetWorkflowStepsRequest(shard_id=shard_id, workflow_id=workflow_id, tenant_id=tenant_id,
                                                  from_position=from_position, page_size=page_size)
        return await self._call("GetWorkflowSteps", shard_id, req, timeout)

    async def deliver_event(self, req: history_pb2.DeliverEventRequest, timeout: float) -> int:
        """DeliverEvent on req.shard_id: waits woken (a broadcast) or 1/0 (a run's inbox)."""
        return (await self._call("DeliverEvent", req.shard_id, req, timeout)).delivered

    async def list_workflow_children(self, req: history_pb2.ListWorkflowChildrenRequest,
                                     timeout: float) -> history_pb2.ListWorkflowChildrenResponse:
        return await self._call("ListWorkflowChildren", req.shard_id, req, timeout)
