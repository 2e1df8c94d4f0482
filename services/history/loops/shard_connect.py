"""Background loop: keep retrying shards that were unreachable (connect,
migrate, open the pool), so a shard that comes up late starts serving
without a restart."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable

from ratchet.services.history.shards import ShardSet

log = logging.getLogger(__name__)


class ShardConnectLoop:
    """Retries unavailable shards every `interval_s` seconds."""

    def __init__(self, shards: ShardSet, interval_s: float = 1.0, on_connected: Callable[[], None] = lambda: None):
        self._shards = shards
        self._interval_s = interval_s
        self._on_connected = on_connected  # (a shard back: the bulk loop resumes its operations now)

    async def run(self) -> None:
        """Retry until cancelled."""
        while True:
            await asyncio.sleep(self._interval_s)
            for shard in self._shards.unavailable():
                if await shard.connect():
                    log.info("shard %s is available again", shard.id)
                    self._on_connected()
