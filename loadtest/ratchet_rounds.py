"""Ratchet's issue-5 cells beside the issue-2 ones (ratchet_cells.py):

  round 1, full mode (after the issue-2 cells, on the same platform):
    schedule_to_start_load  probes among a stream at 50 % of the drain rate
    timer_lateness          N tasks due over a window (run_at); shard started_at - due
    recovery                sleeping tasks in flight, host agent SIGKILLed, restarted
  later rounds (ratchet_round): a fresh platform, enqueue capacity and drain only
  shard_sweep (full mode): a fresh platform with 1, 2 and 4 shards, enqueue and drain each

Every latency here uses the shard clock (clock_timestamp(), this machine's
clock) for the platform's side and time.time() for the sender's side.
"""

from __future__ import annotations

import asyncio
import datetime
import os
import shutil
import signal
import time

import asyncpg

from loadtest import cpu, dbstats, loadgen, sizes
from loadtest.ratchet_cells import Bench, Q, guarded, warmup
from ratchet.api.tasks.v1 import tasks_pb2

UTC = datetime.UTC


async def timings(b: Bench, ids: list[str]) -> dict[str, dict]:
    """task_id -> {state, created_at, started_at, finished_at, attempt} over every shard."""
    b.probe_queries += len(b.shards)
    out: dict[str, dict] = {}
    for i in range(0, len(ids), 5000):
        part = ids[i:i + 5000]
        rows = await asyncio.gather(*(c.fetch(Q["task_timings_by_ids"], part, timeout=60)
                                      for c in b.shards.values()))
        for rs in rows:
            for r in rs:
                out[r["task_id"]] = dict(r)
    return out


async def drain_leftovers(b: Bench, limit_s: float = 120.0) -> int:
    """Start the host agent and wait until nothing is unfinished (earlier cells leave backlog)."""
    await b.pt.start_hostagent()
    deadline = time.monotonic() + limit_s
    left = await b.unfinished()
    while left and time.monotonic() < deadline:
        await asyncio.sleep(0.5)
        left = await b.unfinished()
    return left


async def cell_s2s_load(b: Bench, rate: float, seconds: float, probes_per_s: float = 10.0) -> None:
    """Probe tasks sent among no-op tasks arriving at `rate`/s, host agent running."""
    sent: dict[str, float] = {}

    async def probes():
        t_end = time.monotonic() + seconds
        i = 0
        while time.monotonic() < t_end:
            t = time.time()
            sent[await b.gw.enqueue(b.gw.request(i))] = t
            i += 1
            await asyncio.sleep(1.0 / probes_per_s)

    async def go():
        res, _ = await asyncio.gather(loadgen.open_loop(b.gw, rate, seconds), probes())
        deadline = time.monotonic() + 30
        t = {}
        while time.monotonic() < deadline:
            t = await timings(b, list(sent))
            if all(v["started_at"] is not None for v in t.values()) and len(t) == len(sent):
                break
            await asyncio.sleep(0.5)
        return res, t
    (res, t), d, cpu_ms, wall = await b.measure(go)
    s2s = [(v["started_at"] - v["created_at"]).total_seconds() * 1000 for v in t.values() if v["started_at"]]
    send = [(t[k]["started_at"].timestamp() - ts) * 1000 for k, ts in sent.items() if k in t and t[k]["started_at"]]
    c = b.cell("schedule_to_start_load", {"target_rate": round(rate)}, rate=res.rate, unit="tasks/s", n=res.acked,
               wall=wall, d=d, cpu_ms=cpu_ms, latency=send,
               notes="load = 50 % of min(drain, enqueue capacity); "
                     "latency = probe's started_at (shard clock) - send time")
    c.extra.update({"created_to_started_ms": dbstats.percentiles(s2s), "probes": len(sent),
                    "probes_missed": len(sent) - len(send)})
    b.run.record(c)


