"""Fan-out loop: per shard, deliver the outbox of children's ends to their parents' shards
and drive the open cancel cascades (workflows/fanout.py does both, a batch a transaction).

When: at once after a commit of this process that wrote outbox rows (`wake`, from
Store.on_child_end: in-process, no NOTIFY), at once again after a full batch, and at least
every `idle_s` (1 s), which finds the rows a crash left between a parent's commit and the
outbox delete (delivered again: recording them is idempotent) and the cascades a crash left
half done. Two loops on one shard are safe: the outbox rows are taken FOR UPDATE SKIP LOCKED.
"""

from __future__ import annotations

import asyncio
import logging

from ratchet.libs.rpc.errors import ServiceError
from ratchet.services.history.shards import Shard
from ratchet.services.history.workflows import fanout

log = logging.getLogger(__name__)

IDLE_S = 1.0
ROUND_TIMEOUT_S = 30.0
BACKOFF_S = 1.0


class FanoutLoop:
    """The delivery and cascade loops of every shard of a Mesh; `wake()` after a child's end."""

    def __init__(self, mesh: fanout.Mesh, *, idle_s: float = IDLE_S, batch: int = fanout.DELIVER_BATCH):
        self._mesh = mesh
        self._idle_s = idle_s
        self._batch = batch
        self._wake = {sid: asyncio.Event() for sid in mesh.shards.ids}
        self.delivered = 0  # outbox rows delivered (for tests)

    def wake(self) -> None:
        """Children ended on some shard (committed): every shard's loop looks at once (one
        indexed read of an empty outbox on the others)."""
        for e in self._wake.values():
            e.set()

    async def run(self) -> None:
        """A loop per shard until cancelled (a batch in flight rolls back: delivered again later)."""
        async with asyncio.TaskGroup() as group:
            for shard in self._mesh.shards:
                group.create_task(self._run_shard(shard))

    async def round(self, shard: Shard) -> bool:
        """One batch of deliveries and of cascades on the shard; True if there may be more."""
        n = await fanout.deliver(self._mesh, shard.id, self._batch)
        self.delivered += n
        c = await fanout.cascade(self._mesh, shard.id)
        return n >= self._batch or c > 0

    async def _run_shard(self, shard: Shard) -> None:
        wake = self._wake[shard.id]
        while True:
            wake.clear()
            busy = False
            if shard.available:
                try:
                    async with asyncio.timeout(ROUND_TIMEOUT_S):
                        busy = await self.round(shard)
                except (ServiceError, OSError, TimeoutError) as e:
                    log.warning("fan-out loop on shard %s: %s: %s", shard.id, type(e).__name__, e)
                    await asyncio.sleep(BACKOFF_S)
                except Exception:  # a bug must not stop the shard's deliveries for good
                    log.exception("fan-out loop on shard %s failed", shard.id)
                    await asyncio.sleep(BACKOFF_S)
            if busy:
                continue
            try:
                await asyncio.wait_for(wake.wait(), self._idle_s)
            except TimeoutError:
                pass
