"""Timer loop: for each owned shard, ask history to fire due timers (delays,
retry backoff, lease expiry, timeouts). History claims them with FOR UPDATE
SKIP LOCKED on the shard clock; this loop only decides when to ask. A firing
that made work ready wakes parked polls.

When to ask: at once after a full batch; else when the earliest pending timer
FireTimers reported is due, or after the idle interval if that is sooner.
While history's timer hints flow (`hints_live`, the watch stream's), a timer
written due sooner is announced (`hint`) and the idle interval is idle_s
(2 s): an idle shard costs one FireTimers call per idle_s instead of one per
interval_s (0.25 s). Without hints (an older history, a broken stream) the
loop asks every interval_s as before; losing the hints (`hints_lost`) asks
every shard at once, since a hint may have been lost with the stream."""

from __future__ import annotations

import asyncio
import logging
import math
from collections.abc import Callable, Iterable

from ratchet.libs.clock import Clock, sleep_unless
from ratchet.services.dispatcher.errors import DispatcherError, ShardUnavailable
from ratchet.services.dispatcher.history_client import HistoryClient
from ratchet.services.dispatcher.shards import ShardBook

log = logging.getLogger(__name__)

MAX_TIMERS = 500
# Never ask again sooner than this after a partial batch, even if the next
# timer is due now (it may be locked by another firing): no hot loop.
MIN_SLEEP_S = 0.005
MAX_BACKOFF_S = 5.0


class TimerLoop:
    """One firing loop per owned shard."""

    def __init__(self, history: HistoryClient, shard_ids: Iterable[int], interval_s: float,
                 on_ready: Callable[[int], None], clock: Clock, book: ShardBook | None = None,
                 max_timers: int = MAX_TIMERS, idle_s: float | None = None,
                 hints_live: Callable[[], bool] = lambda: False):
        self._history = history
        self._shards = list(shard_ids)
        self._interval_s = interval_s
        self._idle_s = max(interval_s, idle_s or interval_s)
        self._hints_live = hints_live
        self._on_ready = on_ready
        self._clock = clock
        self._book = book
        self._max_timers = max_timers
        # Per shard: the earliest due time (clock.monotonic) hinted since its current call
        # started, and the event that cuts its sleep short.
        self._hinted: dict[int, float] = {}
        self._wake: dict[int, asyncio.Event] = {s: asyncio.Event() for s in self._shards}
        self.calls = 0  # FireTimers calls made (tests, idle cost)

    def hint(self, shard: int, seconds: float) -> None:
        """History says a timer on `shard` may be due in `seconds`: ask by then."""
        if shard not in self._wake:
            return
        at = self._clock.monotonic() + max(0.0, seconds)
        if at < self._hinted.get(shard, math.inf):
            self._hinted[shard] = at
            self._wake[shard].set()

    def hints_lost(self) -> None:
        """The hint stream ended: hints may have been lost with it, so ask every shard now."""
        for shard in self._shards:
            self.hint(shard, 0.0)

    async def run(self) -> None:
        """Run until cancelled."""
        await asyncio.gather(*(self._run_shard(shard) for shard in self._shards))

    async def _run_shard(self, shard: int) -> None:
        failures = 0
        while True:
            # Hints that came before this call are of commits it sees: forget them.
            self._hinted.pop(shard, None)
            self._wake[shard].clear()
            self.calls += 1
            try:
                response = await self._history.fire_timers(shard, self._max_timers)
            except DispatcherError as err:
                failures += 1
                backoff = min(MAX_BACKOFF_S, self._interval_s * 2 ** failures)
                if self._book is not None and isinstance(err, ShardUnavailable):
                    self._book.failed(shard)
                log.log(logging.WARNING if failures in (1, 10) or failures % 100 == 0 else logging.DEBUG,
                        "FireTimers on shard %d failed %d time(s) in a row: %s; next try in %.2fs",
                        shard, failures, err, backoff)
                await self._clock.sleep(backoff)
                continue
            if failures:
                log.info("FireTimers on shard %d works again after %d failure(s)", shard, failures)
            failures = 0
            if self._book is not None:
                self._book.succeeded(shard)
            if response.ready:
                self._on_ready(shard)
            await self._sleep(shard, self._next_sleep(response))

    async def _sleep(self, shard: int, delay: float) -> None:
        """Sleep `delay` on the clock, cut short by a hint due sooner."""
        wake = self._wake[shard]
        now = self._clock.monotonic()
        until = now + delay
        left = min(delay, self._hinted.get(shard, math.inf) - now)
        while True:
            wake.clear()  # every hint so far is in `left`
            if not await sleep_unless(self._clock, max(0.0, left), wake):
                return
            left = min(until, self._hinted.get(shard, math.inf)) - self._clock.monotonic()
            if left <= 0:
                return

    def _next_sleep(self, response) -> float:
        if response.fired >= self._max_timers:
            return 0.0  # a full batch: more are probably due, fire again at once
        delay = self._idle_s if self._hints_live() else self._interval_s
        if response.HasField("next_in"):
            delay = min(delay, response.next_in.ToNanoseconds() / 1e9)
        return max(MIN_SLEEP_S, delay)
