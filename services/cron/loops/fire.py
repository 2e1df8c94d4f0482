"""Fire loop: every tick_interval_s, claim due schedules and record their
slots (claim.py), then wake the delivery loop so the slot goes out at once."""

from __future__ import annotations

import logging
from typing import Callable

from ratchet.libs.clock import Clock
from ratchet.services.cron import errors
from ratchet.services.cron.claim import claim_due
from ratchet.services.cron.store import Store

log = logging.getLogger(__name__)

MAX_BACKOFF_S = 5.0


class FireLoop:
    """Claims due schedules until cancelled."""

    def __init__(self, store: Store, interval_s: float, batch_size: int, grace_s: float,
                 on_fired: Callable[[], None], clock: Clock):
        self._store = store
        self._interval_s = interval_s
        self._batch = batch_size
        self._grace_s = grace_s
        self._on_fired = on_fired
        self._clock = clock

    async def run(self) -> None:
        failures = 0
        while True:
            try:
                fired = await claim_due(self._store, self._batch, self._grace_s)
            except errors.Unavailable as e:
                failures += 1
                delay = min(MAX_BACKOFF_S, self._interval_s * 2 ** failures)
                log.log(logging.WARNING if failures in (1, 10) or failures % 100 == 0 else logging.DEBUG,
                        "claiming due schedules failed %d time(s) in a row: %s; next try in %.2fs",
                        failures, e, delay)
                await self._clock.sleep(delay)
                continue
            if failures:
                log.info("claiming due schedules works again after %d failure(s)", failures)
            failures = 0
            if fired:
                self._on_fired()
            if len(fired) < self._batch:
                await self._clock.sleep(self._interval_s)
