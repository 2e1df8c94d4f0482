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

from loadtest import dbstats, loadgen
from loadtest.ratchet_cells import Bench, Q


async def top_up(b: Bench, want: int) -> int:
    """Make sure at least `want` tasks are waiting; returns the backlog."""
    backlog = await b.unfinished()
    if backlog < want:
        res = await loadgen.batches(b.gw, 1000, 2, want - backlog)
        if res.errors:
            raise RuntimeError(f"could not preload the backlog: {dict(res.errors)}")
        backlog = await b.unfinished()
    return backlog


async def wait_drained(b: Bench, limit_s: float) -> int:
    """Poll (every 0.5 s) until no task is unfinished or limit_s passes; returns what is left."""
    deadline = time.monotonic() + limit_s
    left = await b.unfinished()
    while left and time.monotonic() < deadline:
        await asyncio.sleep(0.5)
        left = await b.unfinished()
    return left


async def summary(b: Bench, since, until) -> dict:
    """Tasks that started at or after `since` and succeeded by `until`: counts, first start, last finish."""
    b.probe_queries += len(b.shards)
    rows = await asyncio.gather(*(c.fetchrow(Q["task_drain_summary"], since, until, timeout=60)
                                  for c in b.shards.values()))
    starts = [r["first_start"] for r in rows if r["first_start"] is not None]
    ends = [r["last_finish"] for r in rows if r["last_finish"] is not None]
    ok = sum(int(r["succeeded"]) for r in rows)
    span = (max(ends) - min(starts)).total_seconds() if starts and ends else 0.0
    return {"succeeded": ok, "other": sum(int(r["other"]) for r in rows),
            "attempts": sum(int(r["attempts"] or 0) for r in rows), "span_s": span,
            "per_shard": [int(r["succeeded"]) for r in rows], "rate": ok / span if span > 0 else 0.0}


async def cell_drain(b: Bench, min_tasks: int, limit_s: float) -> float:
    """Drain the backlog (at least min_tasks) for at most limit_s; returns tasks/s.

    When the limit cuts the drain short the host agent is stopped right away,
    so the statistics settle on a quiet platform, and the rate covers the
    tasks that finished inside the window (the backlog never ran dry in it).
    """
    backlog = await top_up(b, min_tasks)
    since = await b.shard_clock()
    b.run.say(f"drain: {backlog} tasks waiting; starting the host agent (at most {limit_s:g}s)")

    async def go():
        await dbstats.statements_reset(b.admin)
        t0 = time.monotonic()
        await b.pt.start_hostagent()
        serving = time.monotonic() - t0
        left = await wait_drained(b, limit_s)
        until = await b.shard_clock()
        b.mark_cpu_end()
        if left:
            await b.pt.stop_hostagent()
        return serving, left, until
    (serving, left, until), d, cpu_ms, wall = await b.measure(go)
    s = await summary(b, since, until)
    top = await dbstats.statements_top(b.admin, b.dbs, s["succeeded"])
    b.run.sections.append(("Postgres statements during the drain",
                           dbstats.statements_markdown(top, s["succeeded"], s["span_s"], "the drain")))
    capacity = b.pt.overrides.get("hostagent", {}).get("capacity", _default_capacity())
    c = b.cell("drain", {"backlog": backlog, "hostagent_capacity": capacity}, rate=s["rate"], unit="tasks/s",
               n=s["succeeded"], wall=s["span_s"], d=d, cpu_ms=cpu_ms,
               notes="rate = succeeded / (last finished_at - first started_at) from the shards")
    c.extra.update({"requested_backlog": min_tasks,  # the backlog is what earlier cells left, at least this
                    "wall_s_from_hostagent_start": round(wall, 2), "hostagent_serving_after_s": round(serving, 2),
                    "wall_rate": round(s["succeeded"] / wall, 1) if wall else None, "left_unfinished": left,
                    "not_succeeded": s["other"], "attempts": s["attempts"], "succeeded_per_shard": s["per_shard"],
                    "top_statements": top})
    if left:
        c.notes += (f"; stopped after {limit_s:g}s with {left} still waiting: a steady-state window, "
                    "amplification and CPU are per task finished in it")
    b.run.record(c)
    return s["rate"]


def _default_capacity() -> int:
    """The host agent's own default task slots (what the drain ran with unless overridden)."""
    import dataclasses

    from ratchet.services.hostagent.config import HostAgentConfig
    return next(f.default for f in dataclasses.fields(HostAgentConfig) if f.name == "capacity")
