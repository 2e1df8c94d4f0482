"""libs/batching: alone when idle, together while a flush is in flight, each caller its own
outcome, bounded flushes, and callers that give up."""

from __future__ import annotations

import asyncio
import gc

import pytest

from ratchet.libs.batching import Batcher, MismatchedOutcomes


class Flusher:
    """A flush the test holds open: each call waits for release() (when gated) and answers each
    item with item * 10, or the exception an item is."""

    def __init__(self, gated: bool = True):
        self.calls: list[tuple[object, list]] = []
        self.gated = gated
        self.gate = asyncio.Event()
        self.started = asyncio.Event()

    async def __call__(self, key, items):
        self.calls.append((key, list(items)))
        self.started.set()
        if self.gated:
            await self.gate.wait()
        return [i if isinstance(i, BaseException) else i * 10 for i in items]

    def release(self) -> None:
        self.gate.set()


async def _until(cond, limit: float = 2.0) -> None:
    loop = asyncio.get_running_loop()
    end = loop.time() + limit
    while not cond():
        assert loop.time() < end, "condition not reached"
        await asyncio.sleep(0)


async def test_alone_when_idle_and_together_while_a_flush_is_in_flight():
    f = Flusher()
    b = Batcher(f)
    first = asyncio.ensure_future(b.submit("s", 1))
    await f.started.wait()
    rest = [asyncio.ensure_future(b.submit("s", i)) for i in (2, 3, 4)]
    await asyncio.sleep(0)
    assert [items for _, items in f.calls] == [[1]]
    f.release()
    assert await first == 10
    assert await asyncio.gather(*rest) == [20, 30, 40]
    assert [items for _, items in f.calls] == [[1], [2, 3, 4]] and b.flushes == 2


async def test_keys_are_independent_lanes():
    f = Flusher()
    b = Batcher(f)
    a = asyncio.ensure_future(b.submit("a", 1))
    c = asyncio.ensure_future(b.submit("b", 2))
    await _until(lambda: len(f.calls) == 2)  # the second key did not wait for the first's flush
    f.release()
    assert (await a, await c) == (10, 20)
    assert sorted(k for k, _ in f.calls) == ["a", "b"]


async def test_each_caller_gets_its_own_error_and_a_raising_flush_fails_its_items():
    f = Flusher()
    b = Batcher(f)
    first = asyncio.ensure_future(b.submit("s", 1))
    await f.started.wait()
    mine = ValueError("mine")
    bad, good = asyncio.ensure_future(b.submit("s", mine)), asyncio.ensure_future(b.submit("s", 5))
    f.release()
    await first
    with pytest.raises(ValueError, match="mine"):
        await bad
    assert await good == 50

    async def broken(key, items):
        raise RuntimeError("down")
    b2 = Batcher(broken)
    with pytest.raises(RuntimeError, match="down"):
        await b2.submit("s", 1)  # (inline: raised to its caller)


async def test_a_queued_flush_that_raises_fails_every_item_it_carried():
    gate = asyncio.Event()
    calls = []

    async def flush(key, items):
        calls.append(list(items))
        if len(calls) == 1:
            await gate.wait()
            return list(items)
        raise RuntimeError("the call failed")
    b = Batcher(flush)
    first = asyncio.ensure_future(b.submit("s", 1))
    await _until(lambda: calls)
    rest = [asyncio.ensure_future(b.submit("s", i)) for i in (2, 3)]
    gate.set()
    assert await first == 1
    for r in rest:
        with pytest.raises(RuntimeError, match="the call failed"):
            await r


async def test_a_flush_carries_at_most_max_items_and_about_max_size():
    f = Flusher()
    b = Batcher(f, max_items=2)
    first = asyncio.ensure_future(b.submit("s", 0))
    await f.started.wait()
    rest = [asyncio.ensure_future(b.submit("s", i)) for i in range(1, 6)]
    f.release()
    await asyncio.gather(first, *rest)
    assert [items for _, items in f.calls] == [[0], [1, 2], [3, 4], [5]]

    f = Flusher()
    b = Batcher(f, size=lambda i: i, max_size=10)
    first = asyncio.ensure_future(b.submit("s", 1))
    await f.started.wait()
    rest = [asyncio.ensure_future(b.submit("s", i)) for i in (4, 5, 2, 30, 1)]
    f.release()
    await asyncio.gather(first, *rest)
    # 4+5 fit, 2 would pass 10; 2 then 30 would: 30 goes alone; 1 after it.
    assert [items for _, items in f.calls] == [[1], [4, 5], [2], [30], [1]]


