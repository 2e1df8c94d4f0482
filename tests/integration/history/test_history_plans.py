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
    await _load(hist, "LEASED", version=4, attempt=2)
    ids = [r["task_id"] for r in await hist.sql(1, f"SELECT task_id FROM tasks LIMIT {BATCH}")]
    n = len(ids)
    args = [ids, ["LEASED"] * n, [2] * n, ["SUCCEEDED"] * n, [None] * n, [b"null"] * n, [None] * n, [None] * n,
            [None] * n, ["succeeded"] * n, ["SUCCEEDED"] * n, [None] * n, [None] * n, [None] * n, [None] * n,
            [""] * n]
    types = ["uuid[]", "text[]", "bigint[]", "text[]", "float8[]", "bytea[]"] + ["text[]"] * 8 + ["bytea[]", "text[]"]
    root, applied = await _explain_generic(
        hist.dsns[1], "task_transition_apply", args, types,
        after="SELECT count(*) FROM task_log WHERE leased_at IS NOT NULL")
    assert applied == n  # the plan ran: every lease ended and was logged with its lease
    _assert_probes_only(root, n)


async def test_a_group_of_creates_probes_each_id_and_key_by_its_index(make_hist):
    """The general create looks before it writes: a primary-key probe per id and a digest-index
    probe per key (inserts without ON CONFLICT after: no 48-byte speculative-insert record per
    row). The probes must never become a join with the whole table (the session-3 NOT EXISTS on keys ran
    ~15x slower), on tasks or on idempotency_keys."""
    hist = await make_hist(check_logs=False)
    await _load(hist, "ENQUEUED", version=1, attempt=0)
    await hist.sql(1, f"""
        INSERT INTO idempotency_keys (tenant_id, app_id, key, task_id, fingerprint, created_at, expires_at)
        SELECT 'big', 'app', 'old-' || g, gen_random_uuid(), 'f', now(), now() + interval '1 day'
          FROM generate_series(1, {ROWS}) g""")
    await hist.sql(1, "ANALYZE idempotency_keys")
    new = [hist.task("big") for _ in range(BATCH)]
    taken = (await hist.sql(1, "SELECT task_id FROM tasks LIMIT 1"))[0]["task_id"]
    n = len(new) + 2
    ids = [t.task_id for t in new] + [str(taken), hist.task("big").task_id]  # an id that exists, a key held
    keys = [f"new-{i}" if i % 2 else None for i in range(len(new))] + [None, "old-7"]
    args = [ids, ["big"], ["app"], ["work"], ["default"], [b"1"] * n, [None], [None], keys, [5], [None], [None],
            [None], [None], [None], [None], [None], [None], ["f"], list(range(n)), 86400.0]
    types = ["uuid[]", "text[]", "text[]", "text[]", "text[]", "bytea[]", "float8[]", "timestamptz[]", "text[]",
             "int[]", "jsonb[]", "jsonb[]", "jsonb[]", "float8[]", "float8[]", "jsonb[]", "text[]",
             "timestamptz[]", "text[]", "int[]", "float8"]
    root, inserted = await _explain_generic(
        hist.dsns[1], "task_create", args, types,
        after="SELECT count(*) FROM tasks WHERE created_at >= now()")
    assert inserted == BATCH  # every new request, not the taken id nor the held key (each its own request)
    _assert_probes_only(root, n)
    scans = [p for p in _nodes(root) if p["Node Type"] == "Seq Scan" and p.get("Relation Name") == "idempotency_keys"]
    assert not scans, json.dumps(root)[:4000]


async def test_the_create_statement_keeps_its_generic_plan(make_hist):
    """A prepared statement that Postgres plans again on every call costs its planning each time:
    task_create's two probes per row once made its generic plan look 2.5x a custom one's, and
    every call was planned (+0.6 ms of backend CPU per call of 4 rows). After its five custom
    plans, Postgres must settle on the generic one."""
    hist = await make_hist()
    conn = await asyncpg.connect(hist.dsns[1], timeout=10)
    try:
        await conn.execute(f"PREPARE q AS {QUERIES['task_create']}")
        for n in range(10):
            ids = [hist.task("t").task_id for _ in range(4)]
            keys = [f"k{n}-{i}" for i in range(4)]
            execute = await conn.fetchval(
                "SELECT format('EXECUTE q(%L::uuid[], ''{t}'', ''{a}'', ''{x}'', ''{default}'', ''{1,1,1,1}'', "
                "''{NULL}'', ''{NULL}'', %L::text[], ''{5}'', ''{NULL}'', ''{NULL}'', ''{NULL}'', ''{NULL}'', "
                "''{NULL}'', ''{NULL}'', ''{NULL}'', ''{NULL}'', ''{f}'', ''{0,1,2,3}'', 86400)', $1::uuid[], "
                "$2::text[])", ids, keys)
            await conn.execute(execute)
        plans = await conn.fetchrow("SELECT generic_plans, custom_plans FROM pg_prepared_statements WHERE name = 'q'")
    finally:
        await conn.close()
    assert plans["custom_plans"] == 5 and plans["generic_plans"] == 5, dict(plans)


