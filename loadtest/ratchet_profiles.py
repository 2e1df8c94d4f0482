"""The profiled cells: where the time goes while the platform drains and
while it takes enqueues. Their rates are recorded (they show the profiler's
overhead) but never used for the bar.

py-spy samples every service from outside (profiling.py) and
pg_stat_statements says which SQL the shards spent their time on.
"""

from __future__ import annotations

import asyncio
import time

from loadtest import dbstats, loadgen, profiling
from loadtest.ratchet_cells import Bench
from loadtest.ratchet_drain import summary, top_up


async def _wait_started(b: Bench, backlog: int, limit_s: float) -> None:
    """Wait until the drain is in its stride (2 % done), so the profile skips sandbox start-up."""
    deadline = time.monotonic() + limit_s
    while time.monotonic() < deadline and await b.unfinished() > backlog * 0.98:
        await asyncio.sleep(0.2)


async def cell_profiled_drain(b: Bench, drain_rate: float, seconds: float, native: bool = False) -> None:
    """A second backlog sized to outlast the profile, drained while py-spy records every service."""
    await b.pt.stop_hostagent()
    want = int(min(40_000, max(2_000, drain_rate * (seconds + 15))))
    backlog = await top_up(b, want)
    since = await b.shard_clock()
    out_dir = b.run.log.path.parent / f"{b.run.log.run_id}-pyspy"
    rec = profiling.Recorder(b.run.registry, out_dir, rate=50, native=native)
    t0 = time.monotonic()
    await b.pt.start_hostagent()
    await _wait_started(b, backlog, 15.0)
    rec.start(b.pt.service_pids(), seconds)
    profiles, errors = await asyncio.to_thread(rec.finish, seconds + 30)
    until = await b.shard_clock()
    left = await b.unfinished()
    await b.pt.stop_hostagent()
    wall = time.monotonic() - t0
    s = await summary(b, since, until)
    b.run.sections.append(("Profile during the drain (py-spy)", profiling.markdown(
        profiles, seconds, rec.rate, native, ", starting once the drain was 2 % done (sandboxes already up)")
        + [f"- py-spy error: {e}" for e in errors]))
    c = b.cell("drain_profiled", {"backlog": backlog}, rate=s["rate"], unit="tasks/s", n=s["succeeded"],
               wall=s["span_s"], notes=f"drained while py-spy sampled every service for {seconds:g}s "
                                       "(not used for the bar; shows the profiler's overhead)")
    c.extra.update({"wall_s": round(wall, 2), "left_unfinished": left, "raw_profiles": str(out_dir),
                    "profiles": [p.summary() for p in profiles], "errors": errors})
    b.run.record(c)


async def cell_profiled_enqueue(b: Bench, seconds: float, producers: int = 8, native: bool = False) -> None:
    """Closed-loop enqueue (workers stopped) under py-spy and pg_stat_statements: the ack path's costs."""
    await b.pt.stop_hostagent()
    await dbstats.statements_reset(b.admin)
    out_dir = b.run.log.path.parent / f"{b.run.log.run_id}-pyspy-enqueue"
    rec = profiling.Recorder(b.run.registry, out_dir, rate=50, native=native)
    rec.start({k: v for k, v in b.pt.service_pids().items() if k != "hostagent"}, seconds)
    res = await loadgen.closed_loop(b.gw, producers, seconds + 1)
    profiles, errors = await asyncio.to_thread(rec.finish, seconds + 30)
    top = await dbstats.statements_top(b.admin, b.dbs, res.acked)
    b.run.sections.append(("Postgres statements during enqueue",
                           dbstats.statements_markdown(top, res.acked, res.wall_s, f"{producers}-producer enqueue")))
    b.run.sections.append(("Profile during enqueue (py-spy)", profiling.markdown(
        profiles, seconds, rec.rate, native, f", {producers} producers in a closed loop, workers stopped")
        + [f"- py-spy error: {e}" for e in errors]))
    c = b.cell("enqueue_profiled", {"producers": producers}, rate=res.rate, unit="tasks/s", n=res.acked,
               wall=res.wall_s, latency=res.latency_ms,
               notes="enqueued while py-spy sampled gateway, history and dispatcher (not used for the bar)")
    c.extra.update({"profiles": [p.summary() for p in profiles], "top_statements": top, "errors": errors})
    b.run.record(c)
