"""The fallback tick's pace: every 250 ms, every second while the ready-event stream is live
(events announce ready work then), and the watch loop's view of that stream."""

from __future__ import annotations

import asyncio

import pytest
from dispatch_clock import RecordingClock

from ratchet.libs.clock import SystemClock
from ratchet.services.dispatcher.errors import ShardUnavailable
from ratchet.services.dispatcher.loops.tick import FallbackTick
from ratchet.services.dispatcher.loops.watch import WatchLoop


async def test_the_tick_slows_down_while_the_stream_is_live_and_never_beats_its_base_pace():
    live = [False]
    clock, ticks = RecordingClock(limit=5), []
    tick = FallbackTick([1, 0], ticks.append, clock, tick_s=0.25, live_tick_s=1.0, live=lambda: live[0])
    assert tick.interval() == 0.25
    live[0] = True
    assert tick.interval() == 1.0
    slow_base = FallbackTick([0], ticks.append, clock, tick_s=30.0, live_tick_s=1.0, live=lambda: True)
    assert slow_base.interval() == 30.0  # (tests that turn the tick off with a long base)

    live[0] = False
    task = asyncio.ensure_future(tick.run())
    for _ in range(30):
        await asyncio.sleep(0)
        if len(clock.sleeps) == 3:
            live[0] = True
    with pytest.raises(asyncio.CancelledError):
        await asyncio.wait_for(task, 1)
    assert clock.sleeps[:5] == [0.25, 0.25, 0.25, 1.0, 1.0]
    assert ticks[0] == [0, 1]


class _History:
    """watch_ready from a script: shard ids to yield, then an error or the end."""

    def __init__(self, streams):
        self.streams = list(streams)
        self.opened = 0

    async def watch_ready(self, requests, shard_ids, timeout):
        self.opened += 1
        events, end = self.streams.pop(0) if self.streams else ([], asyncio.CancelledError())
        for shard in events:
            await asyncio.sleep(0)
            yield shard
        await asyncio.sleep(0)
        if end is not None:
            raise end


async def test_the_watch_is_live_from_an_event_until_its_stream_ends():
    seen: list[tuple[int, bool]] = []
    loop: WatchLoop

    def on_ready(shard: int) -> None:
        seen.append((shard, loop.live))

    history = _History([([0, 1], ShardUnavailable(0, "history went away")),
                        ([], ShardUnavailable(0, "still away")),
                        ([1], None)])
    loop = WatchLoop(history, [0, 1], on_ready, SystemClock())
    assert not loop.live
    with pytest.raises(asyncio.CancelledError):
        await asyncio.wait_for(loop.run(), 5)
    assert seen == [(0, True), (1, True), (1, True)]
    assert not loop.live and history.opened == 4
