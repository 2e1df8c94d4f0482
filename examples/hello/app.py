"""The hello app: a few handlers that show what a Ratchet task can do.

Deploy it with `ratchet deploy examples/hello --app default`, then enqueue
`greet`, `add`, `flaky` or `slow`, or start the `signup` workflow (see the README's
five-minute tour and docs/workflows.md).
"""

from __future__ import annotations

import time

from ratchet import FatalError, RetryableError, RetryPolicy, task, workflow


@task
def greet(ctx, payload):
    """Returns a greeting: the simplest handler there is."""
    name = (payload or {}).get("name", "world")
    return {"greeting": f"Hello, {name}!", "attempt": ctx.attempt}


@task(retries=RetryPolicy(max_attempts=3, non_retryable=[TypeError]))
def add(ctx, payload):
    """Adds a list of numbers. A non-list payload can never succeed: FatalError."""
    numbers = (payload or {}).get("numbers")
    if not isinstance(numbers, list):
        raise FatalError('payload must look like {"numbers": [1, 2, 3]}')
    return {"sum": sum(numbers)}


@task(retries=RetryPolicy(max_attempts=4, base="500ms", cap="5s"))
def flaky(ctx, payload):
    """Fails its first attempt, succeeds on a later one: retries at work."""
    if ctx.attempt == 1:
        raise RetryableError("the first attempt always fails (on purpose)")
    return {"ok": True, "succeeded_on_attempt": ctx.attempt}


@task(timeout="5m")
def slow(ctx, payload):
    """Works in steps, heartbeating, and stops cleanly when cancelled."""
    steps = int((payload or {}).get("steps", 60))
    for step in range(steps):
        if ctx.cancelled():
            return {"stopped_at_step": step, "of": steps}
        ctx.heartbeat()
        time.sleep(0.5)
    return {"done_steps": steps}


@workflow
def signup(ctx, user):
    """A workflow: a memoized step, a durable sleep, a wait for an approval event."""
    name = (user or {}).get("name", "world")
    account = ctx.step("create_account", lambda: {"account": f"acct-{name.lower()}"})
    ctx.sleep("cool_off", seconds=1)  # the run is WAITING: no process is held meanwhile
    try:
        approval = ctx.wait_for_event("approved", match={"name": name}, timeout="1m")
    except TimeoutError:
        return {**account, "approved": False}
    welcome = ctx.step("send_welcome", lambda: f"welcome mail sent to {name}")
    return {**account, "approved": True, "by": approval.get("by"), "welcome": welcome}
