"""The timer loop against a fake history: FireTimers per owned shard on its
interval, at once again after a full batch, and ready work wakes polls."""

from __future__ import annotations

import asyncio
import time
from itertools import pairwise

from dispatch_helpers import poll, wait_until

from ratchet.internal.history.v1 import history_pb2 as hpb


async def test_fire_timers_is_called_for_every_owned_shard(make_dispatcher, history):
    await make_dispatcher(shard_ids=[0, 2, 5], timer_interval_s=0.05)
    await wait_until(lambda: all(len(history.fake.calls_of("FireTimers", s)) >= 3 for s in (0, 2, 5)),
                     timeout=3, what="three FireTimers calls per shard")
    assert not history.fake.calls_of("FireTimers", 1)
    assert {c.request.max_timers for c in history.fake.calls_of("FireTimers")} == {500}
    times = [c.at for c in history.fake.calls_of("FireTimers", 0)]
    gaps = [b - a for a, b in pairwise(times)]
    assert min(gaps) >= 0.03, "an idle shard is asked about every timer_interval_s, not in a hot loop"


async def test_a_full_batch_fires_again_at_once(make_dispatcher, history):
    full = hpb.FireTimersResponse(fired=500, ready=True)
    idle = hpb.FireTimersResponse(fired=0)
    history.fake.fire_replies[0] = [full, full, idle]
    await make_dispatcher(shard_ids=[0], timer_interval_s=1.0)
    await wait_until(lambda: len(history.fake.calls_of("FireTimers", 0)) >= 3, timeout=3, what="three calls")
    times = [c.at for c in history.fake.calls_of("FireTimers", 0)]
    assert times[2] - times[0] < 0.5, "after a full batch the next call must not wait the interval"


async def test_next_in_shortens_the_sleep(make_dispatcher, history):
    soon = hpb.FireTimersResponse(fired=0)
    soon.next_in.FromMilliseconds(20)
    history.fake.fire_replies[0] = [soon]
    await make_dispatcher(shard_ids=[0], timer_interval_s=1.0)
    await wait_until(lambda: len(history.fake.calls_of("FireTimers", 0)) >= 4, timeout=2, what="calls every ~20 ms")


async def test_a_fired_timer_wakes_a_parked_poll(make_dispatcher, stub_for, history):
    server = await make_dispatcher(shard_ids=[0, 1], tick_s=30.0, timer_interval_s=1.0)
    stub = await stub_for(server)
    task_id = history.fake.add_task(1, delay_s=0.3)
    started = time.monotonic()
    tasks = await asyncio.wait_for(poll(stub, capacity=2, max_wait=5), 5)
    elapsed = time.monotonic() - started
    assert [t.task_id for t in tasks] == [task_id]
    # Due at 0.3 s; next_in makes the loop ask right then, and ready=true wakes the poll.
    assert 0.25 <= elapsed < 0.45, f"leased {elapsed:.3f}s after enqueue"
