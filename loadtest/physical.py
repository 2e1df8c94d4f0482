"""The physical reference, measured on the bench's own cluster in the same run
(PERFORMANCE.md): what raw Postgres does on this machine with durable commits.

* PHYS_commit:  pgbench, one single-row INSERT per commit, at 1/8/32 clients.
* PHYS_job:     pgbench, the minimal job lifecycle with one commit per state
                change (enqueue; claim one with FOR UPDATE SKIP LOCKED and mark it
                running; mark it done), at 1/8/32 clients, reported as jobs/s.
* PHYS_batched: an asyncpg loop that claims 100 rows per commit and completes
                them in one more commit: the ceiling for a batching dispatcher.
"""

from __future__ import annotations

import asyncio
import pathlib
import re
import resource
import subprocess
import time

import asyncpg

from loadtest import cpu, dbstats
from loadtest.pgserver import BenchPostgres
from loadtest.procs import Registry
from loadtest.results import Cell
from ratchet.libs.pg.queries import load_queries

SQL_DIR = pathlib.Path(__file__).parent / "sql"
Q = load_queries(SQL_DIR / "phys_schema.sql", SQL_DIR / "phys_batched.sql")
DB = "phys"

_TPS = re.compile(r"^tps = ([0-9.]+) \(without initial connection time\)", re.MULTILINE)
_TXNS = re.compile(r"^number of transactions actually processed: (\d+)", re.MULTILINE)
_LAT = re.compile(r"^latency average = ([0-9.]+) ms", re.MULTILINE)
_FAILED = re.compile(r"^number of failed transactions: (\d+)", re.MULTILINE)


def _children_cpu_s() -> float:
    ru = resource.getrusage(resource.RUSAGE_CHILDREN)
    return ru.ru_utime + ru.ru_stime


