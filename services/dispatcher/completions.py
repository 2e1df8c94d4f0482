"""Completions: apply attempt outcomes, one CompleteTasks call per shard, all
shards at once, answers in request order. If any shard fails the whole call
fails UNAVAILABLE and the agent retries it: a completion is fenced by its
lease epoch, so one already applied comes back accepted=false with the task's
current state (CompletionResult.state), which tells the agent it landed.

Concurrent Complete calls for the same shard arriving within a short window
are coalesced into one CompleteTasks call (one history transaction instead of
many); see `CompletionBatcher`.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
from typing import Sequence

from ratchet.internal.history.v1 import history_pb2 as hpb
from ratchet.services.dispatcher.errors import CallUnavailable, HistoryRejected, ShardUnavailable
from ratchet.services.dispatcher.grouping import MismatchedAnswer, group_by_shard, merge_in_order, pick
from ratchet.services.dispatcher.history_client import HistoryClient

log = logging.getLogger(__name__)

# Most completions one CompleteTasks call carries; a fuller batch is sent at once.
MAX_BATCH = 1000


@dataclasses.dataclass
class _Pending:
    completions: list[hpb.Completion] = dataclasses.field(default_factory=list)
    waiters: list[tuple[int, int, asyncio.Future]] = dataclasses.field(default_factory=list)


class CompletionBatcher:
    """Coalesces completions per shard for up to `window_s` seconds.

    The first submitter of a batch waits the window, then sends everything
    that joined in one call and splits the answer back by position. A window
    of 0 sends each submission on its own (no coalescing).
    """

    def __init__(self, history: HistoryClient, window_s: float = 0.001):
        self._history = history
        self._window_s = window_s
        self._pending: dict[int, _Pending] = {}
        self._flushes: set[asyncio.Task] = set()

    async def complete(self, shard_id: int, completions: Sequence[hpb.Completion]) -> list[hpb.CompletionResult]:
        """Results for `completions` (all of one shard), in order."""
        if self._window_s <= 0:
            response = await self._history.complete_tasks(shard_id, completions)
            return _checked(shard_id, len(completions), response.results)
        batch = self._pending.get(shard_id)
        if batch is None or len(batch.completions) + len(completions) > MAX_BATCH:
            batch = self._pending[shard_id] = _Pending()
            self._start_flush(shard_id, batch, self._window_s)
        future = asyncio.get_running_loop().create_future()
        # Retrieve the outcome even if the caller went away, so nothing logs "never retrieved".
        future.add_done_callback(lambda f: f.cancelled() or f.exception())
        batch.waiters.append((len(batch.completions), len(completions), future))
        batch.completions.extend(completions)
        # If the caller is cancelled the batch still goes out for the others.
        return await asyncio.shield(future)

    def _start_flush(self, shard_id: int, batch: _Pending, delay: float) -> None:
        task = asyncio.create_task(self._flush(shard_id, batch, delay))
        self._flushes.add(task)
        task.add_done_callback(self._flushes.discard)

    async def _flush(self, shard_id: int, batch: _Pending, delay: float) -> None:
        await asyncio.sleep(delay)
        if self._pending.get(shard_id) is batch:
            del self._pending[shard_id]
        try:
            try:
                results = await self._send(shard_id, batch.completions)
            except HistoryRejected:
                if len(batch.waiters) == 1:
                    raise
                # One agent's bad completion must not fail the others it was coalesced with.
                await asyncio.gather(*(self._send_part(shard_id, batch, w) for w in batch.waiters))
                return
        except BaseException as err:  # every waiter must hear about the failure, whatever it is
            for _, _, future in batch.waiters:
                _settle(future, error=err)
            if isinstance(err, asyncio.CancelledError):
                raise
            return
        for start, count, future in batch.waiters:
            _settle(future, list(results[start:start + count]))

    async def _send(self, shard_id: int, completions: Sequence[hpb.Completion]) -> Sequence[hpb.CompletionResult]:
        response = await self._history.complete_tasks(shard_id, completions)
        return _checked(shard_id, len(completions), response.results)

    async def _send_part(self, shard_id: int, batch: _Pending, waiter: tuple[int, int, asyncio.Future]) -> None:
        start, count, future = waiter
        try:
            _settle(future, list(await self._send(shard_id, batch.completions[start:start + count])))
        except Exception as err:  # handed to that waiter's caller, which maps it to a status
            _settle(future, error=err)

    async def close(self) -> None:
        """Wait for batches already started (used at shutdown)."""
        if self._flushes:
            await asyncio.gather(*self._flushes, return_exceptions=True)


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
             results: Sequence[hpb.CompletionResult]) -> Sequence[hpb.CompletionResult]:
    if len(results) != expected:
        raise MismatchedAnswer(f"history answered {len(results)} results for {expected} completions "
                               f"on shard {shard_id}")
    return results


async def complete(batcher: CompletionBatcher, completions: Sequence[hpb.Completion]) -> list[hpb.CompletionResult]:
    """One CompletionResult per completion, in request order; UNAVAILABLE if any shard failed."""
    if not completions:
        return []
    groups = group_by_shard(completions, lambda c: c.shard_id)
    shards = list(groups)
    outcomes = await asyncio.gather(*(batcher.complete(shard, pick(completions, groups[shard])) for shard in shards),
                                    return_exceptions=True)
    answers, failed = {}, []
    for shard, outcome in zip(shards, outcomes):
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
