"""Ratchet's workflow cells (loadtest/workflows.py) on the platform the task cells run on:
the no-op app's `steps` workflow (K `ctx.step` calls of a no-op function), started through the
gateway's WorkflowService over gRPC with the app's API key.

Order inside ratchet_cells.run_cells, right after the idle schedule-to-start (host agent up,
nothing queued):
  workflow_run_idle      one run at a time
  workflow_steps         host agent stopped, N runs started, host agent started until every run
                         reached its last line; commits and WAL per step over the whole cell
  workflow_profiled      (full mode, unless --no-profile) a bigger set of runs drained while
                         py-spy samples every service and pg_stat_statements counts the SQL
The host agent is left running; run_cells stops it for the enqueue cells.
"""

from __future__ import annotations

import asyncio
import os
import pathlib
import time

from google.protobuf import json_format, struct_pb2

from loadtest import cpu, dbstats, loadgen, profiling, workflows
from loadtest.peers.probe import ProbeFile
from loadtest.peers.workflow_cells import STARTERS, wait_probes
from loadtest.ratchet_cells import Bench, Q, guarded
from loadtest.workflows import WorkflowPlan
from ratchet.api.workflows.v1 import workflows_pb2, workflows_pb2_grpc
from ratchet.libs.rpc.client import aio_channel


class Runs:
    """Starts runs of the `steps` workflow (StartWorkflow, as the SDK's start_workflow sends it)
    and owns the probe file the sandbox appends to (a folder any uid may write: the sandbox may
    run as another user)."""

    def __init__(self, target: str, api_key: str, folder: pathlib.Path):
        self.channel = aio_channel(target)
        self.stub = workflows_pb2_grpc.WorkflowServiceStub(self.channel)
        self.metadata = (("authorization", f"Bearer {api_key}"),)
        folder.mkdir(parents=True, exist_ok=True)
        os.chmod(folder, 0o777)
        self.probes = ProbeFile(str(folder / "probe.log"))

    async def start(self, key: str, steps: int, n: int = 0) -> str:
        body = {**workflows.payload(key, steps, n), "probe_file": self.probes.path}
        req = workflows_pb2.StartWorkflowRequest(workflow_type=workflows.WORKFLOW_TYPE,
                                                 input=json_format.ParseDict(body, struct_pb2.Value()))
        resp = await self.stub.StartWorkflow(req, timeout=30, metadata=self.metadata)
        return resp.workflow_id

    async def start_many(self, keys: list[str], steps: int, limit_s: float) -> loadgen.LoadResult:
        """Every key's run, STARTERS calls at a time; raises unless all were started."""
        res = await loadgen.closed_loop_fn(lambda n: self.start(keys[n], steps, n), STARTERS, limit_s,
                                           max_tasks=len(keys))
        if res.acked < len(keys):
            raise RuntimeError(f"started {res.acked} of {len(keys)} runs: {dict(res.errors)}")
        return res

    async def close(self) -> None:
        await self.channel.close()


async def summary(b: Bench, since) -> dict:
    """The shards' view of the runs created since `since`: states, activations, steps logged."""
    b.probe_queries += len(b.shards)
    rows = await asyncio.gather(*(c.fetchrow(Q["workflow_run_summary"], workflows.WORKFLOW_TYPE, since,
                                             timeout=60) for c in b.shards.values()))
    starts = [r["first_start"] for r in rows if r["first_start"] is not None]
    ends = [r["last_finish"] for r in rows if r["last_finish"] is not None]
    return {"succeeded": sum(int(r["succeeded"]) for r in rows), "other": sum(int(r["other"]) for r in rows),
            "activations": sum(int(r["attempts"] or 0) for r in rows),
            "steps_logged": sum(int(r["steps_logged"]) for r in rows),
            "shard_span_s": round((max(ends) - min(starts)).total_seconds(), 3) if starts and ends else None}


async def cell_idle(b: Bench, runs: Runs, p: WorkflowPlan) -> None:
    """One run at a time, host agent up: start call -> last line, and per step."""
    samples, seen = workflows.IdleSamples(), {}
    t0, cpu_a = time.monotonic(), cpu.take(b.pt.cpu_roots())
    for i in range(p.samples):
        key = f"wi-{i}-{time.time_ns()}"
        sent = time.time()
        await runs.start(key, p.steps, i)
        await wait_probes(runs.probes, seen, [f"{key}:e"], p.sample_timeout_s)
        samples.add(sent, seen, key, p.steps)
        await asyncio.sleep(0.05)
    cpu_ms = cpu.diff_ms(cpu_a, cpu.take(b.pt.cpu_roots()), children_label={"hostagent": "sandboxes"})
    c = b.cell("workflow_run_idle", {"steps": p.steps, "samples": p.samples}, rate=None, unit="",
               n=len(samples.run_ms), wall=time.monotonic() - t0, latency=samples.run_ms, cpu_ms=cpu_ms,
               notes=f"latency = the workflow's last line - just before StartWorkflow, one run of {p.steps} "
                     "no-op steps at a time; step_ms = (last line - first line) / steps; CPU per run")
    c.extra.update(samples.extra())
    c.extra["cpu_ms_per_step"] = cpu.per_task(cpu_ms, len(samples.run_ms) * p.steps)
    b.run.record(c)