async def cell_timers(b: Bench, n: int, window_s: float, lead_s: float = 5.0, wait_s: float = 120.0) -> None:
    """n tasks with run_at spread evenly over [now+lead, now+lead+window]; lateness from the shards."""
    base = time.time() + lead_s
    dues = [base + window_s * i / n for i in range(n)]

    async def go():
        ids: dict[str, float] = {}
        t0 = time.time()
        for start in range(0, n, 500):
            reqs = []
            for k in range(start, min(n, start + 500)):
                req = b.gw.request(k)
                req.run_at.FromNanoseconds(int(dues[k] * 1e9))
                reqs.append(req)
            for tid, k in zip(await b.gw.enqueue_batch(reqs), range(start, start + len(reqs)), strict=True):
                ids[tid] = dues[k]
        enqueue_s = time.time() - t0
        deadline = time.monotonic() + lead_s + window_s + wait_s
        await asyncio.sleep(max(0.0, base + window_s - time.time()))
        t = {}
        while time.monotonic() < deadline:
            t = await timings(b, list(ids))
            if sum(1 for v in t.values() if v["started_at"] is not None) >= len(ids):
                break
            await asyncio.sleep(1.0)
        return ids, t, enqueue_s
    (ids, t, enqueue_s), d, cpu_ms, wall = await b.measure(go)
    late = [(t[k]["started_at"].timestamp() - due) * 1000 for k, due in ids.items() if k in t and t[k]["started_at"]]
    c = b.cell("timer_lateness", {"tasks": n, "window_s": window_s}, rate=None, unit="", n=len(late), wall=wall,
               d=d, cpu_ms=cpu_ms, latency=late,
               notes="latency = started_at (shard clock, at lease) - run_at; due times spread evenly over the window")
    c.extra.update({"missing": n - len(late), "enqueue_s": round(enqueue_s, 2), "early": sum(1 for x in late if x < 0)})
    b.run.record(c)


