"""Completions: apply attempt outcomes, one CompleteTasks call per shard, all
shards at once, answers in request order. If any shard fails the whole call
fails UNAVAILABLE and the agent retries it: a completion is fenced by its
lease epoch, so one already applied comes back accepted=false with the task's
current state (CompletionResult.state), which tells the agent it landed.

Completions for one shard that arrive while history is busy with earlier
ones are coalesced into one CompleteTasks call (group commit: one history
transaction instead of many); see `CompletionBatcher`.
"""

from __future__ import annotations

import asyncio
import collections
import dataclasses
import logging
from collections.abc import Sequence

from ratchet.internal.worker.v1 import worker_pb2 as wpb
from ratchet.services.dispatcher.errors import CallUnavailable, HistoryRejected, ShardUnavailable
from ratchet.services.dispatcher.grouping import MismatchedAnswer, group_by_shard, merge_in_order, pick
from ratchet.services.dispatcher.history_client import HistoryClient

log = logging.getLogger(__name__)

# Most completions one CompleteTasks call carries.
MAX_BATCH = 1000
# CompleteTasks calls in flight per shard before further completions queue up
# and go out together. Measured with bench_dispatch_complete.py --real (real
# history, fsync on, 2 shards, one completion per Complete call), completions/s:
# 32 clients: off 316-346, K=1 1311-1502, K=2 1186-1246, K=4 798-1047;
# 8 clients: off 284-329, K=1 512-545; 1 client: off 174-176, K=1 171-193
# (no latency cost when idle). A fixed 1 ms window did worse (511-676 at 32
# clients) and added ~1.5 ms to every call of a lone agent.
MAX_IN_FLIGHT = 1


@dataclasses.dataclass
class _Batch:
    # One entry per submission: its completions and the future its caller awaits.
    waiters: list[tuple[Sequence[wpb.Completion], asyncio.Future]] = dataclasses.field(default_factory=list)
    size: int = 0


@dataclasses.dataclass
class _Shard:
    in_flight: int = 0
    queued: collections.deque[_Batch] = dataclasses.field(default_factory=collections.deque)


class CompletionBatcher:
    """Group commit of completions per shard.

    While fewer than `max_in_flight` CompleteTasks calls are out for a shard,
    a submission goes out at once, alone: no added latency when idle. Beyond
    that, submissions queue and the queue goes out as one call when a call
    returns, so under load many completions share one history transaction.
    `max_in_flight=None` turns coalescing off (every submission its own call).
    """

    def __init__(self, history: HistoryClient, max_in_flight: int | None = MAX_IN_FLIGHT):
        self._history = history
        self._max_in_flight = max_in_flight
        self._shards: dict[int, _Shard] = {}
        self._flushes: set[asyncio.Task] = set()
        self.calls = 0  # CompleteTasks calls made, for tests and benchmarks

    async def complete(self, shard_id: int, completions: Sequence[wpb.Completion]) -> list[wpb.CompletionResult]:
        """Results for `completions` (all of one shard), in order."""
        shard = self._shards.setdefault(shard_id, _Shard())
        if self._max_in_flight is None or (shard.in_flight < self._max_in_flight and not shard.queued):
            shard.in_flight += 1
            try:
                return list(await self._send(shard_id, completions))
            finally:
                shard.in_flight -= 1
                self._drain(shard_id, shard)
        batch = shard.queued[-1] if shard.queued else None
        if batch is None or batch.size + len(completions) > MAX_BATCH:
            batch = _Batch()
            shard.queued.append(batch)
        future = asyncio.get_running_loop().create_future()
        # Retrieve the outcome even if the caller went away, so nothing logs "never retrieved".
        future.add_done_callback(lambda f: f.cancelled() or f.exception())
        batch.waiters.append((completions, future))
        batch.size += len(completions)
        try:
            # Shielded: if this caller goes away the batch still goes out for the others.
            return await asyncio.shield(future)
        except asyncio.CancelledError:
            # The caller gave up (it will retry): leave its part out if the batch has not gone yet.
            future.cancel()
            raise

    def _drain(self, shard_id: int, shard: _Shard) -> None:
        while shard.queued and shard.in_flight < (self._max_in_flight or 1):
            batch = shard.queued.popleft()
            shard.in_flight += 1
            task = asyncio.create_task(self._flush(shard_id, shard, batch))
            self._flushes.add(task)
            task.add_done_callback(self._flushes.discard)

    async def _flush(self, shard_id: int, shard: _Shard, batch: _Batch) -> None:
        try:
            await self._flush_batch(shard_id, batch)
        finally:
            shard.in_flight -= 1
            self._drain(shard_id, shard)

    async def _flush_batch(self, shard_id: int, batch: _Batch) -> None:
        waiters = [(cs, f) for cs, f in batch.waiters if not f.done()]
        if not waiters:
            return
        try:
            try:
                results = await self._send(shard_id, [c for cs, _ in waiters for c in cs])
            except HistoryRejected:
                if len(waiters) == 1:
                    raise
                # One agent's bad completion must not fail the others it was coalesced with.
                await asyncio.gather(*(self._send_part(shard_id, cs, f) for cs, f in waiters))
                return
        except BaseException as err:  # every waiter must hear about the failure, whatever it is
            for _, future in waiters:
                _settle(future, error=err)
            if isinstance(err, asyncio.CancelledError):
                raise
            return
        start = 0
        for cs, future in waiters:
            _settle(future, list(results[start:start + len(cs)]))
            start += len(cs)

    async def _send(self, shard_id: int, completions: Sequence[wpb.Completion]) -> Sequence[wpb.CompletionResult]:
        self.calls += 1
        response = await self._history.complete_tasks(shard_id, completions)
        return _checked(shard_id, len(completions), response.results)

    async def _send_part(self, shard_id: int, completions: Sequence[wpb.Completion], future: asyncio.Future) -> None:
        try:
            _settle(future, list(await self._send(shard_id, completions)))
        except Exception as err:  # noqa: BLE001 - handed to that waiter's caller, which maps it to a status
            _settle(future, error=err)

    async def close(self) -> None:
        """Wait for batches already started (used at shutdown)."""
        if self._flushes:
            await asyncio.gather(*self._flushes, return_exceptions=True)


