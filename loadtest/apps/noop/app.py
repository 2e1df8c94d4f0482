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


# ---- the workflow cells (loadtest/workflows.py) -----------------------------------------------
# An SDK without workflows still deploys the task handlers: the workflow cells then fail alone.
try:
    from ratchet import workflow
except ImportError:
    workflow = None


def _mark(payload, suffix):
    """Append "<probe>:<suffix> <unix time>" to payload["probe_file"] (the bench's probe file,
    as loadtest/peers/probe.mark writes it for the peers; the bundle cannot import loadtest)."""
    if not isinstance(payload, dict) or payload.get("probe") is None or not payload.get("probe_file"):
        return
    import os
    import time
    fd = os.open(payload["probe_file"], os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, f"{payload['probe']}:{suffix} {time.time():.6f}\n".encode())
    finally:
        os.close(fd)


def _noop_step():
    """A durable step that does nothing: its (empty) result is checkpointed."""
    return None


if workflow is not None:
    @workflow()
    def steps(ctx, payload):
        """payload["steps"] no-op durable steps between the two probes the workflow cells time."""
        _mark(payload, "b")
        for i in range(int((payload or {}).get("steps", 10))):
            ctx.step(f"s{i}", _noop_step)
        _mark(payload, "e")
        return None
