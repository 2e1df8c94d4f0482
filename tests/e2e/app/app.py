"""The app the end-to-end tests deploy. Every handler's behaviour is driven by
its payload so one deployment serves every scenario."""

import os
import time

from ratchet import FatalError, RetryableError, RetryPolicy, task

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
