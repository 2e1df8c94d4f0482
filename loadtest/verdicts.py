"""Ratios to the physical reference and the issue-2 bar, computed from cells."""

from __future__ import annotations

from loadtest.results import Cell

# The reference a drain is compared with: the best PHYS_job rate of the run,
# whichever client count produced it. That is the strictest fair choice: it
# is what this Postgres does for an unbatched one-commit-per-state-change
# queue when given as much concurrency as it can use, and Ratchet is free to
# use as much concurrency (or batching) as it likes to get there.
DRAIN_REFERENCE = "max over PHYS_job at 1/8/32 clients, before and after the Ratchet cells"

METHOD_NOTES = [
    "Every ratio divides numbers measured in this run on this cluster; absolute numbers on a shared "
    "2-core machine move from run to run (see machine_busy_pct in the CPU column).",
    f"drain / PHYS_job uses the {DRAIN_REFERENCE} (the strictest choice); the ratio to 8 clients is shown too.",
    "commits/task = pg_stat_database.xact_commit delta summed over the databases under test (read-only "
    "transactions included); write xacts/task = transaction ids consumed cluster-wide (durable commits); "
    "WAL B/task = pg_current_wal_lsn delta; WAL syncs/task = pg_stat_wal.wal_sync delta (group commit "
    "shares syncs). Each cell starts right after a CHECKPOINT.",
    "Between systems (after the reference and after every system's turn) the bench runs VACUUM ANALYZE on "
    "every database and a CHECKPOINT, outside any cell: what one system left (dead rows, dirty pages) is "
    "cleaned before the next one runs, instead of by autovacuum or the checkpointer inside its cells.",
    "CPU ms/task per process comes from /proc/<pid>/stat (utime+stime plus reaped children) of each "
    "service's process tree; bench_driver is this load generator, load_client is pgbench.",
    "PHYS_job: pgbench script of three autocommit statements (INSERT; UPDATE ... WHERE id = (SELECT ... "
    "FOR UPDATE SKIP LOCKED) -> running; UPDATE -> done) on a table with a partial index on queued rows.",
    "PHYS_batched: asyncpg, each worker claims 100 rows in one commit and completes them in a second.",
]


def _round1(c: Cell) -> bool:
    """Issue-2 figures come from round 1 (later rounds and the shard sweep are issue 5's)."""
    return c.params.get("round", 1) == 1


def _best(cells: list[Cell], system: str, workload: str, **params) -> Cell | None:
    found = [c for c in cells if c.ok and c.system == system and c.workload == workload and c.rate
             and _round1(c) and all(c.params.get(k) == v for k, v in params.items())]
    return max(found, key=lambda c: c.rate) if found else None


def _one(cells: list[Cell], system: str, workload: str, **params) -> Cell | None:
    """The first matching round-1 cell (the issue-2 drain is recorded before the 100k one)."""
    found = [c for c in cells if c.ok and c.system == system and c.workload == workload and _round1(c)
             and all(c.params.get(k) == v for k, v in params.items())]
    return found[0] if found else None


