"""ratchet.testing.WorkflowEnv: workflows in-process on a fake clock, against an in-memory
log that answers as the platform's does."""

from __future__ import annotations

import time

import pytest

from ratchet import testing
from ratchet.errors import FatalError, StepFailed
from ratchet.retry import RetryPolicy
from ratchet.workflow import workflow


class Calls:
    def __init__(self):
        self.log: list = []

    def __call__(self, name, value=None):
        self.log.append(name)
        return value


def test_a_day_of_sleep_passes_in_milliseconds_on_the_fake_clock():
    calls = Calls()

    @workflow
    def reminder(ctx, input):
        ctx.step("first", calls, "first")
        ctx.sleep("a_day", days=1)
        return ctx.step("second", calls, "second", {"at": ctx.attempt})

    started = time.monotonic()
    env = testing.WorkflowEnv()
    run = env.start(reminder, {})
    env.run_until_blocked()
    assert run.state == "WAITING" and calls.log == ["first"]
    assert run.step("a_day").status == "RUNNING" and run.step("a_day").wake_at == 86400.0
    env.advance("23h")
    assert run.state == "WAITING" and calls.log == ["first"]
    env.advance("1h")
    assert run.state == "SUCCEEDED" and run.result == {"at": 2}
    assert calls.log == ["first", "second"]  # the first step ran once, across two activations
    assert (run.attempt, run.max_attempts) == (2, 6)  # the suspension did not use up an attempt
    assert env.clock == 86400.0 and env.now.isoformat() == "2026-01-02T00:00:00+00:00"
    assert time.monotonic() - started < 0.5


def test_events_sent_before_the_wait_wait_in_the_inbox_and_are_taken_oldest_matching_first():
    @workflow
    def approval(ctx, input):
        return ctx.wait_for_event("approved", match={"order": input["order"]})

    env = testing.WorkflowEnv()
    run = env.start(approval, {"order": 7})
    assert env.send_event(run, "approved", {"order": 8, "by": "x"}) is False  # no wait yet: inbox
    assert env.send_event(run, "approved", {"order": 7, "by": "ann"}) is False
    assert env.send_event(run, "approved", {"order": 7, "by": "bob"}) is False
    env.run_until_blocked()
    assert run.state == "SUCCEEDED" and run.result == {"order": 7, "by": "ann"}
    assert [e.consumed_by for e in run.inbox] == [None, 0, None]
    with pytest.raises(RuntimeError, match="has ended"):
        env.send_event(run, "approved", {"order": 7})


def test_an_event_sent_to_a_waiting_run_wakes_it():
    @workflow
    def approval(ctx, input):
        data = ctx.wait_for_event("approved")
        return ctx.step("after", lambda: data["ok"])

    env = testing.WorkflowEnv()
    run = env.start(approval)
    env.run_until_blocked()
    assert run.state == "WAITING" and run.steps[0].waiting
    assert env.send_event(run.workflow_id, "approved", {"ok": True}) is True
    assert run.state == "ENQUEUED"
    env.run_until_blocked()
    assert run.state == "SUCCEEDED" and run.result is True


def test_a_broadcast_reaches_only_waits_open_now_and_none_past_their_timeout():
    @workflow
    def listener(ctx, input):
        try:
            return ctx.wait_for_event("release", match={"env": "prod"}, timeout=input["timeout"])
        except TimeoutError as e:
            return {"timed_out": "release" in str(e)}

    env = testing.WorkflowEnv()
    early = env.start(listener, {"timeout": "1h"}, workflow_id="a-early")
    late = env.start(listener, {"timeout": None}, workflow_id="b-late")
    assert env.broadcast("release", {"env": "prod"}) == 0  # nobody waits yet, and it is not kept
    env.run_until_blocked()
    assert early.state == late.state == "WAITING"
    env.advance("2h")  # the early run's timeout passes
    assert early.state == "SUCCEEDED" and early.result == {"timed_out": True}
    assert early.step("release").status == "FAILED" and early.step("release").error["error_class"] == "TimeoutError"
    assert env.broadcast("release", {"env": "staging"}) == 0  # match not contained
    assert env.broadcast("release", {"env": "prod", "version": 3}) == 1
    env.run_until_blocked()
    assert late.result == {"env": "prod", "version": 3}


