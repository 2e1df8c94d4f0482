"""Background loop: advance every running bulk operation part on every
shard, one batch (one transaction) per operation per round, so several
operations share the shard fairly. Progress is committed with each batch,
so after a crash or restart the loop simply resumes from the cursors."""

from __future__ import annotations

import asyncio
import logging

from ratchet.libs.rpc.errors import ServiceError
from ratchet.services.history.bulk import operations
from ratchet.services.history.config import HistoryConfig
from ratchet.services.history.ready import ReadyHub
from ratchet.services.history.shards import Shard, ShardSet
from ratchet.services.history.store import Store

log = logging.getLogger(__name__)

MAX_OPS_PER_ROUND = 50
ERROR_BACKOFF_S = 1.0


class BulkLoop:
    """Runs bulk operation batches until stopped; `wake()` after a Start skips the idle wait."""

    def __init__(self, cfg: HistoryConfig, shards: ShardSet, store: Store, hub: ReadyHub):
        self._cfg = cfg
        self._shards = shards
        self._store = store
        self._hub = hub
        self._wake = asyncio.Event()

    def wake(self) -> None:
        """Run a round now (an operation was started)."""
        self._wake.set()

    async def run(self) -> None:
        """Run rounds until cancelled (a batch in flight then rolls back and is redone later)."""
        while True:
            self._wake.clear()
            busy = False
            for shard in self._shards:
                if not shard.available:
                    continue
                try:
                    busy = await self.round(shard) or busy
                except (ServiceError, OSError) as e:
                    log.warning("bulk operations on shard %s: %s", shard.id, e)
                    await asyncio.sleep(ERROR_BACKOFF_S)
                    busy = True  # try again after the backoff, not after the idle interval
                except Exception:  # a bug must not stop every other operation for good
                    log.exception("bulk operations on shard %s failed", shard.id)
                    await asyncio.sleep(ERROR_BACKOFF_S)
                    busy = True
            if not busy:
                try:
                    await asyncio.wait_for(self._wake.wait(), self._cfg.bulk_interval_s)
                except TimeoutError:
                    pass

    async def round(self, shard: Shard) -> bool:
        """One batch of each running operation part on the shard; True if any ran."""
        async with shard.conn() as conn:
            ids = await self._store.on(conn).bulk_operation_running(MAX_OPS_PER_ROUND)
        ran = False
        for operation_id in ids:
            async with shard.conn() as conn:
                out = await operations.run_batch(conn, self._store, operation_id, batch_size=self._cfg.bulk_batch_size,
                                                 grace_s=self._cfg.cancel_grace_s)
            if out.created:
                self._hub.publish(shard.id)  # after commit, like an enqueue
            if out.ran:  # new tasks' timeouts, cancels' kill times: the timer loop reads when they are due
                self._hub.timer_due(shard.id, 0.0)
            ran = ran or out.ran
        return ran
