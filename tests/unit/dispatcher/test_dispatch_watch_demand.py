"""Ready events on demand: the parking lot says when polls wait, the watch loop tells history,
with a hold so a worker re-polling at once never flips it."""

from __future__ import annotations

import asyncio
import time

from ratchet.libs.clock import SystemClock
from ratchet.services.dispatcher.loops.watch import WatchLoop
from ratchet.services.dispatcher.parking import ParkingLot


def test_the_lot_reports_the_first_poll_parking_and_the_last_one_leaving():
    seen: list[bool] = []
    lot = ParkingLot(on_demand=seen.append)
    a = lot.park(frozenset())
    b = lot.park(frozenset({"app"}))
    assert seen == [True]
    lot.leave(a)
    assert seen == [True]
    lot.leave(b)
    lot.leave(b)  # twice: no second report
    assert seen == [True, False]
    lot.park(frozenset())
    assert seen == [True, False, True]


async def test_wanted_follows_demand_and_is_held_after_the_last_poll_leaves():
    loop = WatchLoop(history=None, shard_ids=[0, 1], on_ready=lambda _s: None, clock=SystemClock(), hold_s=0.3)
    requests = loop._requests()
    first = await asyncio.wait_for(anext(requests), 1)
    assert list(first.shard_ids) == [0, 1] and not first.wanted

    loop.demand(True)
    assert (await asyncio.wait_for(anext(requests), 1)).wanted

    # The last poll leaves and another parks within the hold: nothing is sent.
    loop.demand(False)
    nxt = asyncio.ensure_future(anext(requests))
    await asyncio.sleep(0.1)
    loop.demand(True)
    await asyncio.sleep(0.4)
    assert not nxt.done(), "a re-poll within the hold flipped wanted"

    # It leaves for good: wanted goes false once the hold has passed, not before.
    t0 = time.monotonic()
    loop.demand(False)
    msg = await asyncio.wait_for(nxt, 2)
    assert not msg.wanted and time.monotonic() - t0 >= 0.25
    assert loop.wanted_sent == [False, True, False]
    await requests.aclose()
