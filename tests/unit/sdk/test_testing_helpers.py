"""ratchet.testing runs a handler as the platform would."""

from __future__ import annotations

import pytest

from ratchet import testing
from ratchet.errors import FatalError, ResultNotSerializable, ResultTooLarge, RetryableError
from ratchet.retry import RetryPolicy
from ratchet.task import task


@task(retries=RetryPolicy(max_attempts=3, non_retryable=[KeyError]))
def charge(ctx, payload):
    if payload.get("fail") == "fatal":
        raise FatalError("card declined")
    if payload.get("fail") == "later":
        raise RetryableError("gateway busy", retry_after="30s")
    if payload.get("fail") == "key":
        raise KeyError("amount")
    if payload.get("fail") == "set":
        return {1, 2}
    if payload.get("fail") == "big":
        return "x" * (256 * 1024 + 1)
    return {"charged": payload["amount"], "attempt": ctx.attempt, "of": ctx.max_attempts,
            "epoch": ctx.lease_epoch, "as": (1, 2)}


def test_run_returns_the_json_round_tripped_result():
    assert testing.run(charge, {"amount": 5}, attempt=2) == {
        "charged": 5, "attempt": 2, "of": 3, "epoch": 2, "as": [1, 2]}


def test_run_raises_what_the_handler_raised():
    with pytest.raises(FatalError, match="card declined"):
        testing.run(charge, {"fail": "fatal"})
    with pytest.raises(ResultNotSerializable):
        testing.run(charge, {"fail": "set"})
    with pytest.raises(ResultTooLarge):
        testing.run(charge, {"fail": "big"})


def test_run_attempt_classifies_like_the_sandbox():
    retry = testing.run_attempt(charge, {"fail": "later"})
    assert (retry.outcome, retry.fatal, retry.retry_after_s) == ("failed", False, 30.0)
    assert retry.error["error_class"] == "RetryableError" and "gateway busy" in retry.error["message"]
    assert "charge" in retry.error["stack"] and "execute.py" not in retry.error["stack"]
    listed = testing.run_attempt(charge, {"fail": "key"})
    assert (listed.outcome, listed.fatal, listed.error["error_class"]) == ("failed", True, "KeyError")
    fatal = testing.run_attempt(charge, {"fail": "fatal"})
    assert fatal.fatal and fatal.error["error_class"] == "FatalError"
    too_big = testing.run_attempt(charge, {"fail": "set"})
    assert too_big.fatal and too_big.error["error_class"] == "ResultNotSerializable"


def test_cancel_seen_by_the_handler_makes_the_attempt_canceled():
    @task
    def polite(ctx, payload):
        return "stopped" if ctx.cancelled() else "done"

    @task
    def deaf(ctx, payload):
        return "done"

    assert testing.run(polite, None, cancelled=True) == "stopped"
    assert testing.run_attempt(polite, None, cancelled=True).outcome == "canceled"
    # Cancel requested but never looked at: the handler's return counts.
    assert testing.run_attempt(deaf, None, cancelled=True).outcome == "succeeded"


def test_fake_context_counts_heartbeats_and_cancels_mid_run():
    ctx = testing.FakeContext()

    def handler(c, payload):
        for _ in range(3):
            c.heartbeat()
        c.cancel()
        return c.wait_cancelled(5)

    assert testing.run(handler, {}, ctx=ctx) is True and ctx.heartbeats == 3


def test_async_and_undecorated_handlers_run_too():
    async def fetch(ctx, payload):
        return payload * 2

    assert testing.run(fetch, 21) == 42
    assert not hasattr(fetch, "__ratchet_task__")
