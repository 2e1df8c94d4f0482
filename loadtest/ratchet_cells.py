"""Ratchet's cells on the bench's Postgres, 4 shards, the no-op app deployed.

Order (each cell leaves the state the next one needs):
  idle                    the platform's own background cost, nothing enqueued
  schedule_to_start_idle  one task at a time on an idle queue, created -> started
  workflow_*              the workflow cells on the same idle platform (ratchet_workflows.py)
  (host agent stopped: enqueued tasks stay put and become the drain's backlog)
  enqueue_single          closed loop, N concurrent producers, one task per call (SDK AsyncClient:
                          calls on its enqueue stream)
  enqueue_single_unary    the same over unary EnqueueTask, 32 producers
  enqueue_single_rest     the same over REST POST /v1/tasks (idempotency keys), 32 producers
  enqueue_ack_open_loop   Poisson arrivals at 50 % and 75 % (full: also 25 %) of the best enqueue_single rate
  drain                   host agent started on the whole backlog; first start -> last finish
  drain_profiled          a second backlog drained under py-spy (ratchet_profiles.py)
  enqueue_profiled        closed-loop enqueue under py-spy and pg_stat_statements
  (full mode: ratchet_rounds.first_round_extras)
  enqueue_batch           100 and 1,000 tasks per call, each for a time (sizes.BATCH_SECONDS_*),
                          host agent stopped; last, as the 100k+ tasks they leave are nobody's backlog
"""

from __future__ import annotations

import asyncio
import pathlib
import time
import traceback
from collections.abc import Awaitable, Callable
from typing import Any

import asyncpg

from loadtest import cpu, dbstats, loadgen, sizes
from loadtest.platform_run import PlatformUnderTest
from loadtest.results import Cell
from ratchet.api.tasks.v1 import tasks_pb2
from ratchet.libs.pg.queries import load_queries

Q = load_queries(pathlib.Path(__file__).parent / "sql" / "ratchet_probe.sql")
CONTROL_DB = "ratchet_control"
# Pooled platform connections stay open, so their last second of statistics
# can take up to 10 s to reach pg_stat_database (see dbstats).
PLATFORM_SETTLE_S = 10.5
TERMINAL = {tasks_pb2.TASK_STATE_SUCCEEDED, tasks_pb2.TASK_STATE_FAILED, tasks_pb2.TASK_STATE_CANCELED,
            tasks_pb2.TASK_STATE_EXPIRED}


