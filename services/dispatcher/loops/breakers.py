"""Breaker loop: the one writer of this process's breaker changes. It applies
queued events in order (crashes, probe leases and ends, resets) and every
`refresh_s` turns due OPEN breakers HALF_OPEN, claims free probes and reloads
the gate's cache, which also picks up what other dispatcher processes wrote.

If the breakers database is down, dispatch goes on with the breakers as last
loaded; the event at the head is retried with backoff (later ones wait, so
their order holds) and the refresh is retried on schedule.
"""

from __future__ import annotations

import logging

from ratchet.libs.clock import Clock
from ratchet.services.dispatcher.breaker_keeper import BreakerKeeper, Event
from ratchet.services.dispatcher.errors import BreakersUnavailable

log = logging.getLogger(__name__)

REFRESH_S = 1.0
BACKOFF_BASE_S = 0.1
BACKOFF_MAX_S = 5.0


class BreakerLoop:
    """Drives a BreakerKeeper."""

    def __init__(self, keeper: BreakerKeeper, clock: Clock, refresh_s: float = REFRESH_S):
        self._keeper = keeper
        self._clock = clock
        self.refresh_s = refresh_s
        self._failures = 0

    async def run(self) -> None:
        """Run until cancelled."""
        next_refresh = self._clock.monotonic() + self.refresh_s
        pending: Event | None = None
        while True:
            if self._clock.monotonic() >= next_refresh:
                await self._refresh()
                next_refresh = self._clock.monotonic() + self.refresh_s
            if pending is None:
                pending = await self._keeper.next_event(next_refresh - self._clock.monotonic())
                if pending is None:
                    continue
            try:
                await self._keeper.apply(pending)
            except BreakersUnavailable as err:
                await self._back_off("applying a breaker event", err)
                continue
            except Exception as err:  # a bug or a refused write: drop the event, keep the loop
                log.exception("breaker event could not be applied")
                self._keeper.fail(pending, err)
            pending = None
            self._ok()

    async def _refresh(self) -> None:
        try:
            await self._keeper.refresh()
        except BreakersUnavailable as err:
            await self._back_off("refreshing breakers", err)
            return
        self._ok()

    async def _back_off(self, what: str, err: Exception) -> None:
        self._failures += 1
        backoff = min(BACKOFF_MAX_S, BACKOFF_BASE_S * 2 ** (self._failures - 1))
        log.log(logging.WARNING if self._failures in (1, 10) or self._failures % 100 == 0 else logging.DEBUG,
                "%s failed %d time(s) in a row (%s); dispatch goes on with the breakers as last loaded; "
                "next try in %.2fs", what, self._failures, err, backoff)
        await self._clock.sleep(backoff)

    def _ok(self) -> None:
        if self._failures:
            log.info("breakers database works again after %d failure(s)", self._failures)
        self._failures = 0
