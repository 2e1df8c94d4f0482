"""Write amplification from the server's own counters: commits, write
transactions, WAL bytes and WAL syncs between two snapshots.

* commits: pg_stat_database.xact_commit summed over the databases under test
  (read-only transactions count too; that is what Postgres calls a commit).
* write transactions: the cluster's next transaction id moved by this much;
  only transactions that wrote something take an id, so this is the count of
  durable commits (cluster-wide: nothing else runs on the bench cluster).
* WAL bytes: pg_current_wal_lsn() delta (cluster-wide, checkpoint images included).
* WAL syncs: pg_stat_wal.wal_sync delta, i.e. fsyncs; fewer syncs than write
  transactions means group commit is sharing flushes.

Cumulative statistics reach pg_stat_database late: a backend flushes at most
once a second while busy, and what it counted in its last second stays
pending until its next transaction or, if it stays idle, for up to 10 s
(measured here: 100 cached SELECTs on an idle connection showed up after ~8 s).
A client that disconnects flushes at once. So `settle` waits `min_wait_s`
(10.5 s for a platform whose pooled connections stay open, ~1 s for pgbench)
and then for the counters to stop moving before the closing snapshot. The
transaction-id and WAL counters are exact and immediate.
"""

from __future__ import annotations

import asyncio
import collections
import dataclasses
import pathlib
import time

import asyncpg

from ratchet.libs.pg.queries import load_queries

Q = load_queries(pathlib.Path(__file__).parent / "sql" / "pg_introspect.sql")


@dataclasses.dataclass(frozen=True)
class Snapshot:
    """Cluster counters at one instant."""

    at: float
    xact_commit: dict[str, int]
    wal_lsn: int
    next_xid: int
    wal_sync: int
    wal_records: int
    wal_fpi: int


@dataclasses.dataclass(frozen=True)
class Delta:
    """Counter movement between two snapshots, restricted to some databases."""

    seconds: float
    commits: int
    commits_by_db: dict[str, int]
    write_xacts: int
    wal_bytes: int
    wal_syncs: int
    wal_records: int
    wal_fpi: int

    def per_task(self, tasks: int) -> dict[str, float | None]:
        """The per-task figures every cell reports."""
        if tasks <= 0:
            return {"commits_per_task": None, "write_xacts_per_task": None,
                    "wal_bytes_per_task": None, "wal_syncs_per_task": None}
        return {
            "commits_per_task": round(self.commits / tasks, 3),
            "write_xacts_per_task": round(self.write_xacts / tasks, 3),
            "wal_bytes_per_task": round(self.wal_bytes / tasks, 1),
            "wal_syncs_per_task": round(self.wal_syncs / tasks, 3),
        }


async def snapshot(conn: asyncpg.Connection) -> Snapshot:
    """Read every counter in one round of queries on an admin connection."""
    rows = await conn.fetch(Q["db_commits_list"], timeout=10)
    lsn = await conn.fetchval(Q["wal_lsn_bytes"], timeout=10)
    xid = await conn.fetchval(Q["xid_next"], timeout=10)
    wal = await conn.fetchrow(Q["wal_stats_get"], timeout=10)
    return Snapshot(at=time.monotonic(), xact_commit={r["datname"]: int(r["xact_commit"]) for r in rows},
                    wal_lsn=int(lsn), next_xid=int(xid), wal_sync=int(wal["wal_sync"]),
                    wal_records=int(wal["wal_records"]), wal_fpi=int(wal["wal_fpi"]))


def delta(a: Snapshot, b: Snapshot, dbs: list[str], settled: Snapshot | None = None) -> Delta:
    """b - a, with commits summed over `dbs` only and taken from `settled` when given
    (b is read the moment the workload ends, settled after the statistics caught up)."""
    c = settled or b
    by_db = {d: c.xact_commit.get(d, 0) - a.xact_commit.get(d, 0) for d in dbs}
    return Delta(seconds=b.at - a.at, commits=sum(by_db.values()), commits_by_db=by_db,
                 write_xacts=b.next_xid - a.next_xid, wal_bytes=b.wal_lsn - a.wal_lsn,
                 wal_syncs=b.wal_sync - a.wal_sync, wal_records=b.wal_records - a.wal_records,
                 wal_fpi=b.wal_fpi - a.wal_fpi)


