"""Injected clocks. Lease, timer and deadline decisions never use these: they
use the shard database's clock. These serve client-side waits and backoff."""

from __future__ import annotations

import asyncio
import time
from typing import Protocol


class Clock(Protocol):
    def monotonic(self) -> float: ...
    def wall(self) -> float: ...
    async def sleep(self, seconds: float) -> None: ...


class SystemClock:
    """The real clock."""

    def monotonic(self) -> float:
        return time.monotonic()

    def wall(self) -> float:
        return time.time()

    async def sleep(self, seconds: float) -> None:
        await asyncio.sleep(seconds)


class FakeClock:
    """A clock tests move by hand; sleep returns once advance() passes it."""

    def __init__(self, start: float = 1_000_000.0):
        self._now = start
        self._waiters: list[tuple[float, asyncio.Future]] = []

    def monotonic(self) -> float:
        return self._now

    def wall(self) -> float:
        return self._now

    async def sleep(self, seconds: float) -> None:
        fut = asyncio.get_running_loop().create_future()
        self._waiters.append((self._now + seconds, fut))
        await fut

    def advance(self, seconds: float) -> None:
        self._now += seconds
        due = [w for w in self._waiters if w[0] <= self._now]
        self._waiters = [w for w in self._waiters if w[0] > self._now]
        for _, fut in due:
            if not fut.done():
                fut.set_result(None)


async def sleep_unless(clock: Clock, seconds: float, wake: asyncio.Event) -> bool:
    """Sleep `seconds` on `clock` unless `wake` is set first; True if it was (the sleep is
    cut short), False once the sleep ran out. An error of the clock's sleep is raised."""
    sleeper = asyncio.ensure_future(clock.sleep(seconds))
    waker = asyncio.ensure_future(wake.wait())
    try:
        done, _ = await asyncio.wait((sleeper, waker), return_when=asyncio.FIRST_COMPLETED)
    finally:
        sleeper.cancel()
        waker.cancel()
    if sleeper in done:
        sleeper.result()
        return False
    return True