async def test_a_lease_batch_finds_its_rows_by_key_and_leases_each(make_hist):
    """Session 7: the claim before a lease takes no row locks, so the lease UPDATE is where the
    rows get locked and re-checked (a row no longer ENQUEUED is skipped). It must find them
    through the primary key (one bitmap of the batch's ids, rows visited in page order, as the
    other batch statements over task rows do), never by reading the dispatch index or the table."""
    hist = await make_hist(check_logs=False)
    await _load(hist, "ENQUEUED", version=1, attempt=0)
    ids = [r["task_id"] for r in await hist.sql(1, f"SELECT task_id FROM tasks LIMIT {BATCH}")]
    root, leased = await _explain_generic(
        hist.dsns[1], "task_lease_batch", [ids, "w1", 30.0], ["uuid[]", "text", "float8"],
        after="SELECT count(*) FROM tasks WHERE state = 'LEASED'")
    assert leased == BATCH
    updates = [p for p in _nodes(root) if p["Node Type"] == "ModifyTable" and p.get("Relation Name") == "tasks"]
    assert len(updates) == 1, json.dumps(root)[:4000]
    indexes = {p["Index Name"] for p in _nodes(updates[0]) if "Index Name" in p}
    assert indexes == {"tasks_pkey"}, json.dumps(root)[:4000]
    _assert_probes_only(root, BATCH)


async def _load(hist, state: str, *, version: int, attempt: int) -> None:
    lease = "now() + interval '1 minute'" if state == "LEASED" else "NULL"
    await hist.sql(1, f"""
        INSERT INTO tasks (task_id, tenant_id, app_id, queue, task_type, state, version, attempt, max_attempts,
                           lease_epoch, payload, retry_policy, timeouts, run_at, created_at, updated_at,
                           started_at, worker_id, lease_expires_at, lease_check_at)
        SELECT gen_random_uuid(), 'big', 'app', 'default', 'work', '{state}', {version}, {attempt}, 5, {attempt},
               '1'::bytea, '{{}}', '{{}}', now(), now(), now(), now(), 'w', {lease}, {lease}
          FROM generate_series(1, {ROWS})""")
    await hist.sql(1, "ANALYZE tasks")


async def _explain_generic(dsn: str, name: str, args: list, types: list[str], *, after: str):
    """EXPLAIN ANALYZE of the named query's generic plan (as a prepared statement runs it after its
    fifth call) with these arguments, in a rolled-back transaction; returns (plan, `after`'s value
    read before the rollback)."""
    conn = await asyncpg.connect(dsn, timeout=10)
    try:
        async with conn.transaction():
            await conn.execute("SET LOCAL plan_cache_mode = force_generic_plan")
            await conn.execute(f"PREPARE q AS {QUERIES[name]}")
            # EXPLAIN EXECUTE takes no bind parameters: the arguments go in as literals.
            execute = await conn.fetchval(
                "SELECT format('EXECUTE q(" + ", ".join(f"%L::{t}" for t in types) + ")', "
                + ", ".join(f"${k + 1}::{t}" for k, t in enumerate(types)) + ")", *args)
            raw = await conn.fetchval("EXPLAIN (ANALYZE, BUFFERS, FORMAT JSON) " + execute, timeout=30)
            value = await conn.fetchval(after)
            raise _Rollback
    except _Rollback:
        pass
    finally:
        await conn.close()
    return json.loads(raw)[0]["Plan"], value


def _assert_probes_only(root: dict, n: int) -> None:
    scans = [p for p in _nodes(root) if p["Node Type"] == "Seq Scan" and p.get("Relation Name") == "tasks"]
    assert not scans, json.dumps(root)[:4000]
    touched = root["Shared Hit Blocks"] + root["Shared Read Blocks"]
    assert touched < 40 * n, f"{touched} blocks for {n} rows"


class _Rollback(Exception):
    pass