class Bench:
    """What every Ratchet cell needs: the run, the platform, a load generator,
    an admin connection for counters and one read-only connection per shard."""

    def __init__(self, run, pt: PlatformUnderTest, gw: loadgen.Gateway, admin: asyncpg.Connection,
                 shards: dict[str, asyncpg.Connection]):
        self.run, self.pt, self.gw, self.admin, self.shards = run, pt, gw, admin, shards
        self.probe_queries = 0  # our own read-only commits on shard databases
        self.last_control_commits = 0
        self._cpu_end: cpu.CpuSnapshot | None = None
        # Set by ratchet_rounds: later rounds tag their cells with the round; the shard
        # sweep adds its shard count and records under its own workload names.
        self.round: int | None = None
        self.extra_params: dict = {}
        self.workload_map: dict[str, str] = {}

    def mark_cpu_end(self) -> None:
        """Close the CPU window now (before stopping a process whose CPU must count)."""
        self._cpu_end = cpu.take(self.pt.cpu_roots())

    @property
    def dbs(self) -> list[str]:
        return list(self.shards)

    async def shard_clock(self):
        conn = next(iter(self.shards.values()))
        self.probe_queries += 1
        return await conn.fetchval(Q["shard_clock_now"], timeout=10)

    async def _count(self, query: str) -> int:
        self.probe_queries += len(self.shards)
        counts = await asyncio.gather(*(c.fetchval(Q[query], timeout=30) for c in self.shards.values()))
        return sum(int(n) for n in counts)

    async def unfinished(self) -> int:
        """Tasks not yet terminal over all shards (the ENQUEUED count while there are any:
        a full count scans the table, and a probe must not slow the drain it watches)."""
        enqueued = await self._count("task_count_enqueued")
        return enqueued if enqueued else await self._count("task_count_unfinished")

    async def measure(self, fn: Callable[[], Awaitable[Any]], *, settle_s: float = PLATFORM_SETTLE_S):
        """Run fn between counter/CPU snapshots -> (result, Delta, cpu_ms, wall_s)."""
        await self.admin.execute("CHECKPOINT", timeout=60)
        probes0 = self.probe_queries
        snap_a = await dbstats.snapshot(self.admin)
        cpu_a = cpu.take(self.pt.cpu_roots())
        t0 = time.monotonic()
        self._cpu_end = None
        result = await fn()
        wall = time.monotonic() - t0
        cpu_b = self._cpu_end or cpu.take(self.pt.cpu_roots())
        snap_b = await dbstats.snapshot(self.admin)
        settled = await dbstats.settle(self.admin, self.dbs, min_wait_s=settle_s)
        d = dbstats.delta(snap_a, snap_b, self.dbs, settled)
        self.last_control_commits = dbstats.delta(snap_a, snap_b, [CONTROL_DB], settled).commits
        # Our own probes are read-only commits on the shards: take them out.
        d = dbstats.Delta(**{**d.__dict__, "commits": d.commits - (self.probe_queries - probes0)})
        cpu_ms = cpu.diff_ms(cpu_a, cpu_b, children_label={"hostagent": "sandboxes"})
        return result, d, cpu_ms, wall

    def cell(self, workload: str, params: dict, *, rate: float | None, unit: str, n: int, wall: float,
             d: dbstats.Delta | None = None, cpu_ms: dict | None = None, latency: list[float] | None = None,
             **kw: Any) -> Cell:
        params = {**params, **self.extra_params, **({"round": self.round} if self.round else {})}
        workload = self.workload_map.get(workload, workload)
        c = Cell(system="ratchet", workload=workload, params=params, rate=None if rate is None else round(rate, 1),
                 unit=unit, n=n, duration_s=round(wall, 2),
                 latency_ms=dbstats.percentiles(latency) if latency is not None else None,
                 cpu_ms_per_task=cpu.per_task(cpu_ms or {}, n), **kw)
        if d is not None:
            c.apply_amplification(d.per_task(n))
            c.extra.setdefault("commits_by_db", {**d.commits_by_db, CONTROL_DB: self.last_control_commits})
            c.extra.setdefault("control_commits_per_task",
                               round(self.last_control_commits / n, 3) if n else None)
        return c


async def guarded(b: Bench, workload: str, params: dict, fn: Callable[[], Awaitable[Any]]) -> Any:
    """Run one cell; a failure is recorded as a failed cell and the run goes on."""
    try:
        return await fn()
    except (KeyboardInterrupt, SystemExit, asyncio.CancelledError):
        raise
    except Exception as e:  # noqa: BLE001 - one broken cell must not lose the others
        traceback.print_exc()
        b.run.record(Cell(system="ratchet", workload=workload, params=params, ok=False, error=repr(e)[:500]))
        return None


async def warmup(b: Bench, timeout: float = 90.0) -> float:
    """Enqueue one task and wait for SUCCEEDED: sandbox started, deployment cached."""
    t0 = time.monotonic()
    task_id = await b.gw.enqueue(b.gw.request(0))
    while time.monotonic() - t0 < timeout:
        t = await b.gw.get(task_id)
        if t.state in TERMINAL:
            if t.state != tasks_pb2.TASK_STATE_SUCCEEDED:
                raise RuntimeError(f"warm-up task ended {tasks_pb2.TaskState.Name(t.state)}: {t.error.message}")
            return time.monotonic() - t0
        await asyncio.sleep(0.1)
    raise RuntimeError(f"warm-up task not finished after {timeout:g}s: is the host agent running the app?")


