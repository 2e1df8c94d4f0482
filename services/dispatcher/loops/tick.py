"""Fallback tick: every 250 ms wake the head of every line of parked polls
for every owned shard. Ready events can be lost (the WatchReady stream is best
effort and may be down); the tick bounds what a lost event costs."""

from __future__ import annotations

from typing import Callable, Iterable

from ratchet.libs.clock import Clock

TICK_S = 0.25


class FallbackTick:
    """Calls on_tick(all shards) every tick_s."""

    def __init__(self, shard_ids: Iterable[int], on_tick: Callable[[Iterable[int]], None], clock: Clock,
                 tick_s: float = TICK_S):
        self._shards = sorted(shard_ids)
        self._on_tick = on_tick
        self._clock = clock
        self._tick_s = tick_s

    async def run(self) -> None:
        """Run until cancelled."""
        while True:
            await self._clock.sleep(self._tick_s)
            self._on_tick(self._shards)
