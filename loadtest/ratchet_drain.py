"""The drain cells: a backlog enqueued while no worker could poll, then the
host agent started on it.

The rate uses the platform's own timings, read from the shards: tasks that
started after the drain began, from the first started_at to the last
finished_at. Wall-clock figures (including the host agent's start-up and
sandbox spawn) are kept beside it.
"""

from __future__ import annotations

import asyncio
import time

from loadtest import dbstats, loadgen, profiling
from loadtest.ratchet_cells import Q, Bench


async def _top_up(b: Bench, want: int) -> int:
    """Make sure at least `want` tasks are waiting; returns the backlog."""
    backlog = await b.unfinished()
    if backlog < want:
        res = await loadgen.batches(b.gw, 1000, 2, want - backlog)
        if res.errors:
            raise RuntimeError(f"could not preload the backlog: {dict(res.errors)}")
        backlog = await b.unfinished()
    return backlog


async def _wait_drained(b: Bench, limit_s: float) -> int:
    """Poll (every 0.5 s) until no task is unfinished or limit_s passes; returns what is left."""
    deadline = time.monotonic() + limit_s
    left = await b.unfinished()
    while left and time.monotonic() < deadline:
        await asyncio.sleep(0.5)
        left = await b.unfinished()
    return left


async def _summary(b: Bench, since) -> dict:
    """Tasks that started at or after `since`: counts and first start / last finish."""
    b.probe_queries += len(b.shards)
    rows = await asyncio.gather(*(c.fetchrow(Q["task_drain_summary"], since, timeout=60)
                                  for c in b.shards.values()))
    starts = [r["first_start"] for r in rows if r["first_start"] is not None]
    ends = [r["last_finish"] for r in rows if r["last_finish"] is not None]
    ok = sum(int(r["succeeded"]) for r in rows)
    span = (max(ends) - min(starts)).total_seconds() if starts and ends else 0.0
    return {"succeeded": ok, "other": sum(int(r["other"]) for r in rows),
            "attempts": sum(int(r["attempts"] or 0) for r in rows), "span_s": span,
            "per_shard": [int(r["succeeded"]) for r in rows], "rate": ok / span if span > 0 else 0.0}


async def cell_drain(b: Bench, min_tasks: int, limit_s: float) -> float:
    """Drain the whole backlog (at least min_tasks); returns tasks/s."""
    backlog = await _top_up(b, min_tasks)
    since = await b.shard_clock()
    b.run.say(f"drain: {backlog} tasks waiting; starting the host agent")

    async def go():
        await dbstats.statements_reset(b.admin)
        t0 = time.monotonic()
        await b.pt.start_hostagent()
        serving = time.monotonic() - t0
        left = await _wait_drained(b, limit_s)
        return serving, left
    (serving, left), d, cpu_ms, wall = await b.measure(go)
    s = await _summary(b, since)
    top = await dbstats.statements_top(b.admin, b.dbs, s["succeeded"])
    b.run.statements_md = dbstats.statements_markdown(top, s["succeeded"], s["span_s"])
    capacity = b.pt.overrides.get("hostagent", {}).get("capacity", 8)
    c = b.cell("drain", {"backlog": backlog, "hostagent_capacity": capacity}, rate=s["rate"], unit="tasks/s",
               n=s["succeeded"], wall=s["span_s"], d=d, cpu_ms=cpu_ms,
               notes="rate = succeeded / (last finished_at - first started_at) from the shards")
    c.extra.update({"wall_s_from_hostagent_start": round(wall, 2), "hostagent_serving_after_s": round(serving, 2),
                    "wall_rate": round(s["succeeded"] / wall, 1) if wall else None, "left_unfinished": left,
                    "not_succeeded": s["other"], "attempts": s["attempts"], "succeeded_per_shard": s["per_shard"],
                    "top_statements": top})
    if left:
        c.notes += f"; {left} tasks still unfinished after {limit_s:g}s (rate covers those that finished)"
    b.run.record(c)
    return s["rate"]


async def _wait_started(b: Bench, backlog: int, limit_s: float) -> None:
    """Wait until the drain is in its stride (2 % done), so the profile skips sandbox start-up."""
    deadline = time.monotonic() + limit_s
    while time.monotonic() < deadline and await b.unfinished() > backlog * 0.98:
        await asyncio.sleep(0.2)


async def cell_profiled_drain(b: Bench, drain_rate: float, seconds: float, native: bool = False) -> None:
    """A second backlog sized to outlast the profile, drained while py-spy records every service."""
    await b.pt.stop_hostagent()
    want = int(min(40_000, max(2_000, drain_rate * (seconds + 8))))
    backlog = await _top_up(b, want)
    since = await b.shard_clock()
    out_dir = b.run.log.path.parent / f"{b.run.log.run_id}-pyspy"
    rec = profiling.Recorder(b.run.registry, out_dir, rate=50, native=native)
    t0 = time.monotonic()
    await b.pt.start_hostagent()
    await _wait_started(b, backlog, 15.0)
    rec.start(b.pt.service_pids(), seconds)
    left = await _wait_drained(b, seconds * 4 + 30)
    wall = time.monotonic() - t0
    profiles, errors = await asyncio.to_thread(rec.finish, seconds + 30)
    s = await _summary(b, since)
    b.run.profile_md = profiling.markdown(profiles, seconds, rec.rate, native) + [
        f"- py-spy error: {e}" for e in errors]
    c = b.cell("drain_profiled", {"backlog": backlog}, rate=s["rate"], unit="tasks/s", n=s["succeeded"],
               wall=s["span_s"], notes=f"drained while py-spy sampled every service for {seconds:g}s "
                                       "(not used for the bar; shows the profiler's overhead)")
    c.extra.update({"wall_s": round(wall, 2), "left_unfinished": left, "raw_profiles": str(out_dir),
                    "profiles": [p.summary() for p in profiles], "errors": errors})
    b.run.record(c)