async def cell_idle(b: Bench, seconds: float) -> None:
    """The platform's background cost with nothing to do: commits/s and CPU ms per second."""
    _, d, cpu_ms, wall = await b.measure(lambda: asyncio.sleep(seconds))
    window = wall + PLATFORM_SETTLE_S
    c = b.cell("idle", {}, rate=d.commits / window, unit="shard commits/s", n=round(wall), wall=wall,
               cpu_ms=cpu_ms, notes="cpu_ms_per_task here is CPU ms per second idle; commits/s over "
                                    "the window including the statistics settle")
    c.extra["write_xacts_per_s"] = round(d.write_xacts / wall, 2)
    c.extra["wal_bytes_per_s"] = round(d.wal_bytes / wall, 1)
    b.run.record(c)


def _ms_between(t: tasks_pb2.Task, a: str, z: str) -> float | None:
    if not (t.HasField(a) and t.HasField(z)):
        return None
    return (getattr(t, z).ToNanoseconds() - getattr(t, a).ToNanoseconds()) / 1e6


async def cell_schedule_to_start(b: Bench, samples: int, gap_s: float = 0.05) -> None:
    """One task at a time on an idle queue; the task's own created_at -> started_at."""
    s2s, e2e, sent, failed = [], [], [], 0
    t0 = time.monotonic()
    for i in range(samples):
        t_send = time.time()
        task_id = await b.gw.enqueue(b.gw.request(i))
        await asyncio.sleep(gap_s)
        deadline = time.monotonic() + 10
        t = await b.gw.get(task_id)
        while t.state not in TERMINAL and time.monotonic() < deadline:
            await asyncio.sleep(0.02)
            t = await b.gw.get(task_id)
        if t.state != tasks_pb2.TASK_STATE_SUCCEEDED:
            failed += 1
            continue
        s2s.append(_ms_between(t, "created_at", "started_at"))
        sent.append(t.started_at.ToNanoseconds() / 1e6 - t_send * 1000 if t.HasField("started_at") else None)
        e2e.append(_ms_between(t, "created_at", "finished_at"))
        await asyncio.sleep(gap_s)
    wall = time.monotonic() - t0
    c = b.cell("schedule_to_start_idle", {"samples": samples}, rate=None, unit="", n=len(s2s), wall=wall,
               latency=[x for x in s2s if x is not None],
               notes="latency = task.started_at - task.created_at (shard clock), one task in flight")
    c.extra["created_to_finished_ms"] = dbstats.percentiles([x for x in e2e if x is not None])
    # The peers' figure: handler start - just before the enqueue call (ratchet's started_at is the lease).
    c.extra["send_to_started_ms"] = dbstats.percentiles([x for x in sent if x is not None])
    c.extra["not_succeeded"] = failed
    b.run.record(c)


def _load_cell(b: Bench, workload: str, params: dict, res: loadgen.LoadResult, d, cpu_ms, wall) -> Cell:
    c = b.cell(workload, params, rate=res.rate, unit="tasks/s", n=res.acked, wall=res.wall_s,
               d=d, cpu_ms=cpu_ms, latency=res.latency_ms)
    c.extra.update({"calls": res.calls, "errors": dict(res.errors)})
    if res.errors:
        c.notes = f"errors: {dict(res.errors)}"
    return c


async def cell_enqueue_single(b: Bench, producers: int, seconds: float) -> float:
    """Closed-loop capacity; returns tasks/s."""
    res, d, cpu_ms, wall = await b.measure(lambda: loadgen.closed_loop(b.gw, producers, seconds))
    b.run.record(_load_cell(b, "enqueue_single", {"producers": producers}, res, d, cpu_ms, wall))
    return res.rate


async def cell_enqueue_single_unary(b: Bench, producers: int, seconds: float) -> None:
    """Closed-loop capacity over unary EnqueueTask (what a plain gRPC client pays, one call per
    task), next to enqueue_single's SDK stream."""
    ep = b.pt.endpoints
    gw = loadgen.Gateway(ep["grpc"], ep["api_key"], stream=False)
    try:
        await loadgen.closed_loop(gw, 4, 1.0)  # connect outside the measurement
        res, d, cpu_ms, wall = await b.measure(lambda: loadgen.closed_loop(gw, producers, seconds))
    finally:
        await gw.close()
    b.run.record(_load_cell(b, "enqueue_single_unary", {"producers": producers}, res, d, cpu_ms, wall))