async def test_distinct_holds_an_item_back_for_the_next_flush_in_order():
    f = Flusher()
    b = Batcher(f, distinct=lambda item: [item % 10])
    first = asyncio.ensure_future(b.submit("s", 1))
    await f.started.wait()
    rest = [asyncio.ensure_future(b.submit("s", i)) for i in (2, 12, 3, 22, 13)]
    f.release()
    await asyncio.gather(first, *rest)
    assert [items for _, items in f.calls] == [[1], [2, 3], [12, 13], [22]]


async def test_a_caller_that_gives_up_before_its_item_went_out_is_never_sent():
    f = Flusher()
    b = Batcher(f)
    first = asyncio.ensure_future(b.submit("s", 1))
    await f.started.wait()
    gone, stays = asyncio.ensure_future(b.submit("s", 2)), asyncio.ensure_future(b.submit("s", 3))
    await asyncio.sleep(0)
    gone.cancel()
    f.release()
    assert await first == 10 and await stays == 30
    with pytest.raises(asyncio.CancelledError):
        await gone
    assert [items for _, items in f.calls] == [[1], [3]]


async def test_a_caller_that_gives_up_in_flight_leaves_the_flush_to_the_others(recwarn):
    f = Flusher()
    b = Batcher(f)
    first = asyncio.ensure_future(b.submit("s", 1))
    await f.started.wait()
    f.started.clear()
    mine, other = asyncio.ensure_future(b.submit("s", ValueError("x"))), asyncio.ensure_future(b.submit("s", 4))
    f.release()
    await first
    await f.started.wait()  # the queued two are in flight now
    mine.cancel()
    assert await other == 40
    with pytest.raises(asyncio.CancelledError):
        await mine
    await b.close()
    gc.collect()
    assert not [w for w in recwarn.list if "never retrieved" in str(w.message)]


async def test_max_in_flight_and_batching_off():
    f = Flusher()
    b = Batcher(f, max_in_flight=2)
    a, c = asyncio.ensure_future(b.submit("s", 1)), asyncio.ensure_future(b.submit("s", 2))
    await _until(lambda: len(f.calls) == 2)  # two flushes of one key at once
    d, e = asyncio.ensure_future(b.submit("s", 3)), asyncio.ensure_future(b.submit("s", 4))
    f.release()
    assert await asyncio.gather(a, c, d, e) == [10, 20, 30, 40]
    assert [items for _, items in f.calls] == [[1], [2], [3, 4]]

    f = Flusher(gated=False)
    off = Batcher(f, max_in_flight=None)
    assert await asyncio.gather(*(off.submit("s", i) for i in range(4))) == [0, 10, 20, 30]
    assert [items for _, items in f.calls] == [[0], [1], [2], [3]]
    with pytest.raises(ValueError):
        Batcher(f, max_in_flight=0)


async def test_a_wrong_number_of_outcomes_fails_the_items():
    async def short(key, items):
        return items[:-1]
    b = Batcher(short)
    with pytest.raises(MismatchedOutcomes):
        await b.submit("s", 1)


async def test_a_cancelled_flush_cancels_its_callers_and_close_waits_for_flushes():
    started = asyncio.Event()
    calls = []

    async def flush(key, items):
        calls.append(list(items))
        started.set()
        await asyncio.sleep(3600)
        return items
    b = Batcher(flush)
    first = asyncio.ensure_future(b.submit("s", 1))
    await started.wait()
    queued = asyncio.ensure_future(b.submit("s", 2))
    first.cancel()  # the inline flush ends with its caller; the queued item goes out next
    with pytest.raises(asyncio.CancelledError):
        await first
    await _until(lambda: len(calls) == 2)
    for task in list(b._running):
        task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await queued
    await b.close()
    assert not b._running and not b._lanes
