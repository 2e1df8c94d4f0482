"""The batch loops every system's batch cell runs (loadgen.batches_fn): by count, or by time
with the count as a cap."""

import asyncio
import time

from loadtest import loadgen


def _sender(delay_s: float, sent: list):
    async def send_batch(first: int, size: int) -> None:
        sent.append((first, size))
        await asyncio.sleep(delay_s)
    return send_batch


def test_by_count_sends_every_task_once_in_calls_of_batch() -> None:
    sent: list = []
    res = asyncio.run(loadgen.batches_fn(_sender(0.0, sent), 100, 3, 1_050))
    assert res.acked == 1_050 and res.calls == 11 and not res.errors
    assert sorted(sent) == [(i * 100, 100) for i in range(10)] + [(1_000, 50)]


def test_by_time_stops_starting_calls_after_the_seconds() -> None:
    sent: list = []
    t0 = time.monotonic()
    res = asyncio.run(loadgen.batches_fn(_sender(0.02, sent), 10, 2, 10_000_000, seconds=0.3))
    took = time.monotonic() - t0
    # ~15 rounds of 2 calls in 0.3 s: far below the cap, and no call started after the window
    # (the last one started before it ends and takes 0.02 s).
    assert 0.29 <= took < 0.6, took
    assert 10 <= res.calls <= 40 and res.acked == 10 * res.calls
    assert 0.29 <= res.wall_s <= took and res.rate > 0
    assert sorted(f for f, _ in sent) == [i * 10 for i in range(res.calls)]  # consecutive task numbers


def test_by_time_the_count_is_a_cap() -> None:
    sent: list = []
    res = asyncio.run(loadgen.batches_fn(_sender(0.0, sent), 100, 2, 500, seconds=30.0))
    assert res.acked == 500 and res.calls == 5
