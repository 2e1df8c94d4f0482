"""ratchet.testing.WorkflowEnv runs compensations: env.cancel(run) of a run that passed
ctx.on_cancel replays it to where it was and runs them last first as compensate steps,
on the fake clock, with the platform's rules (a retryable failure retries the activation
by the run's policy, a fatal one is logged and the others run, out of attempts the run
FAILS), then the run is CANCELED; a run without any is CANCELED at once as before."""

from __future__ import annotations

from ratchet import testing
from ratchet.errors import FatalError
from ratchet.retry import RetryPolicy
from ratchet.task import task
from ratchet.workflow import workflow

UNDONE: list = []


def release(seat):
    UNDONE.append(("release", seat))
    return {"released": seat}


def refund(amount, ctx):
    UNDONE.append(("refund", amount, ctx.step_attempt))
    return {"refunded": amount}


@workflow(retries=RetryPolicy(max_attempts=3, base="2s"))
def trip(ctx, input):
    seat = ctx.step("reserve", lambda: "7A")
    ctx.on_cancel(release, seat)
    ctx.step("charge", lambda: 120)
    ctx.on_cancel(refund, 120, ctx)
    ctx.sleep("until_departure", "3d")
    ctx.step("board", lambda: UNDONE.append("boarded"))
    return "flown"


def test_cancel_while_sleeping_runs_the_compensations_last_first_and_the_run_ends_canceled():
    UNDONE.clear()
    env = testing.WorkflowEnv()
    run = env.start(trip, {})
    env.run_until_blocked()
    assert run.state == "WAITING"
    env.advance("1d")
    env.cancel(run)
    assert run.state == "CANCELED"
    assert UNDONE == [("refund", 120, 1), ("release", "7A")]
    assert [(s.position, s.kind, s.name, s.status) for s in run.steps] == [
        (0, "step", "reserve", "COMPLETED"), (1, "on_cancel", "release", "COMPLETED"),
        (2, "step", "charge", "COMPLETED"), (3, "on_cancel", "refund", "COMPLETED"),
        # The sleep the cancel interrupted keeps its entry (left open); the compensations take the
        # positions after it (the CANCELLED answer's compensate_from).
        (4, "sleep", "until_departure", "RUNNING"),
        (5, "compensate", "compensate:refund", "COMPLETED"), (6, "compensate", "compensate:release", "COMPLETED")]
    assert run.step("compensate:release").result == {"released": "7A"}
    assert run.outcomes[-1].outcome == "canceled" and env.clock == 86400.0  # the fake clock did not move
    env.advance("5d")  # the sleep's timer went with the cancel
    assert run.state == "CANCELED" and "boarded" not in UNDONE
    env.cancel(run)  # a second cancel changes nothing
    assert len(run.outcomes) == 2


def test_a_compensation_failing_retryably_is_retried_by_the_runs_policy_and_the_done_ones_are_not_rerun():
    UNDONE.clear()
    env = testing.WorkflowEnv()
    run = env.start(trip, {})
    env.run_until_blocked()
    env.fail_step("compensate:release", ConnectionError("the booking system is down"), times=1)
    env.cancel(run)
    assert run.state == "CANCELED"
    assert [o.outcome for o in run.outcomes] == ["suspended", "failed", "canceled"]
    assert run.retry_delays_s == [4.0]  # attempt 2's backoff (the first activation suspended)
    assert UNDONE == [("refund", 120, 1), ("release", "7A")]  # refund ran once, release on its 2nd try
    assert run.step("compensate:release").attempt == 2


def test_out_of_attempts_a_compensation_that_keeps_failing_fails_the_run_with_its_error():
    UNDONE.clear()
    env = testing.WorkflowEnv()
    run = env.start(trip, {})
    env.run_until_blocked()
    env.fail_step("compensate:refund", ConnectionError("the bank is down"), times=10)
    env.cancel(run)
    # The suspension gave an attempt back: 3 attempts for the compensating activations.
    assert run.state == "FAILED" and run.error["error_class"] == "ConnectionError"
    assert [o.outcome for o in run.outcomes] == ["suspended", "failed", "failed", "failed"]
    assert UNDONE == []  # release (registered first) waits for refund: last first, always


def test_a_compensation_failing_fatally_is_logged_failed_and_the_others_still_run():
    UNDONE.clear()
    env = testing.WorkflowEnv()
    run = env.start(trip, {})
    env.run_until_blocked()
    env.fail_step("compensate:refund", FatalError("already refunded by hand"))
    env.cancel(run)
    assert run.state == "CANCELED"
    failed = run.step("compensate:refund")
    assert (failed.status, failed.fatal, failed.error["error_class"]) == ("FAILED", True, "FatalError")
    assert UNDONE == [("release", "7A")]


@workflow
def plain(ctx, input):
    ctx.step("a", lambda: 1)
    ctx.sleep("nap", "1d")


def test_a_run_without_compensations_is_canceled_at_once():
    env = testing.WorkflowEnv()
    run = env.start(plain)
    env.run_until_blocked()
    env.cancel(run)
    assert run.state == "CANCELED" and len(run.outcomes) == 1
    assert [s.kind for s in run.steps] == ["step", "sleep"]


@workflow
def waits_for_payment(ctx, input):
    ctx.on_cancel(release, input, name="release_hold")
    return ctx.wait_for_event("paid", {"order": input})


def test_cancel_while_waiting_closes_the_wait_and_compensates():
    UNDONE.clear()
    env = testing.WorkflowEnv()
    run = env.start(waits_for_payment, "o-1")
    env.run_until_blocked()
    env.cancel(run)
    assert run.state == "CANCELED" and UNDONE == [("release", "o-1")]
    assert not any(s.waiting for s in run.steps)
    assert env.broadcast("paid", {"order": "o-1"}) == 0


@task
def noop(ctx, x):
    return x


@workflow
def parent(ctx, input):
    ctx.on_cancel(release, "parent", name="parent_undo")
    return ctx.parallel("kids", [(waits_for_payment, "kid-1"), (noop, 1)])


def test_cancelling_a_parent_runs_its_and_its_child_workflows_compensations():
    UNDONE.clear()
    env = testing.WorkflowEnv()
    run = env.start(parent)
    env.run_until_blocked()
    kid = run.children("kids")[0]
    assert kid.state == "WAITING"
    env.cancel(run)
    assert (run.state, kid.state) == ("CANCELED", "CANCELED")
    assert sorted(UNDONE) == [("release", "kid-1"), ("release", "parent")]
    assert kid.step("compensate:release_hold").status == "COMPLETED"
    # The kid's end (from the cascade) did not fire the parent's barrier: the parent stopped at
    # its fan-out (which keeps its entry, still open) and compensated after it, not past it.
    assert [(s.position, s.kind, s.name, s.status) for s in run.steps] == [
        (0, "on_cancel", "parent_undo", "COMPLETED"), (1, "parallel", "kids", "RUNNING"),
        (2, "compensate", "compensate:parent_undo", "COMPLETED")]
