"""Watch loop: keep one WatchReady stream open to history for the owned shards; each event
wakes the parked polls of that shard. History announces every commit that makes work ready
(an enqueue, a fired timer, a bulk retry). The stream is best effort (history coalesces and
may drop events): the fallback tick covers what it misses, so a broken stream costs
latency, never work. A broken stream is reopened with jittered exponential backoff.

Events are wanted only while polls wait (`demand`, from the parking lot), and for HOLD_S
after the last one left, so a worker re-polling at once never flips it. With every worker
busy, or none connected, history sends nothing per commit (the dispatcher spent CPU on
every enqueue for wake-ups nobody acted on; findings.md: ready events on demand). Each flip
to wanted makes history send every shard once, so work that arrived unannounced still wakes
the poll.
"""

from __future__ import annotations

import asyncio
import logging
import random
from collections.abc import AsyncIterator, Callable, Iterable

from ratchet.internal.history.v1 import history_pb2 as hpb
from ratchet.libs.clock import Clock
from ratchet.services.dispatcher.errors import ServiceError
from ratchet.services.dispatcher.history_client import HistoryClient

log = logging.getLogger(__name__)

# The stream has a deadline like every RPC; at its end we simply reopen it.
STREAM_DEADLINE_S = 300.0
BACKOFF_BASE_S = 0.05
BACKOFF_MAX_S = 5.0
# A stream that stayed open this long was fine even if it carried no event.
HEALTHY_STREAM_S = 10.0
# Events stay wanted this long after the last parked poll left.
HOLD_S = 2.0


class WatchLoop:
    """Turns ready events into wake-ups."""

    def __init__(self, history: HistoryClient, shard_ids: Iterable[int], on_ready: Callable[[int], None],
                 clock: Clock, stream_deadline_s: float = STREAM_DEADLINE_S, hold_s: float = HOLD_S):
        self._history = history
        self._shards = sorted(shard_ids)
        self._on_ready = on_ready
        self._clock = clock
        self._stream_deadline_s = stream_deadline_s
        self._hold_s = hold_s
        self.connects = 0
        self._demand = False
        self._idle_since = -float("inf")
        self._changed = asyncio.Event()
        self.wanted_sent: list[bool] = []  # what this loop told history, in order (tests)
        # An event arrived on the open stream: history is reachable and publishing to us
        # (the fallback tick slows down). Cleared when the stream ends, for any reason.
        self.live = False

    def demand(self, waiting: bool) -> None:
        """The parking lot's signal: polls are waiting (True) or the last one left (False)."""
        self._demand = waiting
        if not waiting:
            self._idle_since = self._clock.monotonic()
        self._changed.set()

    def _wanted(self) -> bool:
        return self._demand or self._clock.monotonic() - self._idle_since < self._hold_s

    async def _requests(self) -> AsyncIterator[hpb.WatchReadyRequest]:
        sent = self._wanted()
        self.wanted_sent.append(sent)
        yield hpb.WatchReadyRequest(shard_ids=self._shards, wanted=sent)
        while True:
            self._changed.clear()
            want = self._wanted()
            if want != sent:
                sent = want
                self.wanted_sent.append(sent)
                yield hpb.WatchReadyRequest(wanted=sent)
                continue
            # Wanted but idle: look again when the hold runs out.
            left = self._idle_since + self._hold_s - self._clock.monotonic() if sent and not self._demand else None
            try:
                await asyncio.wait_for(self._changed.wait(), None if left is None else max(0.01, left))
            except TimeoutError:
                pass

    async def run(self) -> None:
        """Run until cancelled."""
        failures = 0
        owned = set(self._shards)
        while True:
            self.connects += 1
            events = 0
            opened = self._clock.monotonic()
            error = None
            try:
                async for shard in self._history.watch_ready(self._requests(), self._shards,
                                                             timeout=self._stream_deadline_s):
                    events += 1
                    self.live = True
                    if shard in owned:
                        self._on_ready(shard)
            except ServiceError as err:
                error = err
            finally:
                self.live = False  # the stream is over, however it ended
            healthy = events or self._clock.monotonic() - opened >= HEALTHY_STREAM_S
            failures = 0 if healthy else failures + 1
            if error is not None and failures:
                log.log(logging.WARNING if failures in (1, 10) or failures % 100 == 0 else logging.DEBUG,
                        "WatchReady stream broke (%s); reconnecting (%d failure(s) in a row)", error, failures)
            backoff = min(BACKOFF_MAX_S, BACKOFF_BASE_S * 2 ** failures) if failures else BACKOFF_BASE_S
            await self._clock.sleep(backoff * random.uniform(0.5, 1.0))
