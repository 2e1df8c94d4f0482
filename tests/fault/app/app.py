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

One workflow, `flow` (its checkpoint calls by position are LAYOUTS["flow"], which
the harness hands the checker): a version marker, a step, a short durable sleep,
a step the payload scripts, a wait for the event "go" whose data holds the run's
op (fed by the harness, or timed out: the workflow goes on either way), a last
step. Each step's side effect appends `step` (with ctx.step_attempt) and
`step_end` lines, and returns who ran it (lease epoch, step attempt); the
workflow appends `step_done` once ctx.step gave it the step's outcome, which the
platform answers only for a committed step (tests/fault/checker/wfmodel.py).

payload (flow): {op, ledger, mode, nap?, wait_s?, step_s?, slow_s?}
  mode ok     -> every step returns after `step_s` s (default 0.05)
       slow   -> `reserve` takes `slow_s` s (default 1: a fault lands inside it more often)
       flaky  -> `reserve` raises RetryableError on its first try: the activation fails and
                 the next one runs it again (step attempt 2)
       fatal  -> `reserve` raises FatalError, which the workflow catches and goes on
       crash  -> the sandbox dies inside `reserve` on its first try
"""

import json
import os
import time

from ratchet import FatalError, RetryableError, RetryPolicy, WorkflowVersionError, task, workflow

FAST = RetryPolicy(max_attempts=5, base="100ms", cap="400ms")
# Activations that fail for a fault (a crash, an unreachable platform) use attempts; suspensions do not.
WF_RETRIES = RetryPolicy(max_attempts=8, base="100ms", cap="400ms")
LAYOUTS = {"flow": [["v", "VERSION"], ["charge", "STEP"], ["nap", "SLEEP"], ["reserve", "STEP"], ["go", "WAIT"],
                    ["ship", "STEP"]]}
# What of a run's payload its wait's match holds (the checker rebuilds the match from it).
EVENT_MATCH = {"go": ["op"]}


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


@workflow(retries=WF_RETRIES, timeout="30s")
def flow(ctx, payload):
    """Steps around a durable sleep and a wait for the harness's event (LAYOUTS["flow"])."""
    out = {"op": payload.get("op"), "steps": {}}
    ctx.version("v", latest=1)
    out["steps"]["1"] = _checkpoint(ctx, payload, 1, "charge")
    ctx.sleep("nap", seconds=float(payload.get("nap", 0.3)))
    out["steps"]["3"] = _checkpoint(ctx, payload, 3, "reserve")
    try:
        out["event"] = ctx.wait_for_event("go", match={"op": payload.get("op")},
                                          timeout=float(payload.get("wait_s", 2.5)))
    except TimeoutError:
        out["event"] = None
    out["steps"]["5"] = _checkpoint(ctx, payload, 5, "ship")
    return out


def _checkpoint(ctx, payload, position, name):
    """ctx.step, then a `step_done` line: the platform answered the step's committed outcome."""
    try:
        value = ctx.step(name, _effect, ctx, payload, position, name)
    except WorkflowVersionError:
        raise  # the code no longer matches the log: the run must fail
    except FatalError:  # (StepFailed on later activations)
        _ledger(payload, ctx, "step_done", position=position, name=name, outcome="fatal")
        return None
    _ledger(payload, ctx, "step_done", position=position, name=name, outcome="ok",
            result_epoch=value.get("lease_epoch"), result_attempt=value.get("step_attempt"))
    return value


def _effect(ctx, payload, position, name):
    """A step's side effect: recorded, then scripted (only `reserve` follows the mode)."""
    _ledger(payload, ctx, "step", position=position, name=name, step_attempt=ctx.step_attempt)
    mode = payload.get("mode", "ok") if name == "reserve" else "ok"
    first = ctx.step_attempt < 2
    if mode == "crash" and first:
        os._exit(3)
    if mode == "flaky" and first:
        _ledger(payload, ctx, "step_end", position=position, name=name, step_attempt=ctx.step_attempt,
                outcome="raise")
        raise RetryableError(f"step {name}: try {ctx.step_attempt} fails on purpose")
    if mode == "fatal":
        _ledger(payload, ctx, "step_end", position=position, name=name, step_attempt=ctx.step_attempt,
                outcome="fatal")
        raise FatalError(f"step {name} fails fatally on purpose")
    time.sleep(float(payload.get("slow_s", 1.0)) if mode == "slow" else float(payload.get("step_s", 0.05)))
    _ledger(payload, ctx, "step_end", position=position, name=name, step_attempt=ctx.step_attempt, outcome="ok")
    return {"position": position, "name": name, "lease_epoch": ctx.lease_epoch, "step_attempt": ctx.step_attempt}
