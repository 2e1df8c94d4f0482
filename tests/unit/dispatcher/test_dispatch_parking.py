"""The parking lot: FIFO per poll class, head-only wake-ups, batons (pure asyncio)."""

from __future__ import annotations

import asyncio

from ratchet.services.dispatcher.parking import ParkingLot

ANY = frozenset()


async def test_a_signal_wakes_only_the_head_of_each_class():
    lot = ParkingLot()
    a, b = lot.park(ANY), lot.park(ANY)
    c = lot.park(frozenset({"billing"}))
    lot.signal({1})
    assert await a.wait(1) == {1}
    assert await c.wait(1) == {1}
    assert await b.wait(0.01) is None


async def test_signals_are_accumulated_and_consumed():
    lot = ParkingLot()
    a = lot.park(ANY)
    lot.signal({1})
    lot.signal({2, 3})
    assert await a.wait(1) == {1, 2, 3}
    assert await a.wait(0.01) is None


async def test_a_signal_with_nobody_parked_is_dropped():
    lot = ParkingLot()
    lot.signal({1})
    a = lot.park(ANY)
    assert await a.wait(0.01) is None


async def test_leaving_passes_the_baton_to_the_next_in_line():
    lot = ParkingLot()
    a, b, c = lot.park(ANY), lot.park(ANY), lot.park(ANY)
    lot.signal({0})
    assert await a.wait(1) == {0}
    lot.leave(a, pass_on={0})  # a leased and shard 0 said "more"
    assert await b.wait(1) == {0}
    assert await c.wait(0.01) is None
    lot.leave(b)  # b found nothing: no baton
    assert await c.wait(0.01) is None
    assert lot.parked() == 1


async def test_a_head_leaving_hands_on_signals_it_did_not_act_on():
    lot = ParkingLot()
    a, b = lot.park(ANY), lot.park(ANY)
    lot.signal({4})  # a timed out at the same moment and never read it
    lot.leave(a)
    assert await b.wait(1) == {4}


async def test_a_waiter_in_the_middle_can_leave():
    lot = ParkingLot()
    a, b, c = lot.park(ANY), lot.park(ANY), lot.park(ANY)
    lot.leave(b)
    assert lot.parked(ANY) == 2
    assert a.is_head and not c.is_head
    lot.leave(a)
    assert c.is_head
    lot.leave(c)
    lot.leave(c)  # leaving twice is harmless
    assert lot.parked() == 0


async def test_fifo_order_holds_over_a_sequence_of_signals():
    lot = ParkingLot()
    waiters = [lot.park(ANY) for _ in range(5)]
    served = []
    for _ in range(5):
        lot.signal({0})
        head = next(w for w in waiters if w.is_head)
        assert await head.wait(1) == {0}
        served.append(waiters.index(head))
        lot.leave(head)
    assert served == [0, 1, 2, 3, 4]


async def test_close_releases_every_waiter_empty():
    lot = ParkingLot()
    a, b = lot.park(ANY), lot.park(frozenset({"x"}))
    waits = asyncio.gather(a.wait(10), b.wait(10))
    await asyncio.sleep(0)
    lot.close()
    assert await asyncio.wait_for(waits, 1) == [None, None]


async def test_a_head_stuck_in_a_round_is_passed_over():
    from ratchet.libs.clock import FakeClock
    from ratchet.services.dispatcher.parking import STUCK_S
    clock = FakeClock()
    lot = ParkingLot(clock)
    a, b = lot.park(ANY), lot.park(ANY)
    a.busy_since = clock.monotonic()
    lot.signal({1})
    assert a.signalled == {1} and not b.signalled  # a short round still gets the signal
    clock.advance(STUCK_S + 0.01)
    assert b.is_head
    lot.signal({2})
    assert await b.wait(1) == {2}
    assert a.signalled == {1}
