"""The app the end-to-end tests deploy. Every handler's behaviour is driven by
its payload so one deployment serves every scenario."""

import os
import time

from ratchet import FatalError, RetryableError, RetryPolicy, task, workflow
from ratchet.errors import ChildError, ChildFailed

FAST_RETRY = RetryPolicy(max_attempts=3, base="100ms", cap="200ms")


@task
def echo(ctx, payload):
    """Returns the payload and who ran it."""
    return {"payload": payload, "attempt": ctx.attempt, "lease_epoch": ctx.lease_epoch}


@task(retries=FAST_RETRY)
def fail_until(ctx, payload):
    """Raises until attempt `succeed_on`, then returns the attempt number."""
    if ctx.attempt < payload.get("succeed_on", 2):
        raise RetryableError(f"attempt {ctx.attempt} fails on purpose")
    return {"attempt": ctx.attempt}


@task(retries=FAST_RETRY)
def always_fail(ctx, payload):
    raise ValueError("this handler always fails")


@task(retries=FAST_RETRY)
def fatal(ctx, payload):
    raise FatalError("bad payload: never retry")


@task(retries=RetryPolicy(max_attempts=3, base="100ms", cap="200ms"))
def sleepy(ctx, payload):
    """Sleeps `seconds` (or until cancelled when `honour_cancel`), heartbeating.

    The first attempt writes its pid to `pid_file` when given, so a test can
    find the sandbox; later attempts return at once when `fast_retry` is set.
    """
    if payload.get("pid_file") and ctx.attempt == 1:
        with open(payload["pid_file"], "w") as f:
            f.write(str(os.getpid()))
    if payload.get("fast_retry") and ctx.attempt > 1:
        return {"attempt": ctx.attempt, "slept": 0}
    deadline = time.monotonic() + payload.get("seconds", 1.0)
    while time.monotonic() < deadline:
        ctx.heartbeat()
        if payload.get("honour_cancel", True) and ctx.cancelled():
            return {"attempt": ctx.attempt, "cancelled": True}
        time.sleep(0.02)
    return {"attempt": ctx.attempt, "slept": payload.get("seconds", 1.0)}


# ---- workflows (tests/e2e/test_workflows.py) --------------------------------------------------
# Each step's side effect appends a line to a file under payload["dir"], so a test can count
# how often a step really ran (the step log says what was committed).

# test_workflows rewrites this line in a copy of the app to deploy "the next release".
WORKFLOW_RELEASE = 1


def _effect(folder: str, name: str) -> int:
    """Append one line to folder/name; the number of lines it now holds."""
    path = os.path.join(folder, name)
    with open(path, "a") as f:
        f.write("x\n")
    with open(path) as f:
        return len(f.readlines())


@workflow(retries=FAST_RETRY)
def onboard(ctx, payload):
    """A step, a sleep, a wait for an event, a version branch: the issue's example."""
    folder = payload["dir"]
    account = ctx.step("create_account", lambda: {"id": payload["user"], "runs": _effect(folder, "create")})
    ctx.sleep("cool_off", seconds=payload.get("sleep_s", 0.5))
    try:
        approval = ctx.wait_for_event("approved", match={"user": payload["user"]},
                                      timeout=payload.get("timeout", "30s"))
    except TimeoutError:
        approval = None
    if ctx.version("activation-v2") >= 1:
        activated = ctx.step("activate_v2", lambda: "v2")
    else:
        activated = ctx.step("activate", lambda: "v1")
    return {"account": account, "approval": approval, "activated": activated}


@workflow(retries=FAST_RETRY)
def crash_after_effect(ctx, payload):
    """The first try of `charge` dies after its side effect and before its checkpoint."""
    folder = payload["dir"]
    first = ctx.step("first", lambda: _effect(folder, "first"))

    def charge():
        runs = _effect(folder, "charge")
        if ctx.step_attempt == 1:
            os._exit(17)  # the sandbox dies: the effect happened, the commit did not
        return {"runs": runs, "step_attempt": ctx.step_attempt}

    return {"first": first, "charge": ctx.step("charge", charge)}


