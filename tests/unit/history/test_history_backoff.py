"""Retry backoff math and policy resolution (no I/O)."""

from __future__ import annotations

import random

import pytest
from google.protobuf import duration_pb2

from ratchet.api.tasks.v1 import tasks_pb2
from ratchet.services.history.errors import InvalidArgument
from ratchet.services.history.policy import (
    Retry,
    Timeouts,
    backoff_ceiling,
    backoff_delay,
    retry_from_proto,
    retry_to_proto,
    timeouts_from_proto,
    timeouts_to_proto,
)


def test_ceiling_grows_by_factor_from_base_and_stops_at_cap():
    p = Retry(base_s=1.0, factor=2.0, cap_s=3600.0)
    assert [backoff_ceiling(p, a) for a in range(1, 6)] == [1.0, 2.0, 4.0, 8.0, 16.0]
    assert backoff_ceiling(p, 12) == 2048.0
    assert backoff_ceiling(p, 13) == 3600.0
    assert backoff_ceiling(p, 100) == 3600.0


def test_ceiling_survives_huge_exponents():
    p = Retry(base_s=1.0, factor=10.0, cap_s=60.0)
    assert backoff_ceiling(p, 10_000) == 60.0


def test_full_jitter_is_uniform_between_zero_and_the_ceiling():
    p = Retry(base_s=1.0, factor=2.0, cap_s=3600.0, jitter=True)
    rng = random.Random(7)
    delays = [backoff_delay(p, 4, rng.random) for _ in range(2000)]
    assert all(0.0 <= d <= 8.0 for d in delays)
    assert min(delays) < 0.5 and max(delays) > 7.5  # spread over the whole range, not clustered
    assert 3.5 < sum(delays) / len(delays) < 4.5
    assert backoff_delay(p, 4, lambda: 0.0) == 0.0
    assert backoff_delay(p, 4, lambda: 1.0) == 8.0


def test_without_jitter_the_delay_is_the_ceiling():
    p = Retry(base_s=0.5, factor=3.0, cap_s=10.0, jitter=False)
    assert [backoff_delay(p, a) for a in (1, 2, 3, 4)] == [0.5, 1.5, 4.5, 10.0]


def test_defaults_are_the_platform_defaults():
    r = retry_from_proto(tasks_pb2.RetryPolicy())
    assert r == Retry(max_attempts=5, base_s=1.0, factor=2.0, cap_s=3600.0, jitter=True)
    t = timeouts_from_proto(tasks_pb2.Timeouts())
    assert t == Timeouts(schedule_to_start_s=None, start_to_close_s=600.0, schedule_to_close_s=None)


def test_policy_round_trips_through_proto_and_json():
    r = Retry(max_attempts=3, base_s=0.25, factor=1.5, cap_s=30.0, jitter=False)
    assert retry_from_proto(retry_to_proto(r)) == r
    assert Retry.from_json(r.to_json()) == r
    t = Timeouts(schedule_to_start_s=5.0, start_to_close_s=2.5, schedule_to_close_s=60.0)
    assert timeouts_from_proto(timeouts_to_proto(t)) == t
    assert Timeouts.from_json(t.to_json()) == t


@pytest.mark.parametrize("policy, needle", [
    (tasks_pb2.RetryPolicy(max_attempts=0), "max_attempts"),
    (tasks_pb2.RetryPolicy(max_attempts=101), "max_attempts"),
    (tasks_pb2.RetryPolicy(factor=0.5), "factor"),
    (tasks_pb2.RetryPolicy(base=duration_pb2.Duration(seconds=-1)), "base"),
])
def test_bad_policies_say_which_field(policy, needle):
    with pytest.raises(InvalidArgument, match=needle):
        retry_from_proto(policy)


def test_non_positive_timeouts_are_refused():
    with pytest.raises(InvalidArgument, match="start_to_close"):
        timeouts_from_proto(tasks_pb2.Timeouts(start_to_close=duration_pb2.Duration()))


def test_unset_schedule_timeouts_are_left_out_of_the_stored_form():
    t = Timeouts(schedule_to_start_s=None, start_to_close_s=600.0, schedule_to_close_s=None)
    assert t.to_json() == {}  # 600 s is the stored base (see the test below)
    assert Timeouts.from_json(t.to_json()) == t
    unlimited = Timeouts(schedule_to_start_s=None, start_to_close_s=None, schedule_to_close_s=None)
    assert unlimited.to_json() == {"start_to_close_s": None}  # its default is not None: stored as null
    assert Timeouts.from_json(unlimited.to_json()) == unlimited
    old_form = {"start_to_close_s": 5.0, "schedule_to_start_s": None, "schedule_to_close_s": None}
    assert Timeouts.from_json(old_form) == Timeouts(None, 5.0, None)


def test_the_stored_policy_keeps_only_what_differs_from_the_stored_base():
    """A default policy is stored as {}; absent fields mean STORED_RETRY_BASE, which is
    part of the stored format (pinned here: changing it would change every stored row's meaning)."""
    from ratchet.services.history.policy import STORED_RETRY_BASE
    assert STORED_RETRY_BASE == {"max_attempts": 5, "base_s": 1.0, "factor": 2.0, "cap_s": 3600.0, "jitter": True}
    assert Retry().to_json() == {}
    assert Retry.from_json({}) == Retry(max_attempts=5, base_s=1.0, factor=2.0, cap_s=3600.0, jitter=True)
    assert Retry(max_attempts=3, jitter=False).to_json() == {"max_attempts": 3, "jitter": False}
    full = {"cap_s": 3600.0, "base_s": 1.0, "factor": 2.0, "jitter": True, "max_attempts": 5}  # the older, full form
    assert Retry.from_json(full) == Retry.from_json({})
    for r in (Retry(base_s=0.0), Retry(factor=1.0, cap_s=0.0), Retry(max_attempts=1, jitter=False)):
        assert Retry.from_json(r.to_json()) == r


def test_the_stored_timeouts_leave_out_the_default_start_to_close():
    """Default timeouts are stored as {}; an unlimited start_to_close stays an explicit
    null, so absent (600 s, pinned: the lease statement reads the same value) and unlimited differ."""
    from ratchet.services.history.policy import STORED_START_TO_CLOSE_S
    assert STORED_START_TO_CLOSE_S == 600.0
    assert Timeouts().to_json() == {}
    assert Timeouts.from_json({}) == Timeouts(start_to_close_s=600.0)
    assert Timeouts(start_to_close_s=None).to_json() == {"start_to_close_s": None}
    assert Timeouts.from_json({"start_to_close_s": None}).start_to_close_s is None
    old = {"schedule_to_start_s": None, "start_to_close_s": 600.0, "schedule_to_close_s": None}  # the older, full form
    assert Timeouts.from_json(old) == Timeouts()
    for t in (Timeouts(start_to_close_s=None, schedule_to_close_s=5.0), Timeouts(start_to_close_s=30.0)):
        assert Timeouts.from_json(t.to_json()) == t
