"""Prune loop: delete finished slots older than slot_retention_s, in small
batches, so schedule_slots stays the size of its retention window."""

from __future__ import annotations

import logging

from ratchet.libs.clock import Clock
from ratchet.services.cron import errors
from ratchet.services.cron.store import Store

log = logging.getLogger(__name__)

INTERVAL_S = 60.0
BATCH = 1000


class PruneLoop:
    """Deletes old finished slots until cancelled."""

    def __init__(self, store: Store, retention_s: float, clock: Clock, interval_s: float = INTERVAL_S):
        self._store = store
        self._retention_s = retention_s
        self._clock = clock
        self._interval_s = interval_s

    async def run(self) -> None:
        while True:
            try:
                async with self._store.tx() as tx:
                    deleted = await tx.slot_prune(self._retention_s, BATCH)
            except errors.Unavailable as e:
                log.warning("pruning finished slots failed: %s", e)
                deleted = 0
            if deleted:
                log.info("pruned %d finished slot(s) older than %.0fs", deleted, self._retention_s)
            if deleted < BATCH:
                await self._clock.sleep(self._interval_s)
