"""Completions: apply attempt outcomes, one CompleteTasks call per shard, all
shards at once, answers in request order. If any shard fails the whole call
fails UNAVAILABLE and the agent retries it: a completion is fenced by its
lease epoch, so one already applied comes back accepted=false with the task's
current state (CompletionResult.state), which tells the agent it landed.

Completions for one shard that arrive while history is busy with earlier
ones are coalesced into one CompleteTasks call (group commit: one history
transaction instead of many, on libs/batching); see `CompletionBatcher`.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Sequence

from ratchet.internal.worker.v1 import worker_pb2 as wpb
from ratchet.libs.batching import Batcher
from ratchet.services.dispatcher.errors import CallUnavailable, HistoryRejected, MismatchedAnswer, ShardUnavailable
from ratchet.services.dispatcher.grouping import group_by_shard, merge_in_order, pick
from ratchet.services.dispatcher.history_client import HistoryClient

log = logging.getLogger(__name__)

# Most completions one CompleteTasks call carries.
MAX_BATCH = 1000
# CompleteTasks calls in flight per shard before further completions queue up
# and go out together. One coalesces the most under load and costs a lone agent
# nothing; more in flight made smaller groups, and a fixed time window did worse
# and delayed every call of a lone agent (findings.md: dispatcher completions).
MAX_IN_FLIGHT = 1


class CompletionBatcher:
    """Group commit of completions per shard (libs/batching).

    While fewer than `max_in_flight` CompleteTasks calls are out for a shard,
    a submission goes out at once, alone: no added latency when idle. Beyond
    that, submissions queue and the queue goes out as one call (at most
    MAX_BATCH completions) when a call returns, so under load many completions
    share one history transaction. A submission whose caller gave up before
    its call went out is left out. `max_in_flight=None` turns coalescing off
    (every submission its own call).
    """

    def __init__(self, history: HistoryClient, max_in_flight: int | None = MAX_IN_FLIGHT):
        self._history = history
        self._batcher: Batcher[int, Sequence[wpb.Completion], list[wpb.CompletionResult]] = Batcher(
            self._flush, max_in_flight=max_in_flight, max_items=MAX_BATCH, size=len, max_size=MAX_BATCH)
        self.calls = 0  # CompleteTasks calls made, for tests and benchmarks

    async def complete(self, shard_id: int, completions: Sequence[wpb.Completion]) -> list[wpb.CompletionResult]:
        """Results for `completions` (all of one shard), in order."""
        return await self._batcher.submit(shard_id, completions)

    async def _flush(self, shard_id: int,
                     parts: list[Sequence[wpb.Completion]]) -> list[list[wpb.CompletionResult] | BaseException]:
        """One CompleteTasks for the submissions queued together; each its own slice of the answer."""
        if len(parts) == 1:
            return [list(await self._send(shard_id, parts[0]))]
        try:
            results = await self._send(shard_id, [c for cs in parts for c in cs])
        except HistoryRejected:
            # One agent's bad completion must not fail the others it was coalesced with.
            return list(await asyncio.gather(*(self._part(shard_id, cs) for cs in parts)))
        out: list[list[wpb.CompletionResult] | BaseException] = []
        start = 0
        for cs in parts:
            out.append(list(results[start:start + len(cs)]))
            start += len(cs)
        return out

    async def _send(self, shard_id: int, completions: Sequence[wpb.Completion]) -> Sequence[wpb.CompletionResult]:
        self.calls += 1
        response = await self._history.complete_tasks(shard_id, completions)
        return _checked(shard_id, len(completions), response.results)

    async def _part(self, shard_id: int, completions: Sequence[wpb.Completion]
                    ) -> list[wpb.CompletionResult] | BaseException:
        try:
            return list(await self._send(shard_id, completions))
        except Exception as err:  # noqa: BLE001 - handed to that submission's caller, which maps it to a status
            return err

    async def close(self) -> None:
        """Wait for batches already started (used at shutdown)."""
        await self._batcher.close()


async def _bounded(call, shard_id: int, timeout: float | None):
    try:
        async with asyncio.timeout(timeout):
            return await call
    except TimeoutError:
        raise ShardUnavailable(shard_id, f"no answer within {timeout:.2f}s; the outcome is unknown",
                               ambiguous=True) from None


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
