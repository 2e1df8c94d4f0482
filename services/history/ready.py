"""WatchReady fan-out: after an enqueue commits (or timers make work ready)
history tells every watcher of that shard, coalesced to at most one pending
event per shard per watcher, so a burst of enqueues is one wake-up.

A WatchReadyOnDemand watcher gets events only while its dispatcher has polls
waiting: with every worker busy (or none connected) an event per commit is
a message each side pays for and nobody acts on."""

from __future__ import annotations

import asyncio
from typing import Iterable


class Watcher:
    """One WatchReady stream's pending shards."""

    def __init__(self, shard_ids: Iterable[int], wanted: bool = True):
        self.shard_ids = frozenset(shard_ids)
        self._pending: dict[int, None] = {}  # an ordered set: one entry per shard at most
        self._event = asyncio.Event()
        self.closed = False
        self.wanted = wanted
        self.dropped = 0  # events not sent because nobody wanted them (tests, metrics)

    def notify(self, shard_id: int) -> None:
        """Mark shard_id pending if this watcher watches it and wants events now."""
        if shard_id in self.shard_ids:
            if not self.wanted:
                self.dropped += 1
                return
            self._pending[shard_id] = None
            self._event.set()

    def want(self, wanted: bool) -> None:
        """WatchReadyOnDemand: start or stop wanting events. Starting marks every watched
        shard pending: work that became ready while nobody listened must still wake someone."""
        if wanted and not self.wanted:
            for sid in sorted(self.shard_ids):
                self._pending[sid] = None
            self._event.set()
        self.wanted = wanted

    def close(self) -> None:
        """End the stream: next() returns [] from now on."""
        self.closed = True
        self._event.set()

    async def next(self) -> list[int]:
        """Wait for the next events; [] once the watcher is closed."""
        await self._event.wait()
        self._event.clear()
        if self.closed:
            return []
        out = list(self._pending)
        self._pending.clear()
        return out


class ReadyHub:
    """The set of live watchers of this process."""

    def __init__(self) -> None:
        self._watchers: set[Watcher] = set()

    def watch(self, shard_ids: Iterable[int], wanted: bool = True) -> Watcher:
        """Register a watcher of these shards (on demand: `wanted` False until it says so)."""
        w = Watcher(shard_ids, wanted)
        self._watchers.add(w)
        return w

    def unwatch(self, w: Watcher) -> None:
        """Forget a watcher (its stream ended)."""
        self._watchers.discard(w)

    def publish(self, shard_id: int) -> None:
        """Mark shard_id ready for every watcher of it (never blocks)."""
        for w in self._watchers:
            w.notify(shard_id)

    def close(self) -> None:
        """End every stream (server shutdown)."""
        for w in list(self._watchers):
            w.close()

    @property
    def watcher_count(self) -> int:
        """How many streams are watching (tests wait on it)."""
        return len(self._watchers)
