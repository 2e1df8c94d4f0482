"""Heartbeat loop: every interval, one Heartbeat call with every lease held;
the answers (CONTINUE / CANCEL / LEASE_LOST) go to the agent."""

from __future__ import annotations

import asyncio
import logging

import grpc

from ratchet.internal.dispatcher.v1 import dispatcher_pb2, dispatcher_pb2_grpc
from ratchet.services.hostagent.agent import Agent

log = logging.getLogger(__name__)


class HeartbeatLoop:
    """Renews the agent's leases. Sandboxes never heartbeat: they hold no lease (Q6)."""

    def __init__(self, *, agent: Agent, stub: dispatcher_pb2_grpc.DispatchServiceStub, worker_id: str,
                 metadata, interval_s: float, rpc_timeout_s: float):
        self._agent, self._stub, self._worker_id, self._metadata = agent, stub, worker_id, metadata
        self._interval_s, self._rpc_timeout_s = interval_s, rpc_timeout_s

    async def run(self) -> None:
        """Heartbeat until cancelled."""
        while True:
            await asyncio.sleep(self._interval_s)
            await self.beat()

    async def beat(self) -> None:
        """One heartbeat of every held lease; failures are logged and retried next tick."""
        refs = self._agent.lease_refs()
        if not refs:
            return
        try:
            response = await self._stub.Heartbeat(
                dispatcher_pb2.HeartbeatRequest(worker_id=self._worker_id, leases=refs),
                timeout=min(self._rpc_timeout_s, max(self._interval_s, 1.0)), metadata=self._metadata)
        except grpc.aio.AioRpcError as e:
            log.warning("heartbeat of %d leases failed: %s: %s", len(refs), e.code().name, e.details())
            return
        for result in response.results:
            self._agent.on_heartbeat(result)