def test_an_injected_step_failure_is_retried_with_step_attempt_2():
    calls = Calls()

    @workflow(retries=RetryPolicy(max_attempts=3, base="2s"))
    def onboard(ctx, input):
        account = ctx.step("create_account", lambda: calls("create", {"id": 7, "try": ctx.step_attempt}))
        return {"account": account, "activation": ctx.attempt}

    env = testing.WorkflowEnv()
    env.fail_step("create_account", ConnectionError("crm down"), times=1)
    run = env.start(onboard, {})
    env.run_until_blocked()
    assert run.state == "SUCCEEDED" and run.result == {"account": {"id": 7, "try": 2}, "activation": 2}
    assert calls.log == ["create"]  # the injected failure stood in for the first call
    assert run.step("create_account").attempt == 2 and run.retry_delays_s == [2.0]
    first = run.outcomes[0]
    assert (first.outcome, first.fatal, first.error["error_class"]) == ("failed", False, "ConnectionError")


def test_failures_past_the_attempts_fail_the_run_and_fatal_ones_at_once():
    @workflow(retries=RetryPolicy(max_attempts=2))
    def flaky(ctx, input):
        return ctx.step("call", lambda: "ok")

    env = testing.WorkflowEnv()
    env.fail_step("call", TimeoutError("slow"), times=5)
    run = env.start(flaky)
    env.run_until_blocked()
    assert run.state == "FAILED" and run.attempt == 2 and run.error["error_class"] == "TimeoutError"
    assert isinstance(run.exception, TimeoutError)
    env2 = testing.WorkflowEnv()
    env2.fail_step("call", FatalError("card declined"), times=1)
    run2 = env2.start(flaky)
    env2.run_until_blocked()
    assert run2.state == "FAILED" and run2.attempt == 1 and run2.step("call").fatal


def test_a_fatal_step_caught_once_raises_step_failed_on_replay():
    seen: list = []

    @workflow
    def careful(ctx, input):
        try:
            ctx.step("charge", lambda: "charged")
        except FatalError as e:
            seen.append(type(e).__name__)
        ctx.sleep("settle", seconds=30)
        return seen[-1]

    env = testing.WorkflowEnv()
    env.fail_step("charge", FatalError("card declined"))
    run = env.start(careful)
    env.run_until_blocked()
    env.advance(30)
    assert run.state == "SUCCEEDED" and seen == ["FatalError", "StepFailed"]
    assert run.result == "StepFailed"


def test_removing_a_completed_step_under_a_live_run_is_a_versioning_error():
    calls = Calls()

    @workflow(name="ship")
    def ship_v1(ctx, input):
        ctx.step("reserve", calls, "reserve")
        ctx.step("label", calls, "label")
        ctx.wait_for_event("picked")
        return ctx.step("notify", calls, "notify")

    @workflow(name="ship")
    def ship_v2(ctx, input):  # "reserve" removed
        ctx.step("label", calls, "label")
        ctx.wait_for_event("picked")
        return ctx.step("notify", calls, "notify")

    env = testing.WorkflowEnv()
    run = env.start(ship_v1)
    env.run_until_blocked()
    assert run.state == "WAITING" and calls.log == ["reserve", "label"]
    env.deploy(ship_v2)
    assert env.send_event(run, "picked", {}) is True
    env.run_until_blocked()
    assert run.state == "FAILED" and run.error["error_class"] == "WorkflowVersionError"
    assert "'label'" in run.error["message"] and "'reserve'" in run.error["message"]
    assert run.outcomes[-1].fatal and calls.log == ["reserve", "label"]  # nothing ran past the mismatch


def test_ctx_version_takes_the_old_branch_for_old_runs_and_the_new_one_for_new_runs():
    @workflow(name="bill")
    def bill_v1(ctx, input):
        ctx.step("invoice", lambda: "v1 invoice")
        ctx.sleep("wait", hours=1)
        return ctx.step("charge", lambda: "v1 charge")

    @workflow(name="bill")
    def bill_v2(ctx, input):
        if ctx.version("tax", latest=1) == 0:
            invoice = ctx.step("invoice", lambda: "v1 invoice")
        else:
            invoice = ctx.step("invoice_with_tax", lambda: "v2 invoice")
        ctx.sleep("wait", hours=1)
        late = ctx.version("receipt", latest=2)  # past the sleep: a v1 run reaches it new
        return [invoice, late, ctx.step("charge", lambda: "v2 charge")]

    env = testing.WorkflowEnv()
    old = env.start(bill_v1, workflow_id="old")
    env.run_until_blocked()
    env.deploy(bill_v2)
    new = env.start(bill_v2, workflow_id="new")
    env.advance("1h")
    assert old.state == new.state == "SUCCEEDED"
    assert old.result == ["v1 invoice", 2, "v2 charge"]
    assert [(s.name, s.kind) for s in old.steps] == [("invoice", "step"), ("wait", "sleep"), ("receipt", "version"),
                                                     ("charge", "step")]  # ABSENT took no position
    assert new.result == ["v2 invoice", 2, "v2 charge"]
    assert [s.name for s in new.steps] == ["tax", "invoice_with_tax", "wait", "receipt", "charge"]


