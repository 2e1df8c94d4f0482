"""ctx.checkpoint(), the schedule fields of ctx, and retry rules per error
class: validation at decoration time and what describe prints."""

from __future__ import annotations

import datetime as dt

import pytest

from ratchet import testing
from ratchet.errors import CheckpointNotSerializable, CheckpointTooLarge, TaskDefinitionError
from ratchet.retry import RetryPolicy
from ratchet.task import spec_of, task


@task
def backfill(ctx, payload):
    offset = (ctx.last_checkpoint or {}).get("offset", 0)
    while offset < payload["to"]:
        offset += 100
        ctx.checkpoint({"offset": offset})
    return offset


def test_testing_runs_from_a_checkpoint_and_returns_those_taken():
    outcome = testing.run_attempt(backfill, {"to": 800}, last_checkpoint={"offset": 500})
    assert outcome.checkpoints == [{"offset": 600}, {"offset": 700}, {"offset": 800}]
    assert outcome.outcome == "succeeded" and outcome.result == "800"
    assert testing.run(backfill, {"to": 100}) == 100


def test_scheduled_time_is_an_aware_utc_datetime():
    @task
    def when(ctx, payload):
        return [ctx.scheduled_time.isoformat(), ctx.schedule_id, ctx.last_checkpoint]

    assert testing.run(when, scheduled_time="2026-03-29T01:30:00") == [
        "2026-03-29T01:30:00+00:00", "test-schedule", None]
    paris = dt.datetime(2026, 3, 29, 3, 30, tzinfo=dt.timezone(dt.timedelta(hours=2)))
    ctx = testing.FakeContext(scheduled_time=paris, schedule_id="s-1")
    assert testing.run(when, ctx=ctx)[:2] == ["2026-03-29T01:30:00+00:00", "s-1"]
    assert testing.FakeContext().scheduled_time is None and testing.FakeContext().schedule_id is None


def test_last_checkpoint_follows_this_attempts_checkpoints_and_is_a_copy():
    ctx = testing.FakeContext(last_checkpoint={"ids": [1]})
    value = {"ids": [1, 2]}
    ctx.checkpoint(value)
    value["ids"].append(3)
    assert ctx.last_checkpoint == {"ids": [1, 2]} and ctx.checkpoints == [{"ids": [1, 2]}]


@pytest.mark.parametrize("value, error, fragment", [
    ({1, 2}, CheckpointNotSerializable, "needs a JSON value"),
    (float("nan"), CheckpointNotSerializable, "needs a JSON value"),
    ("x" * (64 * 1024), CheckpointTooLarge, "over the 65536-byte limit"),
])
def test_bad_checkpoints_raise_a_clear_fatal_error(value, error, fragment):
    ctx = testing.FakeContext()
    with pytest.raises(error, match=fragment):
        ctx.checkpoint(value)
    assert ctx.checkpoints == []

    @task
    def handler(c, payload):
        c.checkpoint(value)

    outcome = testing.run_attempt(handler)
    assert outcome.fatal and outcome.error["error_class"] == error.__name__


def test_a_checkpoint_after_the_attempt_ended_is_refused():
    ctx = testing.FakeContext()
    ctx._end()
    with pytest.raises(RuntimeError, match="after attempt 1"):
        ctx.checkpoint(1)


def test_rules_describe_only_what_they_set():
    class Throttled(Exception):
        pass

    policy = RetryPolicy(max_attempts=3, cap="10m", non_retryable=["KeyError"],
                         rules={Throttled: RetryPolicy(base="30s", backoff="fixed"),
                                "TimeoutError": RetryPolicy(max_attempts=10, base="5s"), "ValueError": "FATAL"})
    d = policy.describe()
    assert d["non_retryable"] == ["KeyError"]
    assert d["rules"] == {
        "Throttled": {"non_retryable": False, "max_attempts": None, "base_s": 30.0, "factor": 1.0, "cap_s": None,
                      "jitter": None},
        "TimeoutError": {"non_retryable": False, "max_attempts": 10, "base_s": 5.0, "factor": None, "cap_s": None,
                         "jitter": None},
        "ValueError": {"non_retryable": True, "max_attempts": None, "base_s": None, "factor": None, "cap_s": None,
                       "jitter": None}}
    merged = policy.for_error("TimeoutError")
    assert (merged.max_attempts, merged.base_s, merged.cap_s, merged.factor) == (10, 5.0, 600.0, 2.0)
    assert policy.for_error("Throttled").delay_s(4) == pytest.approx(policy.for_error("Throttled").base_s, abs=30)
    assert policy.for_error("OSError") is policy


def test_fatal_rules_and_non_retryable_cover_subclasses_policy_rules_do_not():
    policy = RetryPolicy(non_retryable=[LookupError], rules={"ValueError": "fatal", "OSError": RetryPolicy()})
    assert policy.is_non_retryable(KeyError()) and policy.is_non_retryable(UnicodeError())
    assert not policy.is_non_retryable(OSError()) and not policy.is_non_retryable(TimeoutError())

    @task(retries=policy)
    def handler(ctx, payload):
        raise UnicodeDecodeError("utf-8", b"", 0, 1, "bad")

    outcome = testing.run_attempt(handler)
    assert outcome.fatal and outcome.error["error_class"] == "UnicodeDecodeError"


@pytest.mark.parametrize("kwargs, fragment", [
    (dict(rules={"ValueError": "retry"}), "must be a RetryPolicy or 'fatal'"),
    (dict(rules={"ValueError": {"max_attempts": 3}}), "must be a RetryPolicy or 'fatal'"),
    (dict(rules={"bad name!": "fatal"}), "neither an exception class nor a class name"),
    (dict(rules={42: "fatal"}), "neither an exception class nor a class name"),
    (dict(rules=["ValueError"]), "rules must be a dict"),
    (dict(rules={"KeyError": "fatal"}, non_retryable=["KeyError"]), "also in non_retryable"),
    (dict(rules={"ValueError": "fatal", ValueError: "fatal"}), "given twice"),
    (dict(rules={"E": RetryPolicy(rules={"F": "fatal"})}), "cannot have rules"),
    (dict(rules={"E": RetryPolicy(non_retryable=["F"])}), "cannot have rules or non_retryable"),
    (dict(rules={"app.errors.Throttled": RetryPolicy(max_attempts=2)}), "write 'Throttled'"),
    (dict(cap="10s", rules={"E": RetryPolicy(base="30s", cap="1m")}), None),
    (dict(cap="10s", rules={"E": RetryPolicy(base="30s")}), "cap \\(10s\\) would be smaller than base \\(30s\\)"),
    (dict(non_retryable=["no spaces allowed"]), "neither an exception class"),
])
def test_invalid_rules_fail_at_decoration(kwargs, fragment):
    if fragment is None:
        RetryPolicy(**kwargs)
        return
    with pytest.raises(TaskDefinitionError, match=fragment):
        @task(retries=RetryPolicy(**kwargs))
        def handler(ctx, payload):
            return None


def test_the_handlers_describe_output_carries_rules():
    @task(retries=RetryPolicy(rules={"ValueError": "fatal"}))
    def h(ctx, payload):
        return None

    d = spec_of(h).describe()
    assert d["retry"]["rules"]["ValueError"]["non_retryable"] is True and d["non_retryable"] == []
