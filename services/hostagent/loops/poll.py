"""Poll loop: whenever slots are free, long-poll the dispatcher for that many
tasks and hand each lease to the agent; reopen at once when the stream ends.

With fewer than a quarter of the slots free it lingers (`linger_s`, a few
ms) for more to free up first: polling for every slot that frees made each
lease a transaction of one or two tasks, and each poll and lease call costs
the same at any size."""

from __future__ import annotations

import asyncio
import logging
import random

import grpc
from google.protobuf import duration_pb2

from ratchet.internal.worker.v1 import worker_pb2, worker_pb2_grpc
from ratchet.services.hostagent.agent import Agent

log = logging.getLogger(__name__)

BACKOFF_MIN_S, BACKOFF_MAX_S = 0.05, 2.0


class PollLoop:
    """Keeps one Poll stream open while the agent has free slots."""

    def __init__(self, *, agent: Agent, stub: worker_pb2_grpc.DispatchServiceStub, worker_id: str,
                 metadata, max_wait_s: float, rpc_timeout_s: float, linger_s: float = 0.0):
        self._agent, self._stub, self._worker_id, self._metadata = agent, stub, worker_id, metadata
        self._max_wait_s, self._rpc_timeout_s = max_wait_s, rpc_timeout_s
        self._linger_s = linger_s
        self._batch = max(1, agent.capacity // 4)
        self.polls = 0

    async def run(self) -> None:
        """Poll until cancelled."""
        backoff = BACKOFF_MIN_S
        while True:
            free = self._agent.free_slots()
            if free <= 0:
                await self._agent.wait_for_slot()
                continue
            if free < self._batch and self._linger_s > 0:
                await self._agent.wait_for_free(self._batch, self._linger_s)
                free = self._agent.free_slots()
            try:
                await self._poll_once(free)
                backoff = BACKOFF_MIN_S
            except grpc.aio.AioRpcError as e:
                log.warning("poll failed: %s: %s; retrying in %.2fs", e.code().name, e.details(), backoff)
                await asyncio.sleep(random.uniform(backoff / 2, backoff))
                backoff = min(BACKOFF_MAX_S, backoff * 2)

    async def _poll_once(self, free: int) -> None:
        request = worker_pb2.PollRequest(
            worker_id=self._worker_id, capacity=free,
            max_wait=duration_pb2.Duration(seconds=int(self._max_wait_s),
                                           nanos=int((self._max_wait_s % 1) * 1e9)))
        self.polls += 1
        call = self._stub.Poll(request, timeout=self._max_wait_s + self._rpc_timeout_s, metadata=self._metadata)
        try:
            async for response in call:
                for task in response.tasks:
                    self._agent.accept(task)
        finally:
            call.cancel()
