"""Plans of the drain's per-batch statements: index probes per row, never a scan of the table.

A generic plan (what a prepared statement runs after its fifth call) is checked, since that is
what the drain executes; each statement runs inside a rolled-back transaction.
"""

from __future__ import annotations

import json

import asyncpg

from ratchet.services.history.store import QUERIES

ROWS, BATCH = 20000, 120


def _nodes(plan: dict):
    yield plan
    for child in plan.get("Plans", ()):
        yield from _nodes(child)


async def test_a_completion_batch_reads_each_lease_by_its_key(make_hist):
    """Migration 0008: the end of a lease logs the lease read off the task row. Read as a join
    with the batch's CTE it became a probe per (row, row) pair: 14,400 probes and 44k buffers for
    120 rows (45 ms per batch in a bench drain, 7x the statement before); it must stay one
    primary-key probe per id, and the rows updated found through the key too."""
    hist = await make_hist(check_logs=False)  # rows loaded by SQL: second attempts, leased without a call
    await hist.sql(1, f"""
        INSERT INTO tasks (task_id, tenant_id, app_id, queue, task_type, state, version, attempt, max_attempts,
                           lease_epoch, payload, retry_policy, timeouts, run_at, created_at, updated_at,
                           started_at, worker_id, lease_expires_at, lease_check_at)
        SELECT gen_random_uuid(), 'big', 'app', 'default', 'work', 'LEASED', 4, 2, 5, 2, '1'::bytea, '{{}}', '{{}}',
               now(), now(), now(), now(), 'w', now() + interval '1 minute', now() + interval '1 minute'
          FROM generate_series(1, {ROWS})""")
    await hist.sql(1, "ANALYZE tasks")
    ids = [r["task_id"] for r in await hist.sql(1, f"SELECT task_id FROM tasks LIMIT {BATCH}")]
    n = len(ids)
    args = [ids, ["LEASED"] * n, [2] * n, ["SUCCEEDED"] * n, [None] * n, [b"null"] * n, [None] * n, [None] * n,
            [None] * n, ["succeeded"] * n, ["SUCCEEDED"] * n, [None] * n, [None] * n, [None] * n, [None] * n,
            [""] * n]
    conn = await asyncpg.connect(hist.dsns[1], timeout=10)
    try:
        async with conn.transaction():
            await conn.execute("SET LOCAL plan_cache_mode = force_generic_plan")
            await conn.execute("PREPARE apply_batch AS " + QUERIES["task_transition_apply"])
            # EXPLAIN EXECUTE takes no bind parameters: the arguments go in as literals.
            types = ["uuid[]", "text[]", "bigint[]", "text[]", "float8[]", "bytea[]"] + ["text[]"] * 8 + [
                "bytea[]", "text[]"]
            execute = await conn.fetchval(
                "SELECT format('EXECUTE apply_batch(" + ", ".join(f"%L::{t}" for t in types) + ")', "
                + ", ".join(f"${k + 1}::{t}" for k, t in enumerate(types)) + ")", *args)
            raw = await conn.fetchval("EXPLAIN (ANALYZE, BUFFERS, FORMAT JSON) " + execute, timeout=30)
            applied = await conn.fetchval("SELECT count(*) FROM task_log WHERE leased_at IS NOT NULL")
            raise _Rollback
    except _Rollback:
        pass
    finally:
        await conn.close()
    assert applied == n  # the plan ran: every lease ended and was logged with its lease
    root = json.loads(raw)[0]["Plan"]
    scans = [p for p in _nodes(root) if p["Node Type"] == "Seq Scan" and p.get("Relation Name") == "tasks"]
    assert not scans, json.dumps(root)[:4000]
    touched = root["Shared Hit Blocks"] + root["Shared Read Blocks"]
    assert touched < 40 * n, f"{touched} blocks for {n} rows"


class _Rollback(Exception):
    pass
