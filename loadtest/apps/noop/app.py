"""The benchmark's app: a handler that does nothing, so every cell measures
the platform's own cost per task."""

from ratchet import task


@task()
def noop(ctx, payload):
    """Return at once; the result is empty."""
    return None


@task()
def sleepy(ctx, payload):
    """Sleep payload["sleep_s"] seconds: the recovery cell needs tasks in flight when the
    host agent dies (the peers' handlers sleep the same way for that cell only)."""
    import time
    time.sleep(float((payload or {}).get("sleep_s", 1.0)))
    return None
