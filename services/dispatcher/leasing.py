"""One leasing round of a poll: ask the candidate shards for work at once,
capacity split between them, and refill from shards that had more.

Calls to different shards run concurrently, so a slow or failing shard never
holds back tasks from the others: each shard's tasks are handed to `emit` as
soon as that shard answers. Within a shard, LeaseTasks calls run one at a
time: the tenant cursor then moves in a single order (real round-robin) and
history does not scan the same rows for two callers at once.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
from collections.abc import Awaitable, Callable, Sequence

from ratchet.internal.history.v1 import history_pb2 as hpb
from ratchet.internal.worker.v1 import worker_pb2 as wpb
from ratchet.libs.clock import Clock
from ratchet.services.dispatcher.breaker_gate import BreakerGate
from ratchet.services.dispatcher.errors import HistoryRejected, ShardUnavailable
from ratchet.services.dispatcher.history_client import HistoryClient
from ratchet.services.dispatcher.rotation import split_capacity
from ratchet.services.dispatcher.shards import PROBE_TIMEOUT_S, ShardBook

log = logging.getLogger(__name__)

# Do not start a LeaseTasks call with less time than this left before the
# poll's max_wait: it would likely time out, and a timed-out lease call is
# ambiguous (tasks may be leased to nobody until the lease expires).
MIN_CALL_S = 0.02

Emit = Callable[[Sequence[wpb.LeasedTask]], Awaitable[None]]


@dataclasses.dataclass
class RoundResult:
    """What a round learnt about the shards it asked."""

    leased: int = 0
    # Shards that said they hold no more ready work (for this ask).
    drained: set[int] = dataclasses.field(default_factory=set)
    # Shards that said they hold more than they gave us.
    more: set[int] = dataclasses.field(default_factory=set)
    # Shards whose call failed or were skipped.
    failed: set[int] = dataclasses.field(default_factory=set)


@dataclasses.dataclass(frozen=True)
class LeaseAsk:
    """Who asks for work and until when."""

    worker_id: str
    app_ids: tuple[str, ...]
    deadline: float  # clock.monotonic() instant the poll must end by


class Leaser:
    """Runs leasing rounds against history for the owned shards."""

    def __init__(self, history: HistoryClient, book: ShardBook, clock: Clock, gate: BreakerGate | None = None):
        self._history = history
        self._book = book
        self._clock = clock
        self._gate = gate

    @property
    def rpc_timeout_s(self) -> float:
        """The deadline of one history call."""
        return self._history.rpc_timeout_s

    async def round(self, ask: LeaseAsk, capacity: int, shards: Sequence[int], emit: Emit) -> RoundResult:
        """Lease up to `capacity` tasks from `shards` (in preference order)."""
        result = RoundResult()
        remaining = capacity
        candidates = [s for s in shards if self._book.available(s)]
        result.failed.update(s for s in shards if s not in candidates)
        while remaining > 0 and candidates:
            shares = split_capacity(remaining, candidates)
            refill = [s for s in candidates if s not in shares]
            calls = {asyncio.create_task(self._lease_one(ask, shard, n)): (shard, n) for shard, n in shares.items()}
            try:
                pending = set(calls)
                while pending:
                    done, pending = await asyncio.wait(pending, return_when=asyncio.FIRST_COMPLETED)
                    batch = []
                    for call in done:
                        shard, asked = calls[call]
                        tasks = self._account(result, shard, call.result())
                        if tasks is not None and len(tasks) >= asked and shard in result.more:
                            refill.append(shard)
                        batch.extend(tasks or ())
                    if batch:
                        remaining -= len(batch)
                        result.leased += len(batch)
                        await emit(batch)
            finally:
                for call in calls:
                    call.cancel()
            candidates = [s for s in shards if s in refill]
        return result

    @staticmethod
    def _account(result: RoundResult, shard: int,
                 response: hpb.LeaseTasksResponse | None) -> Sequence[wpb.LeasedTask] | None:
        if response is None:
            result.failed.add(shard)
            return None
        # `more` false means history found nothing beyond what it gave us.
        (result.more if response.more else result.drained).add(shard)
        return response.tasks

    async def _lease_one(self, ask: LeaseAsk, shard: int, n: int) -> hpb.LeaseTasksResponse | None:
        """One LeaseTasks call; None when the shard failed or had to be skipped."""
        state = self._book[shard]
        budget = ask.deadline - self._clock.monotonic()
        if budget < MIN_CALL_S:
            return None
        try:
            # asyncio.timeout (not wait_for): a cancelled Lock.acquire never leaves the lock taken.
            async with asyncio.timeout(budget):
                await state.lock.acquire()
        except TimeoutError:
            return None
        try:
            budget = min(self._history.rpc_timeout_s, ask.deadline - self._clock.monotonic())
            if state.failures:
                # Probing a shard that just failed: do not let it hold the poll for a full RPC deadline.
                budget = min(budget, PROBE_TIMEOUT_S)
            if budget < MIN_CALL_S:
                return None
            state.busy_since = self._clock.monotonic()
            response = await self._call(ask, shard, n, state.tenant_cursor, budget)
        except ShardUnavailable as err:
            backoff = self._book.failed(shard)
            log.warning("LeaseTasks on shard %d failed (%s%s); skipping it for %.2fs", shard, err,
                        ", tasks may be leased until their lease expires" if err.ambiguous else "", backoff)
            return None
        except HistoryRejected as err:
            backoff = self._book.failed(shard)
            log.error("history refused LeaseTasks on shard %d: %s; skipping it for %.2fs", shard, err, backoff)
            return None
        finally:
            state.busy_since = None
            state.lock.release()
        self._book.succeeded(shard)
        self._book.advance_cursor(shard, response.next_tenant_cursor)
        return response

    async def _call(self, ask: LeaseAsk, shard: int, n: int, cursor: str, budget: float) -> hpb.LeaseTasksResponse:
        """LeaseTasks with the circuit breakers' type limits; a probe token the
        call carried is settled by what it leased, or returned if it failed."""
        if self._gate is None:
            return await self._history.lease_tasks(shard, ask.worker_id, n, ask.app_ids, cursor, timeout=budget)
        limits, probes = self._gate.limits(ask.app_ids)
        try:
            response = await self._history.lease_tasks(shard, ask.worker_id, n, ask.app_ids, cursor,
                                                       timeout=budget, type_limits=limits)
        except BaseException:
            self._gate.release(probes)
            raise
        self._gate.settle(probes, response.tasks)
        return response
