"""The DispatchService edge: validate, call the domain, shape the answer.
Authentication happens before these run (auth.AuthInterceptor)."""

from __future__ import annotations

import logging
from typing import Sequence

from ratchet.internal.dispatcher.v1 import dispatcher_pb2 as dpb
from ratchet.internal.dispatcher.v1 import dispatcher_pb2_grpc as dgrpc
from ratchet.internal.history.v1 import history_pb2 as hpb
from ratchet.services.dispatcher import validation
from ratchet.services.dispatcher.completions import CompletionBatcher, complete
from ratchet.services.dispatcher.errors import maps_errors
from ratchet.services.dispatcher.heartbeats import record_heartbeats
from ratchet.services.dispatcher.history_client import HistoryClient
from ratchet.services.dispatcher.polling import Poller

log = logging.getLogger(__name__)


class DispatchServicer(dgrpc.DispatchServiceServicer):
    """Poll, Heartbeat and Complete for host agents."""

    def __init__(self, poller: Poller, history: HistoryClient, batcher: CompletionBatcher,
                 default_wait_s: float):
        self._poller = poller
        self._history = history
        self._batcher = batcher
        self._default_wait_s = default_wait_s

    @maps_errors
    async def Poll(self, request: dpb.PollRequest, context) -> None:
        """Long poll: writes zero or more PollResponse messages, then closes."""
        spec = validation.poll_spec(request, self._default_wait_s)

        async def emit(tasks: Sequence[hpb.LeasedTask]) -> None:
            await context.write(dpb.PollResponse(tasks=list(tasks)))

        leased = await self._poller.poll(spec, emit)
        log.debug("poll by %s: %d task(s) leased", spec.worker_id, leased)

    @maps_errors
    async def Heartbeat(self, request: dpb.HeartbeatRequest, context) -> dpb.HeartbeatResponse:
        """Extend every lease; one answer per lease, in request order."""
        validation.leases(request.leases)
        results = await record_heartbeats(self._history, request.leases, context.time_remaining())
        return dpb.HeartbeatResponse(results=results)

    @maps_errors
    async def Complete(self, request: dpb.CompleteRequest, context) -> dpb.CompleteResponse:
        """Apply finished attempts; one answer per completion, in request order."""
        validation.completions(request.completions)
        timeout = self._history.budget(context.time_remaining())
        return dpb.CompleteResponse(results=await complete(self._batcher, request.completions, timeout))