class Physical:
    """Runs the reference cells on a dedicated database of the bench cluster."""

    def __init__(self, pg: BenchPostgres, registry: Registry, *, seconds: float):
        self.pg = pg
        self.registry = registry
        self.seconds = seconds
        self.admin: asyncpg.Connection | None = None

    async def __aenter__(self) -> Physical:
        self.pg.create_database(DB)
        self.admin = await asyncpg.connect(self.pg.dsn("postgres"), timeout=10)
        return self

    async def __aexit__(self, *exc) -> None:
        if self.admin is not None:
            await self.admin.close(timeout=5)

    async def _reset(self) -> None:
        conn = await asyncpg.connect(self.pg.dsn(DB), timeout=10)
        try:
            await conn.execute(Q["phys_schema_reset"], timeout=30)
        finally:
            await conn.close(timeout=5)
        # Every cell starts right after a checkpoint, so each pays the same
        # full-page images for the pages it first touches.
        await self.admin.execute("CHECKPOINT", timeout=60)

    def _pgbench(self, script: str, clients: int) -> dict:
        args = [self.pg.pgbench_path(), "-n", "-M", "prepared", "-c", str(clients),
                "-j", str(min(clients, 2)), "-T", str(max(1, round(self.seconds))),
                "-h", self.pg.socket_dir, "-p", str(self.pg.port), "-U", "ratchet",
                "-f", str(SQL_DIR / script), DB]
        proc = self.registry.popen(f"pgbench {script} c={clients}", args, stdout=subprocess.PIPE,
                                   stderr=subprocess.PIPE, text=True)
        try:
            out, err = proc.communicate(timeout=self.seconds + 60)
        except subprocess.TimeoutExpired:
            proc.kill()
            out, err = proc.communicate(timeout=10)
            raise RuntimeError(f"pgbench {script} -c {clients} did not finish in time") from None
        if proc.returncode != 0 or not _TPS.search(out):
            raise RuntimeError(f"pgbench {script} -c {clients} failed ({proc.returncode}): {err[-800:]}")
        failed = _FAILED.search(out)
        return {"tps": float(_TPS.search(out).group(1)), "transactions": int(_TXNS.search(out).group(1)),
                "latency_avg_ms": float(_LAT.search(out).group(1)) if _LAT.search(out) else None,
                "failed": int(failed.group(1)) if failed else 0}

    async def _measured(self, fn, roots: dict[str, int]):
        """Run fn (blocking, in a thread) between counter and CPU snapshots."""
        snap_a = await dbstats.snapshot(self.admin)
        cpu_a, child_a = cpu.take(roots), _children_cpu_s()
        t0 = time.monotonic()
        result = await asyncio.to_thread(fn)
        wall = time.monotonic() - t0
        cpu_b, child_b = cpu.take(roots), _children_cpu_s()
        snap_b = await dbstats.snapshot(self.admin)
        settled = await dbstats.settle(self.admin, [DB])
        cpu_ms = cpu.diff_ms(cpu_a, cpu_b)
        cpu_ms["load_client"] = round((child_b - child_a) * 1000.0, 1)
        return result, wall, dbstats.delta(snap_a, snap_b, [DB], settled), cpu_ms

    def _roots(self) -> dict[str, int]:
        pid = self.pg.cluster.postmaster_pid()
        return {"postgres": pid} if pid else {}

    async def phys_commit(self, clients: int) -> Cell:
        """Single-row INSERT commits/s at `clients` pgbench clients."""
        await self._reset()
        res, wall, d, cpu_ms = await self._measured(lambda: self._pgbench("phys_commit.pgbench", clients),
                                                    self._roots())
        rows = await self._count("phys_commit_count")
        cell = Cell(system="postgres", workload="PHYS_commit", params={"clients": clients},
                    rate=round(res["tps"], 1), unit="commits/s", n=rows, duration_s=round(wall, 2),
                    latency_ms={"mean": res["latency_avg_ms"]},
                    cpu_ms_per_task=cpu.per_task(cpu_ms, rows),
                    extra={"pgbench": res})
        cell.apply_amplification(d.per_task(rows))
        return cell

    async def phys_job(self, clients: int) -> Cell:
        """Minimal lifecycle jobs/s (3 commits per job) at `clients` pgbench clients."""
        await self._reset()
        res, wall, d, cpu_ms = await self._measured(lambda: self._pgbench("phys_job.pgbench", clients),
                                                    self._roots())
        done = await self._count("phys_job_count_done")
        # pgbench's tps counts script runs; a run whose claim found every row
        # locked completed nothing, so scale by the jobs actually done.
        rate = res["tps"] * (done / res["transactions"]) if res["transactions"] else 0.0
        cell = Cell(system="postgres", workload="PHYS_job", params={"clients": clients},
                    rate=round(rate, 1), unit="jobs/s", n=done, duration_s=round(wall, 2),
                    latency_ms={"mean": res["latency_avg_ms"]},
                    cpu_ms_per_task=cpu.per_task(cpu_ms, done),
                    extra={"pgbench": res, "commits_per_job_by_design": 3})
        cell.apply_amplification(d.per_task(done))
        return cell

    async def _count(self, query: str) -> int:
        conn = await asyncpg.connect(self.pg.dsn(DB), timeout=10)
        try:
            return int(await conn.fetchval(Q[query], timeout=30))
        finally:
            await conn.close(timeout=5)

    async def phys_batched(self, workers: int, batch: int = 100, rows: int = 200_000) -> Cell:
        """Drain `rows` preloaded jobs with `workers` connections, `batch` rows per commit."""
        await self._reset()
        conn = await asyncpg.connect(self.pg.dsn(DB), timeout=10)
        try:
            await conn.execute(Q["phys_job_preload"], rows, timeout=120)
        finally:
            await conn.close(timeout=5)
        await self.admin.execute("CHECKPOINT", timeout=60)
        snap_a = await dbstats.snapshot(self.admin)
        cpu_a = cpu.take(self._roots())
        t0 = time.monotonic()
        done = sum(await asyncio.gather(*(self._batched_worker(batch, t0 + self.seconds * 3)
                                          for _ in range(workers))))
        wall = time.monotonic() - t0
        cpu_b = cpu.take(self._roots())
        snap_b = await dbstats.snapshot(self.admin)
        d = dbstats.delta(snap_a, snap_b, [DB], await dbstats.settle(self.admin, [DB]))
        cpu_ms = cpu.diff_ms(cpu_a, cpu_b)
        cell = Cell(system="postgres", workload="PHYS_batched", params={"workers": workers, "batch": batch},
                    rate=round(done / wall, 1), unit="jobs/s", n=done, duration_s=round(wall, 2),
                    cpu_ms_per_task=cpu.per_task(cpu_ms, done),
                    notes="claim N rows per commit, complete them in one more commit",
                    extra={"preloaded": rows, "drained_all": done == rows})
        cell.apply_amplification(d.per_task(done))
        return cell

    async def _batched_worker(self, batch: int, deadline: float) -> int:
        conn = await asyncpg.connect(self.pg.dsn(DB), timeout=10)
        done = 0
        try:
            claim, complete = Q["phys_job_claim_batch"], Q["phys_job_complete_batch"]
            while time.monotonic() < deadline:
                ids = [r["id"] for r in await conn.fetch(claim, batch, timeout=30)]
                if not ids:
                    break
                await conn.execute(complete, ids, timeout=30)
                done += len(ids)
        finally:
            await conn.close(timeout=5)
        return done
