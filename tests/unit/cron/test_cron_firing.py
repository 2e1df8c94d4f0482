"""The pure firing rules: catch-up after downtime, overlap decisions, backoff."""

from __future__ import annotations

import datetime as dt

import pytest

from ratchet.services.cron.cronexpr import parse
from ratchet.services.cron.firing import Decision, decide, needs_previous, plan_due, retry_delay
from ratchet.services.cron.occurrences import UTC

EVERY_10S = parse("*/10 * * * * *")


def t(sec: float) -> dt.datetime:
    return dt.datetime(2024, 1, 1, tzinfo=UTC) + dt.timedelta(seconds=sec)


def test_on_time_slot_fires_and_advances():
    plan = plan_due(EVERY_10S, UTC, t(10), t(10.2), catchup_window_s=0, grace_s=2)
    assert (plan.slot, plan.kind, plan.following, plan.missed) == (t(10), "CRON", t(20), False)


def test_slightly_late_slot_fires_within_grace_even_without_catch_up():
    plan = plan_due(EVERY_10S, UTC, t(10), t(11.5), catchup_window_s=0, grace_s=2)
    assert plan.slot == t(10) and plan.kind == "CRON"


def test_downtime_fires_only_the_most_recent_slot_within_the_window():
    # Down from 5 s to 65 s: slots 10..60 missed; only 60 fires, then 70.
    plan = plan_due(EVERY_10S, UTC, t(10), t(65), catchup_window_s=30, grace_s=2)
    assert (plan.slot, plan.kind, plan.following, plan.missed) == (t(60), "CATCHUP", t(70), True)


def test_downtime_longer_than_the_window_fires_nothing_and_resumes_in_the_future():
    plan = plan_due(EVERY_10S, UTC, t(10), t(68), catchup_window_s=5, grace_s=2)
    assert plan.slot is None and plan.following == t(70) and plan.missed


def test_no_catch_up_window_still_fires_a_missed_slot_within_grace():
    plan = plan_due(EVERY_10S, UTC, t(10), t(61), catchup_window_s=0, grace_s=2)
    assert plan.slot == t(60) and plan.kind == "CATCHUP"


def test_never_replays_every_tick_after_a_long_outage():
    every_second = parse("* * * * * *")
    plan = plan_due(every_second, UTC, t(0), t(86400 * 3 + 0.5), catchup_window_s=3600, grace_s=1)
    assert plan.slot == t(86400 * 3) and plan.following == t(86400 * 3 + 1)


@pytest.mark.parametrize("policy,running,other_buffered,slot_state,expected", [
    ("ALLOW", True, False, "PENDING", Decision("SENDING")),
    ("SKIP", False, False, "PENDING", Decision("SENDING")),
    ("SKIP", True, False, "PENDING", Decision("SKIPPED", "overlap policy skip: previous task T still running")),
    ("CANCEL_PREVIOUS", True, False, "PENDING", Decision("SENDING", cancel_task_id="T")),
    ("CANCEL_PREVIOUS", False, False, "PENDING", Decision("SENDING")),
    ("BUFFER_ONE", True, False, "PENDING", Decision("BUFFERED")),
    ("BUFFER_ONE", True, True, "PENDING",
     Decision("SKIPPED", "overlap policy buffer_one: a slot is already buffered behind task T")),
    ("BUFFER_ONE", True, False, "BUFFERED", Decision("WAIT")),
    ("BUFFER_ONE", False, False, "BUFFERED", Decision("SENDING")),
])
def test_overlap_decisions(policy, running, other_buffered, slot_state, expected):
    assert decide(policy, slot_state, "T", running, other_buffered) == expected


def test_unknown_policy_is_a_bug():
    with pytest.raises(ValueError):
        decide("LATER", "PENDING", "T", True, False)


def test_previous_task_is_read_only_when_the_policy_needs_it():
    assert not needs_previous("ALLOW", "T")
    assert not needs_previous("SKIP", None)
    assert needs_previous("BUFFER_ONE", "T")


def test_retry_delay_doubles_up_to_the_cap():
    assert [retry_delay(n) for n in (1, 2, 3)] == [0.25, 0.5, 1.0]
    assert retry_delay(50) == 10.0
