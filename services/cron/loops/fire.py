"""Fire loop: claim due schedules and record their slots (claim.py), then
wake the delivery loop so the slot goes out at once.

When to look again: at once after a full batch; tick_interval_s (0.2 s)
after claiming some, or when one is due but was not claimed (another process
holds it); else when the next schedule is due (the look's read says when), or
after idle_s (1 s; at most half the misfire grace) if that is sooner. A
schedule created or resumed here, or a slot this process closed (which may
make its schedule claimable), wakes the loop at once; what other
cron processes change on the shared database is seen within idle_s."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable

from ratchet.libs.clock import Clock, sleep_unless
from ratchet.services.cron import errors
from ratchet.services.cron.claim import claim_due
from ratchet.services.cron.store import Store

log = logging.getLogger(__name__)

MAX_BACKOFF_S = 5.0


class FireLoop:
    """Claims due schedules until cancelled."""

    def __init__(self, store: Store, interval_s: float, batch_size: int, grace_s: float,
                 on_fired: Callable[[], None], clock: Clock, idle_s: float | None = None):
        self._store = store
        self._interval_s = interval_s
        # A schedule another process changed is seen within idle_s: at most half the misfire
        # grace, so such a change is never late enough to be skipped as missed.
        self._idle_s = max(interval_s, min(idle_s or interval_s, grace_s / 2))
        self._wake = asyncio.Event()
        self.looks = 0  # reads of what is due (tests, idle cost)
        self._batch = batch_size
        self._grace_s = grace_s
        self._on_fired = on_fired
        self._clock = clock

    async def run(self) -> None:
        failures = 0
        while True:
            self._wake.clear()  # what changed before this look, the look sees
            self.looks += 1
            try:
                fired, due_in = await claim_due(self._store, self._batch, self._grace_s)
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
                await sleep_unless(self._clock, self._next_sleep(fired, due_in), self._wake)

    def wake(self) -> None:
        """Look now: a schedule was created or resumed, or a slot closed, in this process."""
        self._wake.set()

    def _next_sleep(self, fired: list[str], due_in: float | None) -> float:
        if fired or (due_in is not None and due_in <= 0):
            return self._interval_s  # claimed some, or one is due that another process holds
        if due_in is None:
            return self._idle_s
        return min(due_in, self._idle_s)
