"""The thin RPC edge of ratchet.internal.cron.v1.CronService: unwrap the
caller and the public request, call the API, wrap the answer. Errors become
the call's status at the shared edge (libs/rpc/errors.rpc)."""

from __future__ import annotations

import functools
import logging
from collections.abc import Awaitable, Callable
from typing import Any

import grpc

from ratchet.api.schedules.v1 import schedules_pb2 as spb
from ratchet.internal.cron.v1 import cron_pb2 as cpb
from ratchet.internal.cron.v1 import cron_pb2_grpc
from ratchet.libs.rpc.errors import rpc
from ratchet.services.cron import errors
from ratchet.services.cron.schedules import Caller, ScheduleApi

log = logging.getLogger(__name__)

TRIGGER_WAIT_S = 10.0


def _edge(fn: Callable[..., Awaitable[Any]]) -> Callable[..., Awaitable[Any]]:
    """libs/rpc/errors.rpc, with the caller and the public request unwrapped."""
    @rpc
    @functools.wraps(fn)
    async def wrapper(self: CronServicer, request, context: grpc.aio.ServicerContext):
        try:
            return await fn(self, _caller(request), request.request, context)
        except errors.Unavailable as e:
            log.warning("%s -> %s: %s", fn.__name__, e.code.name, e.message)
            raise
    return wrapper


def _caller(request) -> Caller:
    c = request.caller
    if not c.tenant_id or not c.app_id:
        raise errors.InvalidArgument("caller.tenant_id and caller.app_id are required")
    return Caller(c.tenant_id, c.app_id)


class CronServicer(cron_pb2_grpc.CronServiceServicer):
    """ratchet.internal.cron.v1.CronService (called by the gateway)."""

    def __init__(self, api: ScheduleApi):
        self.api = api

    @_edge
    async def CreateSchedule(self, caller, req, context) -> cpb.CreateScheduleResponse:
        schedule = await self.api.create(caller, req)
        return cpb.CreateScheduleResponse(response=spb.CreateScheduleResponse(schedule=schedule))

    @_edge
    async def GetSchedule(self, caller, req, context) -> cpb.GetScheduleResponse:
        schedule = await self.api.get(caller, req.schedule_id)
        return cpb.GetScheduleResponse(response=spb.GetScheduleResponse(schedule=schedule))

    @_edge
    async def ListSchedules(self, caller, req, context) -> cpb.ListSchedulesResponse:
        page = await self.api.list(caller, req.page_size, req.page_token)
        return cpb.ListSchedulesResponse(response=page)

    @_edge
    async def PauseSchedule(self, caller, req, context) -> cpb.PauseScheduleResponse:
        schedule = await self.api.pause(caller, req.schedule_id)
        return cpb.PauseScheduleResponse(response=spb.PauseScheduleResponse(schedule=schedule))

    @_edge
    async def ResumeSchedule(self, caller, req, context) -> cpb.ResumeScheduleResponse:
        schedule = await self.api.resume(caller, req.schedule_id)
        return cpb.ResumeScheduleResponse(response=spb.ResumeScheduleResponse(schedule=schedule))

    @_edge
    async def DeleteSchedule(self, caller, req, context) -> cpb.DeleteScheduleResponse:
        await self.api.delete(caller, req.schedule_id)
        return cpb.DeleteScheduleResponse()

    @_edge
    async def TriggerSchedule(self, caller, req, context) -> cpb.TriggerScheduleResponse:
        left = context.time_remaining()
        # Answer before the caller gives up, so a slow delivery reads as "recorded", not a timeout.
        wait_s = TRIGGER_WAIT_S if left is None else max(0.0, min(TRIGGER_WAIT_S, left - 0.5))
        return cpb.TriggerScheduleResponse(response=await self.api.trigger(caller, req.schedule_id, wait_s))
