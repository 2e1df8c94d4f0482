"""A fake clock for the dispatcher's loops: records each sleep, returns at once, and ends the
loop (CancelledError) after `limit` sleeps."""

from __future__ import annotations

import asyncio

from ratchet.libs.clock import FakeClock


class RecordingClock(FakeClock):
    def __init__(self, limit: int = 20):
        super().__init__()
        self.sleeps: list[float] = []
        self._limit = limit

    async def sleep(self, seconds):
        self.sleeps.append(seconds)
        if len(self.sleeps) > self._limit:
            raise asyncio.CancelledError
        await asyncio.sleep(0)
