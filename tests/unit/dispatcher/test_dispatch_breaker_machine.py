"""The circuit-breaker state machine (breakers.py), driven by a fake clock:
threshold, sliding window, cool-down, probe success / crash / timeout, reset."""

from __future__ import annotations

import dataclasses
import datetime as dt

import pytest

from ratchet.services.dispatcher import breakers as m
from ratchet.services.dispatcher.breakers import CLOSED, HALF_OPEN, OPEN, Breaker, BreakerKey, Outcome, Settings

KEY = BreakerKey("tenant-a", "app", "poison")
S = Settings(threshold=5, window_s=60.0, cooldown_s=300.0, probe_timeout_s=60.0)
KILLED = "sandbox process exited with signal 9 (SIGKILL) while running the handler"


class Clock:
    """A fake wall clock for the database's now."""

    def __init__(self):
        self.now = dt.datetime(2026, 1, 1, 12, 0, tzinfo=dt.UTC)

    def advance(self, seconds: float) -> dt.datetime:
        self.now += dt.timedelta(seconds=seconds)
        return self.now


def crash(task: str, epoch: int = 1, message: str = KILLED) -> Outcome:
    return Outcome(KEY, task, epoch, crashed=True, error_class="SandboxCrashed", message=message)


def done(task: str, epoch: int = 1) -> Outcome:
    return Outcome(KEY, task, epoch, crashed=False)


def crashes(b: Breaker, clock: Clock, n: int, every_s: float = 1.0, prefix: str = "t") -> Breaker:
    for i in range(n):
        b = m.observe(b, crash(f"{prefix}{i}"), clock.now, S)
        clock.advance(every_s)
    return b


def opened(clock: Clock) -> Breaker:
    b = crashes(Breaker(KEY), clock, 5)
    assert b.state == OPEN
    return b


def half_open(clock: Clock) -> Breaker:
    b = opened(clock)
    return m.advance(b, clock.advance(S.cooldown_s))


def test_threshold_crashes_in_the_window_open_the_breaker_with_a_reason():
    clock = Clock()
    b = crashes(Breaker(KEY), clock, 4)
    assert b.state == CLOSED and m.crashes_in_window(b, clock.now, S) == 4
    opened_at = clock.now
    b = m.observe(b, crash("t4"), opened_at, S)
    assert b.state == OPEN
    assert b.reason == f"5 sandbox crashes in 60 s; last: SandboxCrashed: {KILLED}"
    assert b.opened_at == opened_at and b.probe_at == opened_at + dt.timedelta(seconds=300)
    assert [c.task_id for c in b.last_crashes] == ["t4", "t3", "t2", "t1", "t0"]


def test_the_window_slides_old_crashes_stop_counting():
    clock = Clock()
    # Four crashes, then 30 s apart: never more than two within 60 s... until they bunch up.
    b = crashes(Breaker(KEY), clock, 6, every_s=31.0)
    assert b.state == CLOSED
    assert m.crashes_in_window(b, clock.now, S) == 1  # only the last is within 60 s of now
    assert len(b.crash_times) <= 2  # pruned on write
    assert m.visible(b, clock.now, S)
    clock.advance(61)
    assert m.crashes_in_window(b, clock.now, S) == 0 and not m.visible(b, clock.now, S)
    # Last crashes are kept for the record even when the window is empty.
    assert len(b.last_crashes) == 6


def test_a_resent_completion_is_counted_once():
    clock = Clock()
    b = Breaker(KEY)
    for _ in range(5):
        b = m.observe(b, crash("same-task", epoch=3), clock.now, S)
    assert b.state == CLOSED and len(b.crash_times) == 1
    b = m.observe(b, crash("same-task", epoch=4), clock.now, S)  # the next attempt is a new crash
    assert len(b.crash_times) == 2


def test_last_crashes_keep_ten_newest_first_and_messages_are_bounded():
    clock = Clock()
    b = Breaker(KEY)
    for i in range(15):
        b = m.observe(b, crash(f"t{i}", message="x" * 5000), clock.now, dataclasses.replace(S, threshold=100))
    assert len(b.last_crashes) == 10 and b.last_crashes[0].task_id == "t14"
    assert len(b.last_crashes[0].message) == m.MAX_MESSAGE_CHARS


