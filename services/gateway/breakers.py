"""BreakerService: the app's circuit breakers, forwarded to the dispatcher's
BreakerAdminService (the dispatcher owns the breakers table) with the
caller's tenant and app."""

from __future__ import annotations

import grpc

from ratchet.api.tasks.v1 import breakers_pb2
from ratchet.internal.dispatcher.v1 import dispatcher_pb2, dispatcher_pb2_grpc
from ratchet.libs.rpc import errors
from ratchet.services.gateway.auth import Principal
from ratchet.services.gateway.deployments import HANDLER_NAME
from ratchet.services.gateway.errors import from_peer

PEER = "dispatcher"


class BreakerApi:
    """ListBreakers and ResetBreaker for an authenticated app."""

    def __init__(self, channel: grpc.aio.Channel | None, target: str):
        self.stub = dispatcher_pb2_grpc.BreakerAdminServiceStub(channel) if channel is not None else None
        self.target = target

    async def _call(self, rpc: str, request, timeout: float):
        if self.stub is None:
            raise errors.Unavailable("the dispatcher is not configured (gateway config dispatcher_target), so "
                                     "circuit breakers are not available")
        try:
            return await getattr(self.stub, rpc)(request, timeout=timeout)
        except grpc.aio.AioRpcError as e:
            raise from_peer(e, f"{PEER} at {self.target}", timeout) from None

    async def list(self, p: Principal, req: breakers_pb2.ListBreakersRequest,
                   timeout: float) -> breakers_pb2.ListBreakersResponse:
        resp = await self._call("ListBreakers", dispatcher_pb2.ListBreakersRequest(
            tenant_id=p.tenant_id, app_id=p.app_id), timeout)
        return breakers_pb2.ListBreakersResponse(breakers=resp.breakers)

    async def reset(self, p: Principal, req: breakers_pb2.ResetBreakerRequest,
                    timeout: float) -> breakers_pb2.ResetBreakerResponse:
        if not req.task_type:
            raise errors.InvalidArgument("task_type is required: the task type whose breaker to close")
        if not HANDLER_NAME.match(req.task_type):
            raise errors.InvalidArgument(f"task_type must be 1..200 characters of [A-Za-z0-9_.:-], "
                                         f"got {req.task_type[:80]!r}")
        resp = await self._call("ResetBreaker", dispatcher_pb2.ResetBreakerRequest(
            tenant_id=p.tenant_id, app_id=p.app_id, task_type=req.task_type), timeout)
        return breakers_pb2.ResetBreakerResponse(breaker=resp.breaker)
