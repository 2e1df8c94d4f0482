"""The benchmark's app: a handler that does nothing, so every cell measures
the platform's own cost per task."""

from ratchet import task


@task()
def noop(ctx, payload):
    """Return at once; the result is empty."""
    return None