def test_cool_down_turns_open_into_half_open_and_not_before():
    clock = Clock()
    b = opened(clock)
    assert m.advance(b, clock.advance(S.cooldown_s - 10)) is b
    assert not m.probe_free(b, clock.now, S)
    b = m.advance(b, clock.advance(10))
    assert b.state == HALF_OPEN and m.probe_free(b, clock.now, S)
    assert b.reason.startswith("5 sandbox crashes")  # why it opened stays visible


def test_crashes_while_open_are_recorded_but_change_nothing_else():
    clock = Clock()
    b = opened(clock)
    later = m.observe(b, crash("late"), clock.advance(5), S)
    assert later.state == OPEN and later.probe_at == b.probe_at and later.last_crashes[0].task_id == "late"


def test_exactly_one_probe_and_its_success_closes_and_clears_the_counts():
    clock = Clock()
    b = half_open(clock)
    claimed = m.claim_probe(b, "dispatcher-1", clock.now, S)
    assert claimed is not None and claimed.probe_owner == "dispatcher-1"
    assert m.claim_probe(claimed, "dispatcher-2", clock.advance(1), S) is None  # one probe at a time
    assert m.probe_leased(claimed, "dispatcher-2", "probe", clock.now) is None  # not its claim
    leased = m.probe_leased(claimed, "dispatcher-1", "probe", clock.advance(1))
    assert leased.probe_task_id == "probe" and leased.probe_leased_at == clock.now
    # Other tasks of the type finishing (leased before the breaker opened) decide nothing.
    assert m.observe(leased, done("someone-else"), clock.now, S) is leased
    assert m.observe(leased, crash("someone-else"), clock.now, S).state == HALF_OPEN
    closed = m.observe(leased, done("probe"), clock.advance(2), S)
    assert closed.state == CLOSED and closed.crash_times == () and closed.reason == ""
    assert closed.opened_at is None and closed.probe_task_id is None and closed.probe_owner is None


def test_a_probe_that_crashes_reopens_with_a_new_cool_down():
    clock = Clock()
    b = m.claim_probe(half_open(clock), "d1", clock.now, S)
    b = m.probe_leased(b, "d1", "probe", clock.advance(1))
    reopened = m.observe(b, crash("probe", epoch=2), clock.advance(3), S)
    assert reopened.state == OPEN and reopened.opened_at == clock.now
    assert reopened.probe_at == clock.now + dt.timedelta(seconds=S.cooldown_s)
    assert reopened.reason.startswith("the probe task probe crashed (SandboxCrashed: sandbox process exited")
    assert reopened.probe_task_id is None and reopened.last_crashes[0].task_id == "probe"
    # The next cool-down leads to a new probe.
    again = m.advance(reopened, clock.advance(S.cooldown_s))
    assert again.state == HALF_OPEN and m.claim_probe(again, "d1", clock.now, S) is not None


def test_a_silent_probe_lets_another_through_after_the_probe_timeout():
    clock = Clock()
    b = m.claim_probe(half_open(clock), "d1", clock.now, S)
    b = m.probe_leased(b, "d1", "lost", clock.advance(10))
    # The timeout counts from the lease, not from the claim.
    assert m.claim_probe(b, "d2", clock.advance(S.probe_timeout_s - 1), S) is None
    second = m.claim_probe(b, "d2", clock.advance(1), S)
    assert second is not None and second.probe_owner == "d2" and second.probe_task_id is None
    # The first probe turning up late is no longer the probe.
    assert m.observe(second, done("lost"), clock.now, S) is second


def test_reset_closes_from_any_state_and_clears_the_counts():
    clock = Clock()
    for b in (opened(clock), half_open(clock), crashes(Breaker(KEY), clock, 3)):
        r = m.reset(b)
        assert r.state == CLOSED and r.crash_times == () and r.probe_at is None and r.reason == ""
        assert not m.visible(r, clock.now, S)
    fresh = Breaker(KEY)
    assert m.reset(fresh) == fresh  # nothing to write


@pytest.mark.parametrize("state", [CLOSED, OPEN])
def test_no_probe_outside_half_open(state):
    clock = Clock()
    b = opened(clock) if state == OPEN else Breaker(KEY)
    assert m.claim_probe(b, "d1", clock.now, S) is None
    assert m.probe_leased(b, "d1", "t", clock.now) is None


def test_crash_json_round_trip():
    c = m.Crash("t", 3, "SandboxCrashed", "boom", dt.datetime(2026, 1, 1, tzinfo=dt.UTC))
    assert m.Crash.from_json(c.to_json()) == c
