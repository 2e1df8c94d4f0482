"""Watch loop: keep one WatchReady stream open to history for the owned
shards; each event wakes the parked polls of that shard. The stream is best
effort (history coalesces and may drop events): the fallback tick covers what
it misses, so a broken stream costs latency, never work. A broken stream is
reopened with jittered exponential backoff."""

from __future__ import annotations

import logging
import random
from typing import Callable, Iterable

from ratchet.libs.clock import Clock
from ratchet.services.dispatcher.errors import DispatcherError
from ratchet.services.dispatcher.history_client import HistoryClient

log = logging.getLogger(__name__)

# The stream has a deadline like every RPC; at its end we simply reopen it.
STREAM_DEADLINE_S = 300.0
BACKOFF_BASE_S = 0.05
BACKOFF_MAX_S = 5.0
# A stream that stayed open this long was fine even if it carried no event.
HEALTHY_STREAM_S = 10.0


class WatchLoop:
    """Turns WatchReady events into wake-ups."""

    def __init__(self, history: HistoryClient, shard_ids: Iterable[int], on_ready: Callable[[int], None],
                 clock: Clock, stream_deadline_s: float = STREAM_DEADLINE_S):
        self._history = history
        self._shards = sorted(shard_ids)
        self._on_ready = on_ready
        self._clock = clock
        self._stream_deadline_s = stream_deadline_s
        self.connects = 0

    async def run(self) -> None:
        """Run until cancelled."""
        failures = 0
        owned = set(self._shards)
        while True:
            self.connects += 1
            events = 0
            opened = self._clock.monotonic()
            try:
                async for shard in self._history.watch_ready(self._shards, timeout=self._stream_deadline_s):
                    events += 1
                    if shard in owned:
                        self._on_ready(shard)
                error = None
            except DispatcherError as err:
                error = err
            healthy = events or self._clock.monotonic() - opened >= HEALTHY_STREAM_S
            failures = 0 if healthy else failures + 1
            if error is not None and failures:
                log.log(logging.WARNING if failures in (1, 10) or failures % 100 == 0 else logging.DEBUG,
                        "WatchReady stream broke (%s); reconnecting (%d failure(s) in a row)", error, failures)
            backoff = min(BACKOFF_MAX_S, BACKOFF_BASE_S * 2 ** failures) if failures else BACKOFF_BASE_S
            await self._clock.sleep(backoff * random.uniform(0.5, 1.0))
