"""Completion sender: batch finished attempts into Complete calls (flushed
within ~2 ms or at 500), retrying UNAVAILABLE for a bounded time. One call is
in flight at a time, so under load the next batch is whatever finished
meanwhile (group commit, like the dispatcher's per-shard batches).

Resending a completion is safe: history applies it at most once per lease
epoch and answers a repeat with accepted=false.
"""

from __future__ import annotations

import asyncio
import logging
import random
from collections.abc import Callable

import grpc

from ratchet.internal.worker.v1 import worker_pb2, worker_pb2_grpc

log = logging.getLogger(__name__)

BATCH_MAX = 500
BATCH_WINDOW_S = 0.002
RETRYABLE = (grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.DEADLINE_EXCEEDED, grpc.StatusCode.RESOURCE_EXHAUSTED)


class CompletionSender:
    """Queues completions and delivers them; `on_settled(task_id, epoch)` runs
    once the dispatcher answered or the retry budget ran out."""

    def __init__(self, *, stub: worker_pb2_grpc.DispatchServiceStub, worker_id: str, metadata,
                 rpc_timeout_s: float, retry_budget_s: float, on_settled: Callable[[str, int], None]):
        self._stub, self._worker_id, self._metadata = stub, worker_id, metadata
        self._rpc_timeout_s, self._retry_budget_s, self._on_settled = rpc_timeout_s, retry_budget_s, on_settled
        self._queue: asyncio.Queue[worker_pb2.Completion] = asyncio.Queue()
        self._idle = asyncio.Event()
        self._idle.set()

    def submit(self, completion: worker_pb2.Completion) -> None:
        """Queue one completion for delivery."""
        self._idle.clear()
        self._queue.put_nowait(completion)

    async def run(self) -> None:
        """Deliver batches until cancelled."""
        while True:
            batch = [await self._queue.get()]
            if self._queue.qsize() < BATCH_MAX - 1:
                await asyncio.sleep(BATCH_WINDOW_S)
            while len(batch) < BATCH_MAX and not self._queue.empty():
                batch.append(self._queue.get_nowait())
            await self._deliver(batch)
            if self._queue.empty():
                self._idle.set()

    async def flush(self, timeout_s: float) -> bool:
        """Wait until everything queued was delivered (or given up); False on timeout."""
        try:
            await asyncio.wait_for(self._idle.wait(), timeout_s)
            return True
        except TimeoutError:
            return False

    async def _deliver(self, batch: list[worker_pb2.Completion]) -> None:
        loop = asyncio.get_running_loop()
        give_up_at = loop.time() + self._retry_budget_s
        backoff = 0.05
        request = worker_pb2.CompleteRequest(worker_id=self._worker_id, completions=batch)
        while True:
            try:
                response = await self._stub.Complete(request, timeout=self._rpc_timeout_s, metadata=self._metadata)
                self._record(batch, response)
                break
            except grpc.aio.AioRpcError as e:
                if e.code() not in RETRYABLE or loop.time() + backoff > give_up_at:
                    log.error("dropping %d completions after %s: %s (their leases will expire and the "
                              "tasks be retried)", len(batch), e.code().name, e.details())
                    break
                log.warning("complete failed: %s; retrying in %.2fs", e.code().name, backoff)
                await asyncio.sleep(random.uniform(backoff / 2, backoff))
                backoff = min(1.0, backoff * 2)
        for c in batch:
            self._on_settled(c.task_id, c.lease_epoch)

    def _record(self, batch: list[worker_pb2.Completion], response: worker_pb2.CompleteResponse) -> None:
        for completion, result in zip(batch, response.results, strict=True):
            if not result.accepted:
                log.info("completion of task %s epoch %d not accepted: %s", completion.task_id,
                         completion.lease_epoch, result.reason or "stale lease")
