"""ScheduleService: the public schedules API, forwarded to the cron service.

The gateway authenticates the caller, checks a new schedule's task template
as it would check an enqueue (task type registered by the active deployment,
payload size, queue, retry and timeout ranges), and forwards each call to
ratchet.internal.cron.v1.CronService with the caller's tenant and app. The
cron service owns everything about the schedule itself (expression, time
zone, overlap policy, catch-up window) and its refusals pass through as they
are. The template is forwarded as given, not resolved: every firing goes
through EnqueueScheduled, which resolves it against the deployment active
then.
"""

from __future__ import annotations

import time
from collections.abc import Callable

import grpc

from ratchet.api.schedules.v1 import schedules_pb2 as spb
from ratchet.api.tasks.v1 import tasks_pb2
from ratchet.internal.cron.v1 import cron_pb2 as cpb
from ratchet.internal.cron.v1 import cron_pb2_grpc
from ratchet.libs.rpc import errors
from ratchet.services.gateway import validation
from ratchet.services.gateway.auth import Principal
from ratchet.services.gateway.deployments import Deployments
from ratchet.services.gateway.errors import from_peer

PEER = "cron service"


def template_request(t: spb.TaskTemplate) -> tasks_pb2.EnqueueTaskRequest:
    """The enqueue a template stands for (no key, delay or run_at: firing supplies the time)."""
    req = tasks_pb2.EnqueueTaskRequest(task_type=t.task_type, queue=t.queue)
    for name in ("payload", "retry", "timeouts"):
        if t.HasField(name):
            getattr(req, name).CopyFrom(getattr(t, name))
    return req


class ScheduleApi:
    """Every ScheduleService RPC for an authenticated app."""

    def __init__(self, channel: grpc.aio.Channel | None, target: str, deployments: Deployments,
                 max_payload_bytes: int, wall: Callable[[], float] = time.time):
        self.stub = cron_pb2_grpc.CronServiceStub(channel) if channel is not None else None
        self.target = target
        self.deployments = deployments
        self.max_payload_bytes = max_payload_bytes
        self.wall = wall

    async def _call(self, rpc: str, request, timeout: float):
        if self.stub is None:
            raise errors.Unavailable("the cron service is not configured (gateway config cron_target), so "
                                     "schedules are not available")
        try:
            return await getattr(self.stub, rpc)(request, timeout=timeout)
        except grpc.aio.AioRpcError as e:
            raise from_peer(e, f"{PEER} at {self.target}", timeout) from None

    async def check_template(self, p: Principal, req: spb.CreateScheduleRequest) -> None:
        """The template must pass every check an enqueue of it would."""
        if not req.HasField("task_template"):
            raise errors.InvalidArgument("task_template is required: the task each firing enqueues "
                                         "(task_type, payload, queue, retry, timeouts)")
        handlers = await self.deployments.handlers_for(p.app_id)
        validation.validate_task(template_request(req.task_template), handlers,
                                 max_payload_bytes=self.max_payload_bytes, now_s=self.wall(),
                                 where="task_template.")

    async def create(self, p: Principal, req: spb.CreateScheduleRequest,
                     timeout: float) -> spb.CreateScheduleResponse:
        await self.check_template(p, req)
        resp = await self._call("CreateSchedule", cpb.CreateScheduleRequest(caller=_caller(p), request=req), timeout)
        return resp.response

    async def forward(self, rpc: str, p: Principal, req, timeout: float):
        """Any other RPC: wrap with the caller, unwrap the answer."""
        wrapper = getattr(cpb, f"{rpc}Request")(caller=_caller(p), request=req)
        return (await self._call(rpc, wrapper, timeout)).response


def _caller(p: Principal) -> cpb.Caller:
    return cpb.Caller(tenant_id=p.tenant_id, app_id=p.app_id)
