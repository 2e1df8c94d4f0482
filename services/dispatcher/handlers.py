"""The DispatchService (worker.proto) and BreakerAdminService edges: validate, call the
domain, shape the answer. Authentication happens before these run
(auth.AuthInterceptor)."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Sequence

from ratchet.api.tasks.v1 import breakers_pb2 as bpb
from ratchet.internal.dispatcher.v1 import dispatcher_pb2 as dpb
from ratchet.internal.dispatcher.v1 import dispatcher_pb2_grpc as dgrpc
from ratchet.internal.worker.v1 import worker_pb2 as wpb
from ratchet.internal.worker.v1 import worker_pb2_grpc as wgrpc
from ratchet.libs.rpc.errors import rpc
from ratchet.services.dispatcher import validation
from ratchet.services.dispatcher.breaker_keeper import BreakerKeeper, View
from ratchet.services.dispatcher.breakers import CLOSED, HALF_OPEN, OPEN
from ratchet.services.dispatcher.completions import CompletionBatcher, complete
from ratchet.services.dispatcher.errors import BreakersUnavailable
from ratchet.services.dispatcher.heartbeats import record_heartbeats
from ratchet.services.dispatcher.history_client import HistoryClient
from ratchet.services.dispatcher.polling import Poller

log = logging.getLogger(__name__)


class DispatchServicer(wgrpc.DispatchServiceServicer):
    """Poll, Heartbeat, Complete and Step for host agents."""

    def __init__(self, poller: Poller, history: HistoryClient, batcher: CompletionBatcher,
                 default_wait_s: float, breakers: BreakerKeeper | None = None):
        self._poller = poller
        self._history = history
        self._batcher = batcher
        self._default_wait_s = default_wait_s
        self._breakers = breakers

    @rpc
    async def Poll(self, request: wpb.PollRequest, context) -> None:
        """Long poll: writes zero or more PollResponse messages, then closes."""
        spec = validation.poll_spec(request, self._default_wait_s)

        async def emit(tasks: Sequence[wpb.LeasedTask]) -> None:
            await context.write(wpb.PollResponse(tasks=list(tasks)))

        leased = await self._poller.poll(spec, emit)
        log.debug("poll by %s: %d task(s) leased", spec.worker_id, leased)

    @rpc
    async def Heartbeat(self, request: wpb.HeartbeatRequest, context) -> wpb.HeartbeatResponse:
        """Extend every lease; one answer per lease, in request order."""
        validation.leases(request.leases)
        results = await record_heartbeats(self._history, request.leases, context.time_remaining())
        return wpb.HeartbeatResponse(results=results)

    @rpc
    async def Complete(self, request: wpb.CompleteRequest, context) -> wpb.CompleteResponse:
        """Apply finished attempts; one answer per completion, in request order."""
        validation.completions(request.completions)
        timeout = self._history.budget(context.time_remaining())
        results = await complete(self._batcher, request.completions, timeout)
        if self._breakers is not None:
            # Counted once history answered: an agent resending after UNAVAILABLE
            # is counted then (the keeper ignores an attempt it already counted).
            self._breakers.observe(request.completions)
        return wpb.CompleteResponse(results=results)

    @rpc
    async def Step(self, request: wpb.StepRequest, context) -> wpb.StepResponse:
        """One workflow step operation, forwarded to the shard its lease names. History's
        refusals (FAILED_PRECONDITION for a lease that is not current, INVALID_ARGUMENT,
        NOT_FOUND) pass through with their messages; a shard that does not answer in time
        is UNAVAILABLE, which the agent retries (Step is safe to resend)."""
        validation.step(request)
        return await self._history.workflow_step(request, self._history.budget(context.time_remaining()))


_STATES = {CLOSED: bpb.BREAKER_STATE_CLOSED, OPEN: bpb.BREAKER_STATE_OPEN, HALF_OPEN: bpb.BREAKER_STATE_HALF_OPEN}


def breaker_message(view: View) -> bpb.Breaker:
    """The public shape of a breaker."""
    b = view.breaker
    out = bpb.Breaker(task_type=b.key.task_type, state=_STATES[b.state], reason=b.reason, crashes=view.crashes)
    if b.opened_at is not None:
        out.opened_at.FromDatetime(b.opened_at)
    if b.state == OPEN and b.probe_at is not None:
        out.probe_at.FromDatetime(b.probe_at)
    for crash in b.last_crashes:
        item = out.last_crashes.add(task_id=crash.task_id, error_class=crash.error_class, message=crash.message)
        item.at.FromDatetime(crash.at)
    return out


class BreakerAdminServicer(dgrpc.BreakerAdminServiceServicer):
    """ListBreakers and ResetBreaker for the gateway (auth.py decides who may call)."""

    def __init__(self, keeper: BreakerKeeper, timeout_s: float):
        self._keeper = keeper
        self._timeout_s = timeout_s

    def _budget(self, context) -> float:
        remaining = context.time_remaining()
        return self._timeout_s if remaining is None else max(0.05, min(self._timeout_s, remaining - 0.1))

    @rpc
    async def ListBreakers(self, request: dpb.ListBreakersRequest, context) -> dpb.ListBreakersResponse:
        """The app's breakers that are not CLOSED or have crashes in the window."""
        validation.breaker_app(request)
        try:
            async with asyncio.timeout(self._budget(context)):
                views = await self._keeper.list(request.tenant_id, request.app_id)
        except TimeoutError:
            raise BreakersUnavailable("the breakers database did not answer in time; retry shortly") from None
        return dpb.ListBreakersResponse(breakers=[breaker_message(v) for v in views])

    @rpc
    async def ResetBreaker(self, request: dpb.ResetBreakerRequest, context) -> dpb.ResetBreakerResponse:
        """Close the breaker now (idempotent; an unknown type answers CLOSED)."""
        key = validation.breaker_key(request)
        view = await self._keeper.reset(key, self._budget(context))
        return dpb.ResetBreakerResponse(breaker=breaker_message(view))