async def cell_steps(b: Bench, runs: Runs, p: WorkflowPlan) -> float:
    """N runs started with the host agent stopped, then drained; steps/s between the probes."""
    await b.pt.stop_hostagent()
    keys = [f"wt-{i}-{time.time_ns()}" for i in range(p.runs)]
    since = await b.shard_clock()

    async def go():
        res = await runs.start_many(keys, p.steps, p.limit_s)
        await b.pt.start_hostagent()
        seen = await wait_probes(runs.probes, {}, [f"{k}:e" for k in keys], p.limit_s, poll_s=0.05)
        b.mark_cpu_end()
        return res, seen
    (res, seen), d, cpu_ms, wall = await b.measure(go)
    t = workflows.throughput(seen, keys, p.steps)
    s = await summary(b, since)
    c = b.cell("workflow_steps", {"runs": p.runs, "steps": p.steps}, rate=t.rate, unit="steps/s",
               n=t.finished * p.steps, wall=t.span_s, d=d, cpu_ms=cpu_ms,
               notes="rate = runs x steps / (last run's last line - first run's first line); commits, WAL "
                     "and CPU per step over the whole cell (starts, host agent start, steps, completions)")
    c.extra.update({"runs_finished": t.finished, "runs_started": t.started, "start_calls_s": round(res.wall_s, 3),
                    "wall_s_with_starts": round(wall, 2), **s})
    if s["succeeded"] != p.runs or s["steps_logged"] != p.runs * p.steps:
        c.notes += f"; the shards hold {s['succeeded']} succeeded runs and {s['steps_logged']} steps"
    b.run.record(c)
    return t.rate


async def cell_profiled(b: Bench, runs: Runs, p: WorkflowPlan, rate: float, seconds: float,
                        native: bool = False) -> None:
    """Runs enough to outlast `seconds` of py-spy on every service (sandboxes under the host
    agent), with pg_stat_statements over the same drain: where a step's time goes."""
    await b.pt.stop_hostagent()
    n = int(min(3000, max(p.runs, rate * (seconds + 10) / p.steps)))
    keys = [f"wp-{i}-{time.time_ns()}" for i in range(n)]
    await runs.start_many(keys, p.steps, 120.0)
    await dbstats.statements_reset(b.admin)
    out_dir = b.run.log.path.parent / f"{b.run.log.run_id}-pyspy-workflows"
    rec = profiling.Recorder(b.run.registry, out_dir, rate=50, native=native)
    await b.pt.start_hostagent()
    seen = await wait_probes(runs.probes, {}, [f"{k}:b" for k in keys[: max(1, n // 50)]], 30.0, poll_s=0.05)
    rec.start(b.pt.service_pids(), seconds)
    profiles, errors = await asyncio.to_thread(rec.finish, seconds + 30)
    seen = await wait_probes(runs.probes, seen, [f"{k}:e" for k in keys], p.limit_s, poll_s=0.1)
    t = workflows.throughput(seen, keys, p.steps)
    top = await dbstats.statements_top(b.admin, b.dbs, max(1, t.finished * p.steps))
    b.run.sections.append(("Postgres statements during the workflow drain", dbstats.statements_markdown(
        top, max(1, t.finished * p.steps), t.span_s, f"{n} runs of {p.steps} no-op steps (per task = per step)")))
    b.run.sections.append(("Profile during the workflow drain (py-spy)", profiling.markdown(
        profiles, seconds, rec.rate, native, f", {n} runs of {p.steps} no-op steps draining")
        + [f"- py-spy error: {e}" for e in errors]))
    c = b.cell("workflow_profiled", {"runs": n, "steps": p.steps}, rate=t.rate, unit="steps/s",
               n=t.finished * p.steps, wall=t.span_s,
               notes=f"drained while py-spy sampled every service for {seconds:g}s (shows the profiler's overhead)")
    c.extra.update({"profiles": [pr.summary() for pr in profiles], "top_statements": top, "errors": errors,
                    "raw_profiles": str(out_dir)})
    b.run.record(c)


async def run_cells(b: Bench, p: WorkflowPlan | None = None) -> None:
    """Every workflow cell, each guarded (the host agent is running unless a cell failed while it
    was stopped; run_cells stops it next anyway)."""
    p = p or b.run.workflow_plan
    ep = b.pt.endpoints
    runs = Runs(ep["grpc"], ep["api_key"], pathlib.Path(b.run.pg.root) / "workflow-probe")
    try:
        await guarded(b, "workflow_run_idle", {"steps": p.steps}, lambda: cell_idle(b, runs, p))
        rate = await guarded(b, "workflow_steps", {"runs": p.runs, "steps": p.steps},
                             lambda: cell_steps(b, runs, p))
        # Once per run (round 1): --only workflows --rounds N repeats the rest.
        if rate and not b.run.quick and not b.run.args.no_profile and b.round is None:
            await guarded(b, "workflow_profiled", {"steps": p.steps}, lambda: cell_profiled(
                b, runs, p, rate, seconds=15.0, native=b.run.args.native))
    finally:
        await runs.close()
