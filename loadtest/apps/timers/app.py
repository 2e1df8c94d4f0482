"""The timer-lateness measurement's app (loadtest/timer_latency.py): a handler that does nothing,
and one that fails its first attempt so the second starts when its retry backoff ends."""

from ratchet import task


@task()
def noop(ctx, payload):
    """Return at once."""
    return None


@task()
def flaky(ctx, payload):
    """Fail the first attempt, succeed the next."""
    if ctx.attempt == 1:
        raise RuntimeError("first attempt fails on purpose")
    return None
