"""Timers against a fake history: history fires them (the fake's own timer stands in for its
timer loop) and announces the ready work on WatchReady; the dispatcher only wakes the parked
poll it concerns. It never asks history to fire anything."""

from __future__ import annotations

import asyncio
import time

from dispatch_helpers import poll


async def test_a_task_history_s_timer_made_ready_wakes_a_parked_poll(make_dispatcher, stub_for, history):
    server = await make_dispatcher(shard_ids=[0, 1], tick_s=30.0)  # no fallback tick to help
    stub = await stub_for(server)
    task_id = history.fake.add_task(1, delay_s=0.3)
    started = time.monotonic()
    tasks = await asyncio.wait_for(poll(stub, capacity=2, max_wait=5), 5)
    elapsed = time.monotonic() - started
    assert [t.task_id for t in tasks] == [task_id]
    # Due at 0.3 s: the ready event wakes the poll at once.
    assert 0.28 <= elapsed < 0.4, f"leased {elapsed:.3f}s after enqueue"
    assert {c.method for c in history.fake.calls} == {"WatchReady", "LeaseTasks"}


async def test_a_ready_event_while_no_poll_waits_is_not_sent_and_the_next_poll_finds_the_work(
        make_dispatcher, stub_for, history):
    server = await make_dispatcher(shard_ids=[0], tick_s=30.0)
    stub = await stub_for(server)
    history.fake.add_task(0, delay_s=0.05)
    await asyncio.sleep(0.2)  # fired while nobody polled: the stream did not want the event
    assert history.fake.wanted == [False]
    tasks = await asyncio.wait_for(poll(stub, capacity=1, max_wait=2), 3)
    assert len(tasks) == 1
