"""What a commit announces in-process, after it committed (never a NOTIFY):

* ready work: after an enqueue with due work, a firing that made work ready or a bulk
  retry batch, the shard id goes to every WatchReady stream watching it, coalesced to at
  most one pending event per shard per stream, so a burst of enqueues is one wake-up. A
  stream gets events only while its dispatcher says it wants them (polls are waiting):
  with every worker busy, or none connected, an event per commit is a message each side
  pays for and nobody acts on.
* a timer written (`timer_due`): the shard's timer loop (loops/timers.py) hears when it is
  due, so a timer due sooner than the loop's next wake-up fires on time without the loop
  polling for it.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Iterable


class Watcher:
    """One WatchReady stream's pending shards."""

    def __init__(self, shard_ids: Iterable[int], wanted: bool = False):
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
        """Start or stop wanting events. Starting marks every watched shard pending: work that
        became ready while nobody listened must still wake someone."""
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
        """Wait for the next ready events; [] once the watcher is closed."""
        while True:
            await self._event.wait()
            self._event.clear()
            if self.closed:
                return []
            if self._pending:
                ready = list(self._pending)
                self._pending.clear()
                return ready


def _no_timer_loop(shard_id: int, seconds: float) -> None:
    """The hub's timer listener until the server connects its timer loop."""


class ReadyHub:
    """The live watchers of this process, and its timer loop's ear for commits."""

    def __init__(self) -> None:
        self._watchers: set[Watcher] = set()
        # Set by the server to the timer loop's `due` (loops/timers.py).
        self.on_timer: Callable[[int, float], None] = _no_timer_loop

    def watch(self, shard_ids: Iterable[int], wanted: bool = False) -> Watcher:
        """Register a watcher of these shards (`wanted` False until it says so)."""
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

    def timer_due(self, shard_id: int, seconds: float | None) -> None:
        """A commit on shard_id wrote a timer due in `seconds` (None: it wrote none): the shard's
        timer loop fires it by then."""
        if seconds is not None:
            self.on_timer(shard_id, seconds)

    def close(self) -> None:
        """End every stream (server shutdown)."""
        for w in list(self._watchers):
            w.close()

    @property
    def watcher_count(self) -> int:
        """How many streams are watching (tests wait on it)."""
        return len(self._watchers)
