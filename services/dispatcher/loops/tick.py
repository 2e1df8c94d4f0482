"""Fallback tick: wake the head of every line of parked polls for every owned
shard, every 250 ms, or every second while the ready-event stream is live.
Ready events can be lost (the WatchReady stream is best effort and may be
down); the tick bounds what a lost event costs.

While the stream is live (an event arrived on it since it opened: the flip to
wanted answers with every shard at once) every path that makes work ready on
the shard (an enqueue, a fired timer, a bulk retry) publishes an event, so the
tick only covers what no event announces: a history process other than the one watched
(`fallback_tick_live_s` 0.25 for such a deployment). Each tick costs one
LeaseTasks per shard for the woken poll: on an idle platform with 4 shards,
16 calls a second at 250 ms, 4 at one second.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable

from ratchet.libs.clock import Clock

TICK_S = 0.25
LIVE_TICK_S = 1.0


class FallbackTick:
    """Calls on_tick(all shards) every tick_s, every live_tick_s while live() (never more often)."""

    def __init__(self, shard_ids: Iterable[int], on_tick: Callable[[Iterable[int]], None], clock: Clock,
                 tick_s: float = TICK_S, live_tick_s: float = LIVE_TICK_S,
                 live: Callable[[], bool] = lambda: False):
        self._shards = sorted(shard_ids)
        self._on_tick = on_tick
        self._clock = clock
        self._tick_s = tick_s
        self._live_tick_s = live_tick_s
        self._live = live

    def interval(self) -> float:
        """Seconds until the next tick, as things stand."""
        return max(self._tick_s, self._live_tick_s) if self._live() else self._tick_s

    async def run(self) -> None:
        """Run until cancelled."""
        while True:
            await self._clock.sleep(self.interval())
            self._on_tick(self._shards)