async def cell_enqueue_single_rest(b: Bench, producers: int, seconds: float) -> None:
    """Closed-loop capacity over REST (POST /v1/tasks, JSON, an idempotency key per request as a
    client without the SDK would send; aiohttp, keep-alive): what a client in another
    language pays."""
    ep = b.pt.endpoints
    send, close = loadgen.rest_enqueue(ep["rest"], ep["api_key"], connections=producers)
    try:
        await loadgen.closed_loop_fn(send, 4, 1.0)  # connect outside the measurement
        res, d, cpu_ms, wall = await b.measure(lambda: loadgen.closed_loop_fn(send, producers, seconds))
    finally:
        await close()
    b.run.record(_load_cell(b, "enqueue_single_rest", {"producers": producers}, res, d, cpu_ms, wall))


async def cell_open_loop(b: Bench, capacity: float, fraction: float, seconds: float) -> None:
    """Ack latency with Poisson arrivals at fraction x capacity (latency from the scheduled send)."""
    rate = max(1.0, capacity * fraction)
    res, d, cpu_ms, wall = await b.measure(lambda: loadgen.open_loop(b.gw, rate, seconds))
    c = _load_cell(b, "enqueue_ack_open_loop", {"fraction": fraction, "target_rate": round(rate)},
                   res, d, cpu_ms, wall)
    c.extra.update({"capacity": round(capacity, 1), "dropped": res.dropped,
                    "send_lag_ms": dbstats.percentiles(res.send_lag_ms)})
    c.notes = (c.notes + "; " if c.notes else "") + f"offered {rate:.0f}/s, achieved {res.rate:.0f}/s"
    b.run.record(c)


async def cell_enqueue_batch(b: Bench, batch: int, producers: int, seconds: float, cap: int) -> None:
    # One call per producer first, not measured, as for every peer (peers/cells.enqueue_batch):
    # a first call's connection and statement set-up is not a rate.
    await loadgen.batches(b.gw, batch, producers, batch * producers)
    res, d, cpu_ms, wall = await b.measure(lambda: loadgen.batches(b.gw, batch, producers, cap, seconds=seconds))
    c = _load_cell(b, "enqueue_batch", {"batch": batch, "producers": producers}, res, d, cpu_ms, wall)
    c.extra.update({"seconds": seconds, "cap": cap})
    c.notes = ((c.notes + "; " if c.notes else "") + f"calls started for {seconds:g} s (at most {cap} tasks); "
               "latency is per call; after one unmeasured call per producer")
    b.run.record(c)


