"""ratchet.testing.WorkflowEnv runs fan-outs in-process: children as tasks (their own
retry policies) and runs (their own sleeps) of the same env, the barrier, fail_fast's
cancel, a cancel's cascade, results in order, on the fake clock; and ctx.sleep(0)."""

from __future__ import annotations

import time

from ratchet import testing
from ratchet.errors import ChildError, ChildFailed, FatalError
from ratchet.retry import RetryPolicy
from ratchet.task import task
from ratchet.workflow import workflow

RAN: list = []


@task
def square(ctx, x):
    return x * x


@task(retries=RetryPolicy(max_attempts=3, base="1s"))
def flaky(ctx, x):
    RAN.append((ctx.task_id, ctx.attempt))
    return {"x": x, "attempt": ctx.attempt}


@task(retries=RetryPolicy(max_attempts=2))
def breaks(ctx, x):
    RAN.append(("breaks", x))
    if x == "fatal":
        raise FatalError("bad input")
    raise ValueError(f"broken {x}")


@workflow
def wide(ctx, n):
    values = ctx.parallel("squares", [(square, i) for i in range(n)])
    return {"sum": sum(values), "first": values[:3], "last": values[-1]}


def test_a_1000_way_fan_out_runs_in_milliseconds_with_the_results_in_order():
    env = testing.WorkflowEnv()
    run = env.start(wide, 1000)
    started = time.perf_counter()
    env.run_until_blocked()
    elapsed = time.perf_counter() - started
    assert run.state == "SUCCEEDED", run.error
    assert run.result == {"sum": sum(i * i for i in range(1000)), "first": [0, 1, 4], "last": 999 * 999}
    children = run.children("squares")
    assert len(children) == 1000 and all(c.state == "SUCCEEDED" and c.attempt == 1 for c in children)
    assert [c.parent.index for c in children] == list(range(1000))
    assert run.attempt == 2  # suspended once at the fan-out, resumed once by its barrier
    step = run.step("squares")
    assert (step.kind, step.status, step.child_count, len(step.children_done)) == ("parallel", "COMPLETED", 1000, 1000)
    assert elapsed < 1.5, f"a 1,000-way fan-out took {elapsed:.3f} s"  # ~50 ms here; bounded for a busy machine


@workflow
def mixed(ctx, mode):
    calls = [(square, 2), (breaks, "x"), ("square", 3)]
    if mode == "fail_fast":
        calls = [(breaks, "fatal"), (square, 2), (square, 3)]
    try:
        values = ctx.parallel("m", calls, on_failure=mode)
    except ChildFailed as e:
        return {"failed": [e.index, e.state, e.error_class, e.error_message]}
    return [[v.index, v.state, v.error_class, v.message] if isinstance(v, ChildError) else v for v in values]


def test_collect_puts_a_child_error_in_place_after_the_child_spent_its_own_attempts():
    RAN.clear()
    env = testing.WorkflowEnv()
    run = env.start(mixed, "collect")
    env.run_until_blocked()
    assert run.state == "SUCCEEDED", run.error
    assert run.result == [4, [1, "FAILED", "ValueError", "broken x"], 9]
    failed = run.children("m")[1]
    assert (failed.state, failed.attempt, len(failed.retry_delays_s)) == ("FAILED", 2, 1)  # its policy: 2 attempts
    assert RAN == [("breaks", "x"), ("breaks", "x")]


def test_fail_fast_raises_child_failed_and_cancels_the_siblings_that_had_not_ended():
    RAN.clear()
    env = testing.WorkflowEnv()
    run = env.start(mixed, "fail_fast")
    env.run_until_blocked()
    assert run.state == "SUCCEEDED", run.error
    assert run.result == {"failed": [0, "FAILED", "FatalError", "bad input"]}
    children = run.children("m")
    assert [c.state for c in children] == ["FAILED", "CANCELED", "CANCELED"]
    assert [c.attempt for c in children] == [1, 0, 0]  # fatal at once; the siblings never ran
    assert RAN == [("breaks", "fatal")]


def test_a_failed_child_is_retried_by_its_own_policy_and_the_injected_failures_are_logged():
    RAN.clear()

    @workflow(retries=RetryPolicy(max_attempts=1))
    def parent(ctx, input):
        return ctx.child("one", flaky, 7)

    env = testing.WorkflowEnv()
    env.fail_task("flaky", ConnectionError("down"), times=2)
    run = env.start(parent)
    env.run_until_blocked()
    assert run.state == "SUCCEEDED" and run.result == {"x": 7, "attempt": 3}, run.error
    (child,) = run.children("one")
    assert (child.state, child.attempt) == ("SUCCEEDED", 3)
    assert [o.error["error_class"] for o in child.outcomes[:2]] == ["ConnectionError", "ConnectionError"]
    assert child.retry_delays_s == [1.0, 2.0]  # flaky's backoff (base 1s), not the parent's policy
    assert [(child.id, 3)] == RAN  # the injected attempts never ran the function


