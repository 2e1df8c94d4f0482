"""Delivery loop: every tick (or at once when the fire loop records a slot),
find schedules with open slots whose time has come (new slots, buffered
slots to re-check, sends to retry after a failure or a crash) and deliver
each (delivery.py), a few schedules at a time. This is also the recovery
pass: a slot left PENDING or SENDING by a process that died is picked up
here, by this process or any other.

While no slot is open anywhere the loop looks every idle_s (1 s) instead of
every tick: a slot recorded here wakes it at once, one recorded by another
cron process is that process's to deliver (this one recovers it within
idle_s + send_lease_s if that process died). Each delivery that ends calls
on_delivered (the fire loop looks again: a closed slot may make its
schedule claimable)."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable

from ratchet.services.cron import errors
from ratchet.services.cron.delivery import Delivery
from ratchet.services.cron.store import Store

log = logging.getLogger(__name__)


class DeliverLoop:
    """Delivers open slots until cancelled."""

    def __init__(self, store: Store, delivery: Delivery, interval_s: float, batch_size: int, concurrency: int,
                 idle_s: float | None = None, on_delivered: Callable[[], None] = lambda: None):
        self._store = store
        self._delivery = delivery
        self._interval_s = interval_s
        self._idle_s = max(interval_s, idle_s or interval_s)
        self.on_delivered = on_delivered
        self.looks = 0  # reads of open slots (tests, idle cost)
        self._batch = batch_size
        self._slots = asyncio.Semaphore(concurrency)
        self._wake = asyncio.Event()
        self._inflight: dict[str, asyncio.Task] = {}

    def wake(self) -> None:
        """Look for open slots now rather than at the next tick."""
        self._wake.set()

    async def run(self) -> None:
        try:
            while True:
                self._wake.clear()
                self.looks += 1
                try:
                    async with self._store.read() as r:  # (a read: no transaction)
                        due, open_ = await r.slot_due_schedules(self._batch)
                except errors.Unavailable as e:
                    log.warning("finding open slots failed: %s", e)
                    due, open_ = [], True
                for schedule_id in due:
                    if schedule_id not in self._inflight:
                        self._inflight[schedule_id] = asyncio.create_task(self._deliver(schedule_id))
                with contextlib.suppress(asyncio.TimeoutError):
                    await asyncio.wait_for(self._wake.wait(), self._interval_s if open_ else self._idle_s)
        finally:
            for task in list(self._inflight.values()):
                task.cancel()
            for task in list(self._inflight.values()):
                with contextlib.suppress(asyncio.CancelledError):
                    await task

    async def _deliver(self, schedule_id: str) -> None:
        try:
            async with self._slots:
                await self._delivery.deliver_schedule(schedule_id)
        except errors.ServiceError as e:
            log.warning("delivering slots of schedule %s failed: %s", schedule_id, e)
        except Exception:  # one schedule's bug must not stop the others
            log.exception("delivering slots of schedule %s crashed", schedule_id)
        finally:
            self._inflight.pop(schedule_id, None)
            self.on_delivered()
