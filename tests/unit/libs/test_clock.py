"""sleep_unless: a clock's sleep that an event cuts short."""

from __future__ import annotations

import asyncio

import pytest

from ratchet.libs.clock import FakeClock, sleep_unless


async def test_the_sleep_runs_out_when_nothing_wakes_it():
    clock, wake = FakeClock(), asyncio.Event()
    task = asyncio.ensure_future(sleep_unless(clock, 5.0, wake))
    while not clock._waiters:  # the clock's sleep has started
        await asyncio.sleep(0)
    clock.advance(4.9)
    await asyncio.sleep(0)
    assert not task.done()
    clock.advance(0.2)
    assert await asyncio.wait_for(task, 1) is False


async def test_the_event_cuts_the_sleep_short_and_leaves_no_waiter_behind():
    clock, wake = FakeClock(), asyncio.Event()
    task = asyncio.ensure_future(sleep_unless(clock, 3600.0, wake))
    await asyncio.sleep(0)
    wake.set()
    assert await asyncio.wait_for(task, 1) is True
    await asyncio.sleep(0)
    assert all(fut.cancelled() for _, fut in clock._waiters)  # the clock's sleep was cancelled


async def test_an_error_of_the_clock_is_raised():
    class Broken(FakeClock):
        async def sleep(self, seconds):
            raise asyncio.CancelledError

    with pytest.raises(asyncio.CancelledError):
        await sleep_unless(Broken(), 1.0, asyncio.Event())