@workflow(retries=FAST_RETRY)
def release_steps(ctx, payload):
    """Release 1 logs a, b; release 2 drops the completed step b (a deploy under a live run)."""
    folder = payload["dir"]
    ctx.step("a", lambda: _effect(folder, "a"))
    if WORKFLOW_RELEASE == 1:
        ctx.step("b", lambda: _effect(folder, "b"))
    ctx.sleep("pause", seconds=payload.get("sleep_s", 3))
    ctx.step("c", lambda: _effect(folder, "c"))
    return "done"


@workflow(retries=FAST_RETRY, timeout="10m")
def many_steps(ctx, payload):
    """payload["n"] memoized no-op steps, then (with "sleep_s") a sleep, so the run resumes
    through every one of them before it returns."""
    total = sum(ctx.step(f"s{i}", lambda i=i: i) for i in range(payload["n"]))
    if payload.get("sleep_s"):
        ctx.sleep("rest", seconds=payload["sleep_s"])
    return total


@task(retries=FAST_RETRY)
def child_task(ctx, payload):
    """A fan-out's child: doubles its index, or fails fatally when asked."""
    if payload.get("fail"):
        raise FatalError(f"child {payload['i']} fails on purpose")
    if payload.get("sleep_s"):
        time.sleep(payload["sleep_s"])
    return payload["i"] * 2


@workflow(retries=FAST_RETRY)
def fan_out(ctx, payload):
    """payload["n"] children; the step after the fan-out records each time it runs."""
    fail = set(payload.get("fail", []))
    calls = [(child_task, {"i": i, "fail": i in fail, "sleep_s": payload.get("child_sleep_s", 0)})
             for i in range(payload["n"])]
    try:
        results = ctx.parallel("fan", calls, on_failure=payload.get("on_failure", "collect"))
    except ChildFailed as e:
        return {"failed_child": e.index}
    after = ctx.step("after", lambda: _effect(payload["dir"], "after"))
    return {"sum": sum(r for r in results if isinstance(r, int)), "after": after,
            "errors": [i for i, r in enumerate(results) if isinstance(r, ChildError)]}


@workflow(retries=FAST_RETRY)
def nap(ctx, payload):
    """A child workflow with a durable sleep of its own."""
    ctx.sleep("nap", seconds=payload.get("seconds", 0.3))
    return {"napped": payload.get("seconds", 0.3)}


@workflow(retries=FAST_RETRY)
def parent_of_nap(ctx, payload):
    """Awaits one child workflow like a step."""
    return {"child": ctx.child("sub", nap, {"seconds": 0.3})}


def _branch(ctx):
    """Release 1 activates one way; release 2 branches on a version marker."""
    if WORKFLOW_RELEASE == 1:
        return ctx.step("activate", lambda: "v1")
    if ctx.version("activation-v2") >= 1:
        return ctx.step("activate_v2", lambda: "v2")
    return ctx.step("activate", lambda: "v1")


@workflow(retries=FAST_RETRY)
def branching(ctx, payload):
    """Reaches the branch point before or after its sleep, as payload["activate_first"] says."""
    ctx.step("a", lambda: "a")
    if payload.get("activate_first"):
        activated = _branch(ctx)
        ctx.sleep("s", seconds=payload["sleep_s"])
    else:
        ctx.sleep("s", seconds=payload["sleep_s"])
        activated = _branch(ctx)
    return activated


@workflow(retries=FAST_RETRY)
def slow_step(ctx, payload):
    """One step that outlasts a lease when its host agent is paused mid-step."""
    def work():
        runs = _effect(payload["dir"], "slow")
        time.sleep(payload.get("seconds", 3))
        return {"runs": runs, "step_attempt": ctx.step_attempt, "epoch": ctx.lease_epoch}
    return ctx.step("work", work)


@workflow(retries=FAST_RETRY)
def with_refund(ctx, payload):
    """Charges, registers two compensations, then holds: a cancel during the hold refunds."""
    folder = payload["dir"]
    ctx.step("charge", lambda: _effect(folder, "charge"))
    ctx.on_cancel(lambda: _effect(folder, "refund"), name="refund")
    ctx.on_cancel(lambda: _effect(folder, "notify"), name="notify")  # registered last: runs first
    ctx.sleep("hold", seconds=payload.get("sleep_s", 60))
    ctx.step("ship", lambda: _effect(folder, "ship"))
    return "shipped"
