"""The workflow cells (loadtest/workflows.py) for a peer, in its round-1 turn:

  workflow_run_idle  worker running, one run of K no-op steps at a time
  (worker stopped)
  workflow_steps     N runs started, then the worker started with the peer's workflow
                     settings (Peer.workflow_env) until every run reached its last line
"""

from __future__ import annotations

import asyncio
import time

from loadtest import cpu, loadgen, workflows
from loadtest.peers.cells import PeerBench
from loadtest.peers.probe import ProbeFile
from loadtest.workflows import WorkflowPlan

STARTERS = 32  # concurrent start calls while the N runs are started


async def wait_probes(probes: ProbeFile, seen: dict[str, float], want: list[str], timeout_s: float,
                      poll_s: float = 0.002, alive=None) -> dict[str, float]:
    """Read the probe file into `seen` until every key of `want` is there or timeout_s passes;
    `alive()` (a worker's poll) ends the wait early with an error when it says the worker died."""
    deadline = time.monotonic() + timeout_s
    missing = set(want) - set(seen)
    while missing and time.monotonic() < deadline:
        await asyncio.sleep(poll_s)
        for k, t in probes.read_new().items():
            seen.setdefault(k, t)
        missing -= set(seen)
        if alive is not None and not alive():
            raise RuntimeError("the worker died while the workflow cell waited for its runs")
    return seen


async def idle(b: PeerBench, p: WorkflowPlan) -> None:
    """One run at a time on an idle worker: start call -> last line, and per step."""
    peer = b.peer
    if peer.worker is None:
        peer.start_worker()
        await peer.wait_ready()
    samples, seen = workflows.IdleSamples(), {}
    t0, cpu_a = time.monotonic(), cpu.take(peer.cpu_roots())
    for i in range(p.samples):
        key = f"wi{b.round}-{i}-{time.time_ns()}"
        sent = time.time()
        await peer.start_run(i, workflows.payload(key, p.steps, i))
        await wait_probes(peer.probes, seen, [f"{key}:e"], p.sample_timeout_s)
        samples.add(sent, seen, key, p.steps)
        await asyncio.sleep(0.05)
    cpu_ms = cpu.diff_ms(cpu_a, cpu.take(peer.cpu_roots()))
    c = b.cell("workflow_run_idle", b.params(steps=p.steps, samples=p.samples), rate=None, unit="",
               n=len(samples.run_ms), wall=time.monotonic() - t0, latency=samples.run_ms, cpu_ms=cpu_ms,
               notes=f"latency = the workflow's last line - just before the start call, one run of {p.steps} "
                     "no-op steps at a time; step_ms = (last line - first line) / steps; CPU per run")
    c.extra.update(samples.extra())
    c.extra["cpu_ms_per_step"] = cpu.per_task(cpu_ms, len(samples.run_ms) * p.steps)
    c.extra["workflow_note"] = peer.workflow_note
    b.record(c)


async def steps(b: PeerBench, p: WorkflowPlan) -> float:
    """N runs started on a stopped worker, then drained: steps/s between the probes; commits and
    WAL per step over the whole cell (starts included)."""
    peer = b.peer
    peer.stop_worker()
    keys = [f"wt{b.round}-{i}-{time.time_ns()}" for i in range(p.runs)]

    async def go():
        res = await loadgen.closed_loop_fn(
            lambda n: peer.start_run(n, workflows.payload(keys[n], p.steps, n)), STARTERS, p.limit_s,
            max_tasks=p.runs)
        if res.acked < p.runs:
            raise RuntimeError(f"started {res.acked} of {p.runs} runs: {dict(res.errors)}")
        peer.start_worker(dict(peer.workflow_env))
        seen = await wait_probes(peer.probes, {}, [f"{k}:e" for k in keys], p.limit_s, poll_s=0.05,
                                 alive=lambda: peer.worker is not None and peer.worker.poll() is None)
        b.mark_cpu_end()
        peer.stop_worker()
        return res, seen
    (res, seen), d, cpu_ms, wall = await b.measure(go)
    t = workflows.throughput(seen, keys, p.steps)
    c = b.cell("workflow_steps", b.params(runs=p.runs, steps=p.steps), rate=t.rate, unit="steps/s",
               n=t.finished * p.steps, wall=t.span_s, d=d, cpu_ms=cpu_ms,
               notes="rate = runs x steps / (last run's last line - first run's first line); commits, WAL "
                     "and CPU per step over the whole cell (starts, worker start, steps, completions)")
    c.extra.update({"runs_finished": t.finished, "runs_started": t.started, "start_calls_s": round(res.wall_s, 3),
                    "wall_s_with_starts": round(wall, 2), "workflow_note": peer.workflow_note,
                    "worker_env": dict(peer.workflow_env)})
    b.record(c)
    return t.rate


async def turn(b: PeerBench, p: WorkflowPlan) -> None:
    """Both cells, each guarded (a failure is a failed cell, the turn goes on)."""
    if not b.peer.supports_workflows:
        return
    await b.guarded("workflow_run_idle", b.params(steps=p.steps), lambda: idle(b, p))
    await b.guarded("workflow_steps", b.params(runs=p.runs, steps=p.steps), lambda: steps(b, p))