def ratios(cells: list[Cell]) -> list[dict]:
    """Ratchet ÷ reference for every pair that was measured in this run."""
    out = []
    drain = _one(cells, "ratchet", "drain")
    ref = _best(cells, "postgres", "PHYS_job")
    ref8 = _best(cells, "postgres", "PHYS_job", clients=8)
    batched = _best(cells, "postgres", "PHYS_batched")
    if drain and ref:
        out.append({"name": "drain / PHYS_job (best)", "value": f"{drain.rate / ref.rate:.2f}",
                    "how": f"{drain.rate:.0f} / {ref.rate:.0f} jobs/s (PHYS_job at {ref.params['clients']} clients)"})
    if drain and ref8:
        out.append({"name": "drain / PHYS_job (8 clients)", "value": f"{drain.rate / ref8.rate:.2f}",
                    "how": f"{drain.rate:.0f} / {ref8.rate:.0f} jobs/s"})
    if drain and batched:
        out.append({"name": "drain / PHYS_batched", "value": f"{drain.rate / batched.rate:.3f}",
                    "how": f"{drain.rate:.0f} / {batched.rate:.0f} jobs/s"})
    if drain and ref and drain.commits_per_task and ref.commits_per_task:
        out.append({"name": "commits per task / PHYS_job's", "value":
                    f"{drain.commits_per_task / ref.commits_per_task:.2f}",
                    "how": f"{drain.commits_per_task} / {ref.commits_per_task}"})
    if drain and ref and drain.wal_bytes_per_task and ref.wal_bytes_per_task:
        out.append({"name": "WAL bytes per task / PHYS_job's", "value":
                    f"{drain.wal_bytes_per_task / ref.wal_bytes_per_task:.2f}",
                    "how": f"{drain.wal_bytes_per_task:.0f} / {ref.wal_bytes_per_task:.0f} B"})
    for enq in (c for c in cells if c.ok and c.system == "ratchet" and c.workload == "enqueue_single"
                and _round1(c)):
        commit = _one(cells, "postgres", "PHYS_commit", clients=enq.params.get("producers"))
        if commit:
            out.append({"name": f"enqueue_single ({enq.params['producers']} producers) / PHYS_commit",
                        "value": f"{enq.rate / commit.rate:.2f}",
                        "how": f"{enq.rate:.0f} tasks/s / {commit.rate:.0f} commits/s at the same concurrency"})
    best_commit = _best(cells, "postgres", "PHYS_commit")
    for enq in (c for c in cells if c.ok and c.system == "ratchet" and c.workload == "enqueue_batch"
                and _round1(c)):
        if best_commit:
            out.append({"name": f"enqueue_batch ({enq.params.get('batch')}/call, {enq.params.get('producers')} "
                                f"producers) / best PHYS_commit",
                        "value": f"{enq.rate / best_commit.rate:.2f}",
                        "how": f"{enq.rate:.0f} tasks/s / {best_commit.rate:.0f} single-row commits/s"})
    return out


def reference_bars(cells: list[Cell]) -> list[dict]:
    """The three numeric bars of issue 2, each PASS, FAIL or NOT MEASURED."""
    out = []
    drain = _one(cells, "ratchet", "drain")
    ref = _best(cells, "postgres", "PHYS_job")
    if drain and ref:
        r = drain.rate / ref.rate
        out.append({"bar": "drain >= 0.4 x PHYS_job", "measured": f"{r:.2f} x ({drain.rate:.0f} jobs/s)",
                    "threshold": f">= 0.40 x ({0.4 * ref.rate:.0f} jobs/s)",
                    "verdict": "PASS" if r >= 0.4 else "FAIL"})
    else:
        out.append({"bar": "drain >= 0.4 x PHYS_job", "measured": "–", "threshold": ">= 0.40 x",
                    "verdict": "NOT MEASURED"})
    s2s = _one(cells, "ratchet", "schedule_to_start_idle")
    p50 = (s2s.latency_ms or {}).get("p50") if s2s else None
    out.append({"bar": "idle schedule-to-start p50", "measured": f"{p50:.1f} ms" if p50 is not None else "–",
                "threshold": "<= 100 ms",
                "verdict": "NOT MEASURED" if p50 is None else ("PASS" if p50 <= 100 else "FAIL")})
    ack = _one(cells, "ratchet", "enqueue_ack_open_loop", fraction=0.5)
    p99 = (ack.latency_ms or {}).get("p99") if ack else None
    load = f" at {ack.params.get('target_rate')}/s" if ack else ""
    out.append({"bar": "enqueue ack p99 at 50% of capacity", "measured":
                f"{p99:.1f} ms{load}" if p99 is not None else "–", "threshold": "<= 50 ms",
                "verdict": "NOT MEASURED" if p99 is None else ("PASS" if p99 <= 50 else "FAIL")})
    return out