def _kill_tree(pid: int) -> None:
    for p in cpu._tree(pid, cpu.all_procs()):
        try:
            os.kill(p.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass


async def cell_recovery(b: Bench, tasks: int, sleep_s: float, limit_s: float) -> None:
    """`tasks` sleeping tasks; SIGKILL the host agent and its sandboxes once some run, start a new
    host agent at once; recovery = kill -> every task SUCCEEDED (lease 30 s by default)."""
    ids = []
    for i in range(tasks):
        req = tasks_pb2.EnqueueTaskRequest(task_type="sleepy", idempotency_key=f"bench-rc-{time.time_ns()}-{i}")
        req.payload.struct_value.fields["sleep_s"].number_value = sleep_s
        ids.append(await b.gw.enqueue(req))
    deadline = time.monotonic() + 30
    running = 0
    while time.monotonic() < deadline and not running:
        running = sum(1 for v in (await timings(b, ids)).values() if v["started_at"] is not None)
        await asyncio.sleep(0.1)
    pid = b.pt.platform.service_pid("hostagent")
    t_kill = time.monotonic()
    if pid:
        _kill_tree(pid)
    await b.pt.start_hostagent()
    left = tasks
    while left and time.monotonic() - t_kill < limit_s:
        await asyncio.sleep(0.2)
        left = sum(1 for v in (await timings(b, ids)).values() if v["state"] != "SUCCEEDED")
    took = time.monotonic() - t_kill
    c = b.cell("recovery", {"tasks": tasks, "sleep_s": sleep_s}, rate=None if left else round(took, 2),
               unit="s until all done", n=tasks - left, wall=took,
               notes="host agent and sandboxes SIGKILLed, a new host agent started at once; the dead one's "
                     "leases expire after the lease duration (30 s default) and the tasks are retried")
    c.extra.update({"recovery_s": None if left else round(took, 2), "left_unfinished": left,
                    "started_before_kill": running, "limit_s": limit_s})
    b.run.record(c)


async def first_round_extras(b: Bench, sustained: float) -> None:
    """The full-mode issue-5 cells on the round-1 platform; `sustained` = the lower of the
    drain and enqueue capacity rates (the load cell offers half of it)."""
    left = await drain_leftovers(b)
    if left:
        b.run.say(f"ratchet extras: {left} tasks still unfinished before the extra cells")
    if sustained:
        await guarded(b, "schedule_to_start_load", {}, lambda: cell_s2s_load(b, 0.5 * sustained, 15.0))
    await guarded(b, "timer_lateness", {}, lambda: cell_timers(b, 10_000, 60.0, lead_s=20.0))
    await guarded(b, "recovery", {}, lambda: cell_recovery(b, 16, 2.0, 90.0))
    big = b.run.args.big_drain if b.run.args.big_drain is not None else 100_000
    if big:
        from loadtest import ratchet_drain
        await b.pt.stop_hostagent()
        await guarded(b, "drain", {"backlog": big}, lambda: ratchet_drain.cell_drain(b, big, limit_s=120))


# -- fresh platforms: later rounds and the shard sweep ----------------------------
def reset_platform(pg) -> None:
    """Drop the platform's databases and per-run state so the next LocalPlatform starts fresh
    (same Postgres, same secrets)."""
    out = pg.psql("SELECT datname FROM pg_database WHERE datname LIKE 'ratchet\\_%'")
    for db in out.split():
        pg.psql(f'DROP DATABASE IF EXISTS "{db}" WITH (FORCE)')
    d = pg.platform_dir
    (d / "secrets" / "dev_tenant.json").unlink(missing_ok=True)
    for sub in ("blobs", "hostagent"):
        shutil.rmtree(d / sub, ignore_errors=True)


async def fresh_platform(run, shards: int, round_no: int | None):
    """Start a fresh platform and a Bench on it -> (Bench, cleanup coroutine function)."""
    from loadtest.platform_run import PlatformUnderTest
    reset_platform(run.pg)
    pt = PlatformUnderTest(run.pg, run.registry, shards=shards)
    await pt.start()
    await pt.deploy_noop()
    ep = pt.endpoints
    gw = loadgen.Gateway(ep["grpc"], ep["api_key"])
    admin = await asyncpg.connect(run.pg.dsn("postgres"), timeout=10)
    conns = {db: await asyncpg.connect(run.pg.dsn(db), timeout=10) for db in pt.shard_dbs}
    b = Bench(run, pt, gw, admin, conns)
    b.round = round_no

    async def close():
        for conn in (admin, *conns.values()):
            await conn.close(timeout=5)
        await gw.close()
        await asyncio.to_thread(pt.stop)
    return b, close


async def ratchet_round(run, round_no: int) -> None:
    """Rounds 2..n: enqueue capacity (single and batch calls) and drain on a fresh 4-shard platform."""
    from loadtest import ratchet_cells, ratchet_drain
    b, close = await fresh_platform(run, 4, round_no)
    try:
        run.say(f"ratchet round {round_no}: warm-up task succeeded in {await warmup(b):.2f}s")
        await b.pt.stop_hostagent()
        for p in ((8, 32) if run.quick else (1, 8, 32)):
            await guarded(b, "enqueue_single", {"producers": p, "round": round_no},
                          lambda p=p: ratchet_cells.cell_enqueue_single(b, p, run.seconds))
        await guarded(b, "drain", {"round": round_no}, lambda: ratchet_drain.cell_drain(
            b, run.args.drain_tasks or 10_000, limit_s=40 if run.quick else 180))
        # Last, as in round 1 (they leave 100k+ tasks behind): batch calls of 100, as the peers'
        # later rounds run them.
        await b.pt.stop_hostagent()
        await ratchet_cells.batch_cells(b, *((sizes.BATCH_SECONDS_QUICK, sizes.BATCH_CAP_QUICK) if run.quick
                                             else (sizes.BATCH_SECONDS_FULL, sizes.BATCH_CAP_FULL)))
    finally:
        await close()


async def shard_sweep(run) -> None:
    """Throughput with 1, 2 and 4 shards: enqueue (32 producers) and a drain window each."""
    from loadtest import ratchet_cells, ratchet_drain
    for shards in (1, 2, 4):
        try:
            b, close = await fresh_platform(run, shards, None)
        except Exception as e:  # noqa: BLE001 - recorded; the other shard counts still run
            run.record(ratchet_cells.Cell(system="ratchet", workload="shards_start", params={"shards": shards},
                                          ok=False, error=repr(e)[:500]))
            continue
        b.extra_params = {"shards": shards}
        b.workload_map = {"enqueue_single": "shards_enqueue", "drain": "shards_drain"}
        try:
            await warmup(b)
            await b.pt.stop_hostagent()
            await guarded(b, "shards_enqueue", {"shards": shards},
                          lambda b=b: ratchet_cells.cell_enqueue_single(b, 32, run.seconds))
            await guarded(b, "shards_drain", {"shards": shards}, lambda b=b: ratchet_drain.cell_drain(
                b, 10_000, limit_s=60))
        finally:
            await close()
