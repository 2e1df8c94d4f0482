"""WatchReady fan-out: after an enqueue commits (or timers make work ready)
history tells every watcher of that shard, coalesced to at most one pending
event per shard per watcher, so a burst of enqueues is one wake-up.

A WatchReadyOnDemand watcher gets events only while its dispatcher has polls
waiting: with every worker busy (or none connected) an event per commit is
a message each side pays for and nobody acts on.

Timer hints ride the same streams (watchers that asked for them, wanted or
not): a commit that wrote a timer due sooner than the earliest one the last
FireTimers reported (or any timer while a FireTimers is in flight, whose
read may have missed it) is announced, so the dispatcher can sleep between
FireTimers calls for as long as nothing is due instead of asking every
250 ms per shard. A hint is a hint: the dispatcher still asks at its idle
interval, so a hint lost with a broken stream costs lateness, never a timer."""

from __future__ import annotations

import asyncio
import math
from collections.abc import Iterable


class Watcher:
    """One WatchReady stream's pending shards."""

    def __init__(self, shard_ids: Iterable[int], wanted: bool = True, timer_hints: bool = False):
        self.shard_ids = frozenset(shard_ids)
        self._pending: dict[int, None] = {}  # an ordered set: one entry per shard at most
        self._timers: dict[int, float] = {}  # shard -> earliest hinted due time (loop clock)
        self._event = asyncio.Event()
        self.closed = False
        self.wanted = wanted
        self.timer_hints = timer_hints
        self.dropped = 0  # events not sent because nobody wanted them (tests, metrics)

    def notify(self, shard_id: int) -> None:
        """Mark shard_id pending if this watcher watches it and wants events now."""
        if shard_id in self.shard_ids:
            if not self.wanted:
                self.dropped += 1
                return
            self._pending[shard_id] = None
            self._event.set()

    def hint(self, shard_id: int, due_at: float) -> None:
        """A timer on shard_id is due at `due_at` (loop clock): sent whether events are wanted or
        not, to watchers that asked for hints; coalesced to the earliest per shard."""
        if self.timer_hints and shard_id in self.shard_ids:
            if due_at < self._timers.get(shard_id, math.inf):
                self._timers[shard_id] = due_at
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
        """Wait for the next ready events; [] once the watcher is closed."""
        while True:
            got = await self.next_events()
            if got is None:
                return []
            if got[0]:
                return got[0]

    async def next_events(self) -> tuple[list[int], dict[int, float]] | None:
        """Wait for the next ready events and timer hints ({shard: due at, loop clock}); None
        once the watcher is closed."""
        while True:
            await self._event.wait()
            self._event.clear()
            if self.closed:
                return None
            ready, timers = list(self._pending), self._timers
            self._pending.clear()
            self._timers = {}
            if ready or timers:
                return ready, timers


class ReadyHub:
    """The set of live watchers of this process."""

    def __init__(self) -> None:
        self._watchers: set[Watcher] = set()
        # Per shard: the loop-clock time of the earliest pending timer FireTimers last reported
        # (inf: none, or never asked), lowered by every hint since; FireTimers calls in flight.
        self._reported: dict[int, float] = {}
        self._firing: dict[int, int] = {}

    def watch(self, shard_ids: Iterable[int], wanted: bool = True, timer_hints: bool = False) -> Watcher:
        """Register a watcher of these shards (on demand: `wanted` False until it says so). With
        timer_hints, every watched shard is hinted due now: hints flow from here on, and timers
        written before are for a FireTimers call to find."""
        w = Watcher(shard_ids, wanted, timer_hints)
        self._watchers.add(w)
        if timer_hints:
            now = asyncio.get_running_loop().time()
            for sid in sorted(w.shard_ids):
                w.hint(sid, now)
        return w

    def unwatch(self, w: Watcher) -> None:
        """Forget a watcher (its stream ended)."""
        self._watchers.discard(w)

    def publish(self, shard_id: int) -> None:
        """Mark shard_id ready for every watcher of it (never blocks)."""
        for w in self._watchers:
            w.notify(shard_id)

    def timer_due(self, shard_id: int, seconds: float | None) -> None:
        """A commit on shard_id wrote a timer due in `seconds` (None: none): hint it to the timer
        watchers if it is sooner than what FireTimers last reported, or a FireTimers is in flight
        (its read may not have seen this commit, and its report must not hide it)."""
        if seconds is None:
            return
        due_at = asyncio.get_running_loop().time() + max(0.0, seconds)
        if not self._firing.get(shard_id) and due_at >= self._reported.get(shard_id, math.inf):
            return
        self._reported[shard_id] = min(due_at, self._reported.get(shard_id, math.inf))
        for w in self._watchers:
            w.hint(shard_id, due_at)

    def firing(self, shard_id: int) -> _Firing:
        """`async with hub.firing(shard)` around a FireTimers call; report its next_in inside."""
        return _Firing(self, shard_id)

    def close(self) -> None:
        """End every stream (server shutdown)."""
        for w in list(self._watchers):
            w.close()

    @property
    def watcher_count(self) -> int:
        """How many streams are watching (tests wait on it)."""
        return len(self._watchers)


class _Firing:
    """One FireTimers call in flight on a shard: timer commits meanwhile are hinted whatever
    their due time; report() records what the call found as the shard's earliest timer."""

    def __init__(self, hub: ReadyHub, shard_id: int):
        self._hub, self._shard = hub, shard_id

    async def __aenter__(self) -> _Firing:
        firing = self._hub._firing
        firing[self._shard] = firing.get(self._shard, 0) + 1
        return self

    async def __aexit__(self, *exc) -> None:
        firing = self._hub._firing
        firing[self._shard] -= 1
        if not firing[self._shard]:
            del firing[self._shard]

    def report(self, next_in_s: float | None) -> None:
        """The call's answer: the earliest pending timer is due in next_in_s (None: none). Hints
        sent while it ran went out already, so the report may be later than they are."""
        at = math.inf if next_in_s is None else asyncio.get_running_loop().time() + max(0.0, next_in_s)
        self._hub._reported[self._shard] = at