async def settle(conn: asyncpg.Connection, dbs: list[str], *, min_wait_s: float = 1.1,
                 quiet_s: float = 1.2, limit_s: float = 15.0) -> Snapshot:
    """Wait min_wait_s, then (at most until limit_s) until commits in `dbs` stop
    moving for quiet_s, then snapshot. WAL and xid counters in the returned
    snapshot are read at its end, so they include the idle trickle of the wait.

    A platform that keeps polling never goes fully quiet; then we stop at the
    limit or when the movement is only its idle trickle (< 50 commits/s).
    """
    deadline = time.monotonic() + max(limit_s, min_wait_s + quiet_s)
    await asyncio.sleep(min_wait_s)
    prev = await snapshot(conn)
    while time.monotonic() < deadline:
        await asyncio.sleep(quiet_s)
        cur = await snapshot(conn)
        moved = sum(cur.xact_commit.get(d, 0) - prev.xact_commit.get(d, 0) for d in dbs)
        if moved / quiet_s < 50:
            return cur
        prev = cur
    return await snapshot(conn)


def percentiles(samples_ms: list[float]) -> dict[str, float | None]:
    """p50/p90/p99/p999/max/mean by nearest rank (no interpolation)."""
    if not samples_ms:
        return {"p50": None, "p90": None, "p99": None, "p999": None, "max": None, "mean": None, "n": 0}
    s = sorted(samples_ms)

    def rank(q: float) -> float:
        idx = min(len(s) - 1, max(0, int(q * len(s) + 0.999999) - 1))
        return round(s[idx], 3)
    return {"p50": rank(0.50), "p90": rank(0.90), "p99": rank(0.99), "p999": rank(0.999),
            "max": round(s[-1], 3), "mean": round(sum(s) / len(s), 3), "n": len(s)}


# -- pg_stat_statements: which SQL the platform's Postgres time goes to -------
async def statements_reset(conn: asyncpg.Connection) -> None:
    """Zero pg_stat_statements (the bench cluster preloads it)."""
    await conn.execute(Q["statements_extension_create"], timeout=30)
    await conn.fetchval(Q["statements_reset"], timeout=30)


async def statements_top(conn: asyncpg.Connection, dbs: list[str], tasks: int, limit: int = 12) -> list[dict]:
    """The costliest statements over `dbs`, the same text on every shard folded into one row."""
    rows = await conn.fetch(Q["statements_top"], dbs, 400, timeout=30)
    folded: dict[str, collections.Counter] = {}
    for r in rows:
        key = r["query"][:400]
        c = folded.setdefault(key, collections.Counter())
        for k in ("calls", "total_exec_time", "rows", "shared_blks_hit", "shared_blks_read", "wal_bytes"):
            c[k] += float(r[k] or 0)
    total = sum(c["total_exec_time"] for c in folded.values()) or 1.0
    out = []
    for q, c in sorted(folded.items(), key=lambda kv: -kv[1]["total_exec_time"])[:limit]:
        out.append({"query": q, "calls": int(c["calls"]), "total_ms": round(c["total_exec_time"], 1),
                    "share_pct": round(100.0 * c["total_exec_time"] / total, 1),
                    "mean_ms": round(c["total_exec_time"] / c["calls"], 3) if c["calls"] else None,
                    "calls_per_task": round(c["calls"] / tasks, 3) if tasks else None,
                    "rows_per_call": round(c["rows"] / c["calls"], 1) if c["calls"] else None,
                    "wal_bytes_per_task": round(c["wal_bytes"] / tasks, 1) if tasks else None})
    return out


def statements_markdown(top: list[dict], tasks: int, wall_s: float, during: str) -> list[str]:
    """A table of the statements where the shards' execution time went."""
    total = sum(t["total_ms"] for t in top)
    lines = [f"pg_stat_statements over the shard databases during {during} ({tasks} tasks, {wall_s:.1f} s); "
             f"the top statements hold {total / 1000:.1f} s of execution time "
             f"({total / tasks:.3f} ms per task). Execution time only: parse, commit and fsync waits are not in it.",
             "", "| share | total ms | calls/task | mean ms | rows/call | WAL B/task | statement |",
             "|---|---|---|---|---|---|---|"]
    for t in top:
        q = t["query"].replace("|", "\\|")
        q = q if len(q) <= 220 else q[:217] + "..."
        lines.append(f"| {t['share_pct']} % | {t['total_ms']:,.0f} | {t['calls_per_task']} | {t['mean_ms']} | "
                     f"{t['rows_per_call']} | {t['wal_bytes_per_task']} | `{q}` |")
    return lines
