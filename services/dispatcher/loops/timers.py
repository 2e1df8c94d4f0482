"""Timer loop: for each owned shard, ask history to fire due timers (delays,
retry backoff, lease expiry, timeouts) about every timer_interval_s. History
claims them with FOR UPDATE SKIP LOCKED on the shard clock; this loop only
decides when to ask. A firing that made work ready wakes parked polls."""

from __future__ import annotations

import asyncio
import logging
from typing import Callable, Iterable

from ratchet.libs.clock import Clock
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
                 max_timers: int = MAX_TIMERS):
        self._history = history
        self._shards = list(shard_ids)
        self._interval_s = interval_s
        self._on_ready = on_ready
        self._clock = clock
        self._book = book
        self._max_timers = max_timers

    async def run(self) -> None:
        """Run until cancelled."""
        await asyncio.gather(*(self._run_shard(shard) for shard in self._shards))

    async def _run_shard(self, shard: int) -> None:
        failures = 0
        while True:
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
            await self._clock.sleep(self._next_sleep(response))

    def _next_sleep(self, response) -> float:
        if response.fired >= self._max_timers:
            return 0.0  # a full batch: more are probably due, fire again at once
        delay = self._interval_s
        if response.HasField("next_in"):
            delay = min(delay, response.next_in.ToNanoseconds() / 1e9)
        return max(MIN_SLEEP_S, delay)