async def run_cells(b: Bench) -> None:
    """Every cell, in the order the module docstring gives."""
    from loadtest import ratchet_drain, ratchet_profiles, ratchet_workflows
    run, quick = b.run, b.run.quick
    run.say(f"warm-up task succeeded in {await warmup(b):.2f}s")
    if run.args.only == "workflows":  # (bench --only workflows: the workflow cells alone)
        return await ratchet_workflows.run_cells(b)
    await guarded(b, "idle", {}, lambda: cell_idle(b, 5.0 if quick else 15.0))
    samples = sizes.S2S_SAMPLES_QUICK if quick else sizes.S2S_SAMPLES_FULL
    await guarded(b, "schedule_to_start_idle", {}, lambda: cell_schedule_to_start(b, samples))
    # Workflows on the same idle platform, before any cell leaves a backlog behind.
    await ratchet_workflows.run_cells(b)
    await b.pt.stop_hostagent()
    rates = []
    for p in ((8, 32) if quick else (1, 8, 32)):
        r = await guarded(b, "enqueue_single", {"producers": p}, lambda p=p: cell_enqueue_single(b, p, run.seconds))
        rates.append(r or 0.0)
    capacity = max(rates)
    await guarded(b, "enqueue_single_unary", {"producers": 32},
                  lambda: cell_enqueue_single_unary(b, 32, run.seconds))
    await guarded(b, "enqueue_single_rest", {"producers": 32},
                  lambda: cell_enqueue_single_rest(b, 32, run.seconds))
    if capacity > 0:
        for frac in ((0.5, 0.75) if quick else (0.25, 0.5, 0.75)):  # quick: both bars' loads
            await guarded(b, "enqueue_ack_open_loop", {"fraction": frac},
                          lambda frac=frac: cell_open_loop(b, capacity, frac,
                                                           sizes.ACK_SECONDS_QUICK if quick else run.seconds + 3))
    min_backlog = run.args.drain_tasks or 10_000
    drain_rate = await guarded(b, "drain", {}, lambda: ratchet_drain.cell_drain(
        b, min_backlog, limit_s=40 if quick else 600))
    if not run.args.no_profile:
        await guarded(b, "drain_profiled", {}, lambda: ratchet_profiles.cell_profiled_drain(
            b, drain_rate or 500.0, seconds=8 if quick else 20, native=run.args.native))
        await guarded(b, "enqueue_profiled", {}, lambda: ratchet_profiles.cell_profiled_enqueue(
            b, seconds=6 if quick else 15, native=run.args.native))
    if not quick:
        from loadtest import ratchet_rounds
        await ratchet_rounds.first_round_extras(b, min(drain_rate or 0.0, capacity or 0.0))
    # Last: a time-bounded batch cell leaves 100k+ tasks behind, which no cell after it should
    # drain or step over (the peers' turns do the same: peers/runner._cells).
    await b.pt.stop_hostagent()  # (the drains may leave it running: no task runs beside the calls)
    seconds, cap = (sizes.BATCH_SECONDS_QUICK, sizes.BATCH_CAP_QUICK) if quick else \
        (sizes.BATCH_SECONDS_FULL, sizes.BATCH_CAP_FULL)
    await batch_cells(b, seconds, cap)
    await guarded(b, "enqueue_batch", {"batch": 1000}, lambda: cell_enqueue_batch(b, 1000, 2, seconds, cap))


async def batch_cells(b: Bench, seconds: float, cap: int) -> None:
    """Calls of 100 from each of sizes.BATCH_PRODUCERS (the host agent stopped: nothing drains)."""
    for p in sizes.BATCH_PRODUCERS:
        await guarded(b, "enqueue_batch", {"batch": 100, "producers": p, **({"round": b.round} if b.round else {})},
                      lambda p=p: cell_enqueue_batch(b, 100, p, seconds, cap))


async def run_all(run, round_no: int | None = None) -> None:
    """Start the platform on the bench cluster and run every Ratchet cell (round_no > 1: the
    cells carry their round, as --only workflows repeats this turn in every round)."""
    pt = PlatformUnderTest(run.pg, run.registry, shards=4)
    t0 = time.monotonic()
    try:
        await pt.start()
        await pt.deploy_noop()
    except (KeyboardInterrupt, SystemExit, asyncio.CancelledError):
        raise
    except Exception as e:  # noqa: BLE001 - the reference cells are still worth a report
        traceback.print_exc()
        run.record(Cell(system="ratchet", workload="platform_start", params={}, ok=False, error=repr(e)[:500]))
        return
    run.say(f"platform up and no-op app deployed in {time.monotonic() - t0:.1f}s: "
            + ", ".join(f"{k}={v}" for k, v in pt.service_pids().items()))
    ep = pt.endpoints
    gw = loadgen.Gateway(ep["grpc"], ep["api_key"])
    admin = await asyncpg.connect(run.pg.dsn("postgres"), timeout=10)
    shards = {db: await asyncpg.connect(run.pg.dsn(db), timeout=10) for db in pt.shard_dbs}
    b = Bench(run, pt, gw, admin, shards)
    b.round = round_no if round_no and round_no > 1 else None
    try:
        await run_cells(b)
    finally:
        for conn in (admin, *shards.values()):
            await conn.close(timeout=5)
        await gw.close()
        # Stopped here, not at exit, so the reference measured after us runs on a quiet server.
        await asyncio.to_thread(pt.stop)
