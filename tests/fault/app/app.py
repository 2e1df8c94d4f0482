"""The app the fault harness deploys. One handler, `work`, whose behaviour the
payload scripts, and which appends every execution to the ledger named in the
payload (the sandbox's environment is scrubbed, so the path travels with the
task). Each ledger line is one os.write on an O_APPEND descriptor: no buffer
in this process, so a SIGKILL right after the write loses nothing.

payload: {op, ledger, mode, sleep?, succeed_on?}
  mode ok     -> sleeps `sleep` s (returning early if cancelled), returns
       fail   -> always raises RetryableError
       flaky  -> raises RetryableError before attempt `succeed_on`, then returns
       fatal  -> raises FatalError
       crash  -> the sandbox process dies (os._exit) before attempt `succeed_on`
       hang   -> ignores cancellation and sleeps `sleep` s (for start_to_close)
The result carries the lease epoch it ran under, so the checker can tell
which lease's completion was accepted.
"""

import json
import os
import time

from ratchet import FatalError, RetryableError, RetryPolicy, task

FAST = RetryPolicy(max_attempts=5, base="100ms", cap="400ms")


def _ledger(payload, ctx, phase, **extra):
    path = payload.get("ledger")
    if not path:
        return
    line = json.dumps({"task_id": ctx.task_id, "attempt": ctx.attempt, "lease_epoch": ctx.lease_epoch,
                       "pid": os.getpid(), "time": time.time(), "phase": phase, "op": payload.get("op"),
                       **extra}) + "\n"
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o666)
    try:
        os.write(fd, line.encode())
    finally:
        os.close(fd)


@task(retries=FAST)
def work(ctx, payload):
    """Run the scripted behaviour, recording start and end in the ledger."""
    return _run(ctx, payload)


@task(retries=FAST)
def crashy(ctx, payload):
    """The same script under its own task type: the sandbox crashes it causes on purpose trip only
    this type's circuit breaker, not the one of the main workload."""
    return _run(ctx, payload)


def _run(ctx, payload):
    _ledger(payload, ctx, "start")
    mode = payload.get("mode", "ok")
    if mode == "crash" and ctx.attempt < payload.get("succeed_on", 2):
        os._exit(3)
    if mode == "fail" or (mode == "flaky" and ctx.attempt < payload.get("succeed_on", 2)):
        _ledger(payload, ctx, "end", outcome="raise")
        raise RetryableError(f"{mode}: attempt {ctx.attempt} fails on purpose")
    if mode == "fatal":
        _ledger(payload, ctx, "end", outcome="fatal")
        raise FatalError("fatal on purpose")
    deadline = time.monotonic() + float(payload.get("sleep", 0))
    while time.monotonic() < deadline:
        if mode != "hang" and ctx.cancelled():
            _ledger(payload, ctx, "end", outcome="cancelled")
            return {"op": payload.get("op"), "lease_epoch": ctx.lease_epoch, "cancelled": True}
        time.sleep(0.02)
    _ledger(payload, ctx, "end", outcome="ok")
    return {"op": payload.get("op"), "lease_epoch": ctx.lease_epoch, "attempt": ctx.attempt, "pid": os.getpid()}
