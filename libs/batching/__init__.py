"""Natural batching: gather items per key while a flush for that key is in flight, and flush
what gathered as one call.

One primitive for every group commit of the platform: the gateway's coalesced enqueues
(one CreateTasks per shard), history's group commit of creates (one statement per shard)
and the dispatcher's completions (one CompleteTasks per shard). A call costs a fixed
amount (an RPC, a statement, a commit) that dwarfs the per-item work, so under load many
items share one; when a key is idle, an item goes out at once, alone, in its caller's own
task: no timer, no linger, no added latency.

    batcher = Batcher(flush, max_in_flight=1, max_items=200)
    result = await batcher.submit(key, item)

`flush(key, items)` makes the one call for `items` (in submission order) and returns one
outcome per item, in the same order: its result, or an exception instance for that item
alone. A flush that raises fails every item it carried with that error. Each caller gets
exactly its own outcome.

Bounded: a flush carries at most `max_items` items and, with `size`, about `max_size` of
their total size (an item bigger than that alone goes alone); with `distinct`, an item
that shares any of `distinct(item)` with an item already in the flush is held back for the
next one, in order (two items with one idempotency key must not share a call). A queued
item waits only for the flushes in flight ahead of it. Cancellation-safe: a caller that
gives up (its task cancelled, e.g. by its deadline) before its item went out takes it out
(nothing is sent for it); one whose item is in flight leaves the flush running for the
others, and its outcome is dropped. `close()` waits for the flushes started.
"""

from __future__ import annotations

import asyncio
import collections
import dataclasses
from collections.abc import Awaitable, Callable, Hashable, Iterable, Sequence
from typing import Generic, TypeVar

K = TypeVar("K", bound=Hashable)
T = TypeVar("T")
R = TypeVar("R")

class MismatchedOutcomes(RuntimeError):
    """A flush returned a different number of outcomes than items it was given."""


@dataclasses.dataclass
class _Lane(Generic[T]):
    """One key's flushes in flight and the items queued behind them."""

    in_flight: int = 0
    queued: collections.deque[tuple[T, asyncio.Future]] = dataclasses.field(default_factory=collections.deque)


class Batcher(Generic[K, T, R]):
    """Items submitted per key, flushed together while a flush for that key is in flight.

    max_in_flight: flushes per key at once (None: no limit, every item its own flush, i.e.
    batching off). max_items, size/max_size, distinct: the bounds of one flush (module doc).
    """

    def __init__(self, flush: Callable[[K, list[T]], Awaitable[Sequence[R | BaseException]]], *,
                 max_in_flight: int | None = 1, max_items: int = 1000,
                 size: Callable[[T], int] | None = None, max_size: int | None = None,
                 distinct: Callable[[T], Iterable[Hashable]] | None = None):
        if max_in_flight is not None and max_in_flight < 1:
            raise ValueError(f"max_in_flight must be at least 1 or None, got {max_in_flight}")
        if max_items < 1:
            raise ValueError(f"max_items must be at least 1, got {max_items}")
        self._flush = flush
        self._max_in_flight = max_in_flight
        self._max_items = max_items
        self._size = size
        self._max_size = max_size
        self._distinct = distinct
        self._lanes: dict[K, _Lane[T]] = {}
        self._running: set[asyncio.Task] = set()
        self.flushes = 0  # flushes made (calls), for tests and benchmarks

    async def submit(self, key: K, item: T) -> R:
        """The item's outcome once its flush returned: its result, or its error raised."""
        lane = self._lanes.get(key)
        if lane is None:
            lane = self._lanes[key] = _Lane()
        if self._free(lane) and not lane.queued:
            return await self._inline(key, lane, item)
        future = asyncio.get_running_loop().create_future()
        lane.queued.append((item, future))
        # (a cancelled caller cancels the future it awaits: the gather skips it, a settle too)
        return await future

    def _free(self, lane: _Lane[T]) -> bool:
        return self._max_in_flight is None or lane.in_flight < self._max_in_flight

    async def _inline(self, key: K, lane: _Lane[T], item: T) -> R:
        """An idle key's item, flushed alone in its caller's task (no task to create)."""
        lane.in_flight += 1
        try:
            self.flushes += 1
            (outcome,) = _checked(await self._flush(key, [item]), 1)
        finally:
            lane.in_flight -= 1
            self._next(key, lane)
        if isinstance(outcome, BaseException):
            raise outcome
        return outcome

    def _gather(self, lane: _Lane[T]) -> list[tuple[T, asyncio.Future]]:
        """The next flush's items, in order, within the bounds; the ones held back stay first."""
        group: list[tuple[T, asyncio.Future]] = []
        held: list[tuple[T, asyncio.Future]] = []
        taken: set[Hashable] = set()
        total = 0
        while lane.queued and len(group) < self._max_items:
            item, future = lane.queued.popleft()
            if future.done():
                continue  # its caller gave up before it went out: nothing is sent for it
            if self._distinct is not None:
                marks = list(self._distinct(item))
                if not taken.isdisjoint(marks):
                    held.append((item, future))
                    continue
            if self._size is not None and self._max_size is not None:
                n = self._size(item)
                if group and total + n > self._max_size:
                    lane.queued.appendleft((item, future))
                    break
                total += n
            if self._distinct is not None:
                taken.update(marks)
            group.append((item, future))
        lane.queued.extendleft(reversed(held))
        return group

    def _next(self, key: K, lane: _Lane[T]) -> None:
        """Start flushes for what queued, while the key has room."""
        while lane.queued and self._free(lane):
            group = self._gather(lane)
            if not group:
                break
            lane.in_flight += 1
            task = asyncio.ensure_future(self._run(key, lane, group))
            self._running.add(task)
            task.add_done_callback(self._running.discard)
        if not lane.in_flight and not lane.queued:
            self._lanes.pop(key, None)

    async def _run(self, key: K, lane: _Lane[T], group: list[tuple[T, asyncio.Future]]) -> None:
        try:
            self.flushes += 1
            try:
                outcomes = _checked(await self._flush(key, [item for item, _ in group]), len(group))
            except BaseException as e:  # every item of the flush hears of its failure, whatever it is
                for _, future in group:
                    _settle(future, e)
                if isinstance(e, asyncio.CancelledError):
                    raise
                return
            for (_, future), outcome in zip(group, outcomes, strict=True):
                _settle(future, outcome)
        finally:
            lane.in_flight -= 1
            self._next(key, lane)

    async def close(self) -> None:
        """Wait for the flushes started (shutdown)."""
        while self._running:
            await asyncio.gather(*list(self._running), return_exceptions=True)


def _checked(outcomes: Sequence, n: int) -> Sequence:
    if len(outcomes) != n:
        raise MismatchedOutcomes(f"a flush of {n} items returned {len(outcomes)} outcomes")
    return outcomes


def _settle(future: asyncio.Future, outcome) -> None:
    if future.done():
        return  # its caller gave up while it was in flight: the outcome is dropped
    if isinstance(outcome, asyncio.CancelledError):
        future.cancel()
    elif isinstance(outcome, BaseException):
        future.set_exception(outcome)
    else:
        future.set_result(outcome)