@workflow
def napper(ctx, input):
    ctx.sleep("nap", hours=1)
    grand = ctx.parallel("grand", [(square, input), (square, input + 1)])
    return {"napped": True, "grand": grand}


@workflow
def parent_of_a_workflow(ctx, input):
    got = ctx.child("sub", napper, 3)
    ctx.sleep("after", minutes=5)
    return got


def test_a_child_workflow_is_a_run_of_the_env_with_its_own_sleep_on_the_fake_clock():
    env = testing.WorkflowEnv()
    run = env.start(parent_of_a_workflow)
    env.run_until_blocked()
    (sub,) = run.children("sub")
    assert sub in env.runs and sub.parent.run is run
    assert (run.state, sub.state, sub.step("nap").status) == ("WAITING", "WAITING", "RUNNING")
    env.advance("59m")
    assert (run.state, sub.state) == ("WAITING", "WAITING")
    env.advance("1m")  # the child's sleep ends; its own fan-out runs; the parent wakes and sleeps 5 min
    assert (sub.state, sub.result) == ("SUCCEEDED", {"napped": True, "grand": [9, 16]})
    assert (run.state, run.step("after").status) == ("WAITING", "RUNNING")
    env.advance("5m")
    assert run.state == "SUCCEEDED" and run.result == {"napped": True, "grand": [9, 16]}
    assert env.clock == 3900.0


@workflow
def waits_forever(ctx, input):
    ctx.parallel("grand", [(waits_for_event, None)])


@workflow
def waits_for_event(ctx, input):
    ctx.wait_for_event("never")


@workflow
def top(ctx, input):
    ctx.parallel("kids", [(waits_forever, None), (square, 2)])


def test_cancelling_a_run_cancels_its_open_fan_outs_children_down_the_tree():
    env = testing.WorkflowEnv()
    run = env.start(top)
    env.run_until_blocked()
    kid, sq = run.children("kids")
    (grandchild,) = kid.children("grand")
    assert (kid.state, sq.state, grandchild.state) == ("WAITING", "SUCCEEDED", "WAITING")
    env.cancel(run)
    assert (run.state, kid.state, grandchild.state) == ("CANCELED", "CANCELED", "CANCELED")
    assert run.step("kids").children_done[0]["state"] == "CANCELED"  # the late end is recorded, harmless
    assert not grandchild.step("never").waiting


def test_a_handler_the_app_does_not_have_fails_the_run_at_once():
    @workflow(retries=RetryPolicy(max_attempts=5))
    def names_a_stranger(ctx, input):
        return ctx.child("c", "no_such_task", {})

    env = testing.WorkflowEnv()
    run = env.start(names_a_stranger)
    env.run_until_blocked()
    assert (run.state, run.attempt, run.error["error_class"]) == ("FAILED", 1, "StepRefused")
    assert "no_such_task" in run.error["message"]


def test_a_handler_named_by_string_is_found_when_registered():
    @workflow
    def by_name(ctx, input):
        return ctx.parallel("p", [("square", 5), ("flaky", 1)])

    env = testing.WorkflowEnv(handlers=[square, flaky])
    run = env.start(by_name)
    env.run_until_blocked()
    assert run.state == "SUCCEEDED" and run.result == [25, {"x": 1, "attempt": 1}]


def test_a_fan_out_with_another_child_count_under_a_live_run_is_a_versioning_error():
    @workflow(name="grows")
    def grows_v1(ctx, input):
        return ctx.parallel("p", [(napper, 1), (square, 1)])

    @workflow(name="grows")
    def grows_v2(ctx, input):
        return ctx.parallel("p", [(napper, 1), (square, 1), (square, 2)])

    env = testing.WorkflowEnv()
    run = env.start(grows_v1)
    env.run_until_blocked()
    env.deploy(grows_v2)
    env.advance("1h")  # the child workflow ends; the barrier wakes the run on the new code
    assert (run.state, run.error["error_class"]) == ("FAILED", "WorkflowVersionError")
    assert "another number of children" in run.error["message"]


def test_a_sleep_of_zero_or_a_deadline_already_past_completes_in_the_same_activation():
    @workflow
    def naps_zero(ctx, input):
        ctx.sleep("zero", seconds=0)
        ctx.sleep("past", seconds=input["deadline"] - 100)
        ctx.sleep("plain", 0)
        return "done"

    env = testing.WorkflowEnv()
    run = env.start(naps_zero, {"deadline": 40})
    env.run_until_blocked()
    assert (run.state, run.result, run.attempt) == ("SUCCEEDED", "done", 1)
    assert [(s.kind, s.status) for s in run.steps] == [("sleep", "COMPLETED")] * 3