def test_a_swallowed_version_error_still_fails_the_run_and_later_calls_raise_it():
    @workflow(name="w")
    def w_v1(ctx, input):
        ctx.step("a", lambda: 1)
        ctx.sleep("s", seconds=1)

    raised: list = []

    @workflow(name="w")
    def w_v2(ctx, input):
        for name in ("b", "c"):
            try:
                ctx.step(name, lambda: 2)
            except Exception as e:  # noqa: BLE001 -- the point: code that swallows the error
                raised.append(type(e).__name__)
        return "fine"

    env = testing.WorkflowEnv()
    run = env.start(w_v1)
    env.run_until_blocked()
    env.deploy(w_v2)
    env.advance(1)
    assert raised == ["WorkflowVersionError", "WorkflowVersionError"]
    assert run.state == "FAILED" and run.error["error_class"] == "WorkflowVersionError"
    assert [s.name for s in run.steps] == ["a", "s"]


def test_step_results_must_be_json_and_names_are_checked():
    @workflow
    def bad_result(ctx, input):
        return ctx.step("sets", lambda: {1, 2})

    env = testing.WorkflowEnv()
    run = env.start(bad_result)
    env.run_until_blocked()
    assert run.state == "FAILED" and run.error["error_class"] == "ResultNotSerializable" and run.attempt == 1
    assert "step 'sets'" in run.error["message"] and run.step("sets").fatal

    @workflow
    def bad_name(ctx, input):
        ctx.step("has space", lambda: 1)

    run = env.start(bad_name)
    env.run_until_blocked()
    assert run.state == "FAILED" and run.error["error_class"] == "ValueError"
    assert "[A-Za-z0-9_.:-]" in run.error["message"] and run.steps == []


def test_cancel_ends_a_waiting_run_and_deletes_its_wait():
    @workflow
    def waits(ctx, input):
        ctx.wait_for_event("never", timeout="1d")

    env = testing.WorkflowEnv()
    run = env.start(waits)
    env.run_until_blocked()
    env.cancel(run)
    assert run.state == "CANCELED" and not run.steps[0].waiting
    assert env.broadcast("never", {}) == 0
    env.advance("2d")
    assert run.state == "CANCELED" and run.attempt == 1


def test_a_workflow_that_never_blocks_fails_the_test_instead_of_hanging():
    @workflow(retries=RetryPolicy(max_attempts=100))
    def spins(ctx, input):
        ctx.sleep("zero", duration=0)
        raise ValueError("again")

    env = testing.WorkflowEnv(max_activations=20)
    run = env.start(spins)
    with pytest.raises(RuntimeError, match="never sleeps, waits or ends"):
        env.run_until_blocked()
    assert run.attempt == 20 and [s.status for s in run.steps] == ["COMPLETED"]


def test_start_refuses_a_plain_task():
    from ratchet.task import task

    @task
    def t(ctx, payload):
        return 1

    with pytest.raises(TypeError, match="@workflow"):
        testing.WorkflowEnv().start(t)
    assert issubclass(StepFailed, FatalError)


def test_a_recorded_branch_the_code_no_longer_knows_is_a_versioning_error():
    @workflow(name="p")
    def p_v2(ctx, input):
        ctx.version("fast-path", latest=2)
        ctx.sleep("s", seconds=5)

    @workflow(name="p")
    def p_v1(ctx, input):  # rolled back: knows branches up to 1
        return ctx.version("fast-path", latest=1)

    env = testing.WorkflowEnv()
    run = env.start(p_v2)
    env.run_until_blocked()
    assert run.step("fast-path").result == 2
    env.deploy(p_v1)
    env.advance(5)
    assert run.state == "FAILED" and run.error["error_class"] == "WorkflowVersionError"
    assert "branch 2" in run.error["message"]


def test_testing_run_points_a_workflow_to_the_env():
    @workflow
    def w(ctx, input):
        return None

    with pytest.raises(TypeError, match="WorkflowEnv"):
        testing.run(w, {})


def test_an_async_step_function_is_refused_with_what_to_write():
    async def fetch():
        return 1

    @workflow
    def w(ctx, input):
        return ctx.step("fetch", fetch)

    env = testing.WorkflowEnv()
    run = env.start(w)
    env.run_until_blocked()
    assert run.state == "FAILED" and run.attempt == 1 and run.step("fetch").fatal
    assert "asyncio.run" in run.error["message"]