async def _bounded(call, shard_id: int, timeout: float | None):
    try:
        async with asyncio.timeout(timeout):
            return await call
    except TimeoutError:
        raise ShardUnavailable(shard_id, f"no answer within {timeout:.2f}s; the outcome is unknown",
                               ambiguous=True) from None


def _settle(future: asyncio.Future, result=None, *, error: BaseException | None = None) -> None:
    if future.done():
        return
    if isinstance(error, asyncio.CancelledError):
        future.cancel()
    elif error is not None:
        future.set_exception(error)
    else:
        future.set_result(result)


def _checked(shard_id: int, expected: int,
             results: Sequence[wpb.CompletionResult]) -> Sequence[wpb.CompletionResult]:
    if len(results) != expected:
        raise MismatchedAnswer(f"history answered {len(results)} results for {expected} completions "
                               f"on shard {shard_id}")
    return results


async def complete(batcher: CompletionBatcher, completions: Sequence[wpb.Completion],
                   timeout: float | None = None) -> list[wpb.CompletionResult]:
    """One CompletionResult per completion, in request order; UNAVAILABLE if
    any shard failed or did not answer within `timeout` seconds."""
    if not completions:
        return []
    groups = group_by_shard(completions, lambda c: c.shard_id)
    shards = list(groups)
    outcomes = await asyncio.gather(*(_bounded(batcher.complete(shard, pick(completions, groups[shard])), shard,
                                               timeout) for shard in shards), return_exceptions=True)
    answers, failed = {}, []
    for shard, outcome in zip(shards, outcomes, strict=True):
        if isinstance(outcome, ShardUnavailable):
            failed.append(outcome)
        elif isinstance(outcome, BaseException):
            raise outcome
        else:
            answers[shard] = outcome
    if failed:
        applied = sorted(set(shards) - {e.shard_id for e in failed})
        log.warning("completions not applied on shards %s (%s); applied on %s; agent will retry",
                    [e.shard_id for e in failed], "; ".join(map(str, failed)), applied)
        raise CallUnavailable(f"completions for shards {[e.shard_id for e in failed]} were not applied "
                              f"({'; '.join(map(str, failed))}); retry the whole call: completions already "
                              f"applied come back accepted=false with the task's current state")
    return merge_in_order(len(completions), groups, answers)
