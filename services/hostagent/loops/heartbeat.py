"""Heartbeat loop: every interval, one Heartbeat call with every lease held;
the answers (CONTINUE / CANCEL / LEASE_LOST) go to the agent.

A new checkpoint brings the next beat forward, but never closer than
EARLY_MIN_INTERVAL_S to the previous one: a handler checkpointing in a tight
loop costs at most one extra call a second.
"""

from __future__ import annotations

import asyncio
import logging

import grpc

from ratchet.internal.worker.v1 import worker_pb2, worker_pb2_grpc
from ratchet.services.hostagent.agent import Agent

log = logging.getLogger(__name__)

EARLY_MIN_INTERVAL_S = 1.0


class HeartbeatLoop:
    """Renews the agent's leases. Sandboxes never heartbeat: they hold no lease (Q6)."""

    def __init__(self, *, agent: Agent, stub: worker_pb2_grpc.DispatchServiceStub, worker_id: str,
                 metadata, interval_s: float, rpc_timeout_s: float):
        self._agent, self._stub, self._worker_id, self._metadata = agent, stub, worker_id, metadata
        self._interval_s, self._rpc_timeout_s = interval_s, rpc_timeout_s
        self.beats = 0

    async def run(self) -> None:
        """Heartbeat until cancelled."""
        loop = asyncio.get_running_loop()
        wanted = self._agent.heartbeat_wanted
        last = loop.time()
        while True:
            due = last + self._interval_s
            if wanted.is_set():
                due = min(due, last + EARLY_MIN_INTERVAL_S)
            left = due - loop.time()
            if left > 0:
                if wanted.is_set():
                    await asyncio.sleep(left)
                else:
                    try:
                        await asyncio.wait_for(wanted.wait(), left)
                    except TimeoutError:
                        pass
                continue
            wanted.clear()  # a checkpoint arriving during the call asks for the next early beat
            last = loop.time()
            await self.beat()

    async def beat(self) -> None:
        """One heartbeat of every held lease; failures are logged and retried next tick."""
        batch = self._agent.heartbeat_batch()
        if not batch:
            return
        refs = [ref for ref, _ in batch]
        self.beats += 1
        try:
            response = await self._stub.Heartbeat(
                worker_pb2.HeartbeatRequest(worker_id=self._worker_id, leases=refs),
                timeout=min(self._rpc_timeout_s, max(self._interval_s, 1.0)), metadata=self._metadata)
        except grpc.aio.AioRpcError as e:
            log.warning("heartbeat of %d leases failed: %s: %s", len(refs), e.code().name, e.details())
            return
        for i, result in enumerate(response.results):
            # Results come in request order; the check guards against a dispatcher that breaks that.
            seq = batch[i][1] if i < len(batch) and batch[i][0].task_id == result.task_id else 0
            self._agent.on_heartbeat(result, checkpoint_seq=seq)
