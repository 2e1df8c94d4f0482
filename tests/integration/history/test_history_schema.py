"""The migrated shard schema equals the committed services/history/schema.sql."""

from __future__ import annotations

import pathlib

import asyncpg

from ratchet.libs.pg import migrate

HISTORY = pathlib.Path(__file__).resolve().parents[3] / "services" / "history"

CATALOG = """
SELECT 'column' AS kind, c.relname AS rel,
       lpad(a.attnum::text, 3, '0') || ' ' || a.attname || ' ' || format_type(a.atttypid, a.atttypmod)
       || CASE WHEN a.attnotnull THEN ' NOT NULL' ELSE '' END
       || coalesce(' DEFAULT ' || pg_get_expr(d.adbin, d.adrelid), '')
       || coalesce(' COLLATE ' || co.collname, '')
       || CASE WHEN a.attstattarget >= 0 THEN ' STATISTICS ' || a.attstattarget ELSE '' END AS def
  FROM pg_attribute a
  JOIN pg_class c ON c.oid = a.attrelid
  LEFT JOIN pg_attrdef d ON d.adrelid = a.attrelid AND d.adnum = a.attnum
  LEFT JOIN pg_collation co ON co.oid = a.attcollation AND co.collname <> 'default'
 WHERE c.relnamespace = 'public'::regnamespace AND c.relkind = 'r' AND a.attnum > 0 AND NOT a.attisdropped
UNION ALL
SELECT 'index column statistics', c.relname, a.attnum || ' ' || a.attstattarget
  FROM pg_attribute a JOIN pg_class c ON c.oid = a.attrelid
 WHERE c.relnamespace = 'public'::regnamespace AND c.relkind = 'i' AND a.attstattarget >= 0
UNION ALL
SELECT 'constraint', c.relname, con.conname || ' ' || pg_get_constraintdef(con.oid)
  FROM pg_constraint con JOIN pg_class c ON c.oid = con.conrelid
 WHERE c.relnamespace = 'public'::regnamespace
UNION ALL
SELECT 'index', tablename, indexdef FROM pg_indexes WHERE schemaname = 'public'
UNION ALL
SELECT 'options', relname, coalesce(array_to_string(reloptions, ','), '')
  FROM pg_class WHERE relnamespace = 'public'::regnamespace AND relkind IN ('r', 'i')
UNION ALL
SELECT 'view', viewname, definition FROM pg_views WHERE schemaname = 'public'
"""


async def _catalog(dsn: str) -> list[tuple[str, str, str]]:
    conn = await asyncpg.connect(dsn, timeout=10)
    try:
        rows = await conn.fetch(CATALOG, timeout=10)
    finally:
        await conn.close()
    return sorted((r["kind"], r["rel"], r["def"]) for r in rows if not r["rel"].startswith("schema_migrations"))


async def test_migrations_produce_the_committed_schema(fresh_db):
    migrated, committed = fresh_db("hist_migrated"), fresh_db("hist_committed")
    assert await migrate.apply(migrated, "history", HISTORY / "migrations") == [1, 2, 3, 4, 5, 6, 7]
    assert await migrate.apply(migrated, "history", HISTORY / "migrations") == []  # idempotent
    conn = await asyncpg.connect(committed, timeout=10)
    try:
        await conn.execute((HISTORY / "schema.sql").read_text(), timeout=30)
    finally:
        await conn.close()
    got, want = await _catalog(migrated), await _catalog(committed)
    assert {r[1] for r in got} >= {"tasks", "task_attempts", "task_transitions", "timers", "idempotency_keys",
                                        "bulk_operations", "bulk_operation_failures"}
    missing = [r for r in want if r not in got]
    extra = [r for r in got if r not in want]
    assert not missing and not extra, f"schema.sql lacks {extra}; migrations lack {missing}"


async def test_the_schema_enforces_its_invariants(fresh_db):
    dsn = fresh_db("hist_checks")
    await migrate.apply(dsn, "history", HISTORY / "migrations")
    conn = await asyncpg.connect(dsn, timeout=10)
    insert = """INSERT INTO tasks (task_id, tenant_id, app_id, queue, task_type, state, max_attempts, payload,
                                   retry_policy, timeouts, run_at, created_at, updated_at, finished_at)
                VALUES (gen_random_uuid(), 't', 'a', 'q', 'x', $1, 1, '1', '{}', '{}', now(), now(), now(), $2)"""
    try:
        await conn.execute(insert, "ENQUEUED", None)
        for state, finished in (("SUCCEEDED", None), ("ENQUEUED", "now"), ("RUNNING", None)):
            try:
                await conn.execute(insert, state, None if finished is None else __import__("datetime").datetime.now(
                    __import__("datetime").timezone.utc))
            except asyncpg.CheckViolationError:
                continue
            raise AssertionError(f"state {state} with finished_at={finished} was accepted")
    finally:
        await conn.close()


async def test_the_transition_log_checker_catches_gaps_forks_and_bad_edges(fresh_db):
    """A checker that never fails proves nothing: corrupt a correct log one way at a time."""
    from .helpers import check_transition_logs
    dsn = fresh_db("hist_logcheck")
    await migrate.apply(dsn, "history", HISTORY / "migrations")
    conn = await asyncpg.connect(dsn, timeout=10)
    tid = "01a22a36-c756-8d73-aca5-6a93404431af"
    try:
        await conn.execute(
            """INSERT INTO tasks (task_id, tenant_id, app_id, queue, task_type, state, version, attempt,
                                  max_attempts, lease_epoch, payload, retry_policy, timeouts, run_at,
                                  created_at, updated_at, lease_expires_at, worker_id, lease_check_at)
               VALUES ($1, 't', 'a', 'q', 'x', 'LEASED', 2, 1, 1, 1, '1', '{}', '{}', now(), now(), now(),
                       now(), 'w', now())""", tid)
        await conn.execute("INSERT INTO task_transitions VALUES ($1, 1, NULL, 'ENQUEUED', 0, now(), 'c'), "
                           "($1, 2, 'ENQUEUED', 'LEASED', 1, now(), 'l')", tid)
        await check_transition_logs(dsn)  # the correct log passes
        corruptions = [  # (break it, put it back)
            ("UPDATE task_transitions SET version = 3 WHERE version = 2",
             "UPDATE task_transitions SET version = 2 WHERE version = 3"),
            ("UPDATE task_transitions SET from_state = 'RETRY_WAIT' WHERE version = 2",
             "UPDATE task_transitions SET from_state = 'ENQUEUED' WHERE version = 2"),
            ("UPDATE task_transitions SET lease_epoch = 5 WHERE version = 1",
             "UPDATE task_transitions SET lease_epoch = 0 WHERE version = 1"),
            ("UPDATE task_transitions SET to_state = 'SUCCEEDED' WHERE version = 2",
             "UPDATE task_transitions SET to_state = 'LEASED' WHERE version = 2"),
            ("UPDATE tasks SET state = 'RETRY_WAIT', lease_expires_at = NULL, lease_check_at = NULL",
             "UPDATE tasks SET state = 'LEASED', lease_expires_at = now(), lease_check_at = now()"),
        ]
        for corrupt, restore in corruptions:
            await conn.execute(corrupt)
            try:
                await check_transition_logs(dsn)
            except AssertionError:
                pass
            else:
                raise AssertionError(f"the checker missed: {corrupt}")
            await conn.execute(restore)
            await check_transition_logs(dsn)
    finally:
        await conn.close()


async def test_analyze_skips_the_columns_no_query_filters_on(fresh_db):
    """Migration 0007: autovacuum's ANALYZE builds statistics for the filtered columns only."""
    dsn = fresh_db("hist_stats")
    await migrate.apply(dsn, "history", HISTORY / "migrations")
    conn = await asyncpg.connect(dsn, timeout=10)
    try:
        await conn.execute("""
            INSERT INTO tasks (task_id, tenant_id, app_id, queue, task_type, state, max_attempts, payload,
                               retry_policy, timeouts, run_at, created_at, updated_at, idempotency_key)
            SELECT gen_random_uuid(), 't' || (i % 3), 'a', 'q', 'x', 'ENQUEUED', 1, convert_to(repeat('p', 200), 'UTF8'),
                   '{"max_attempts": 5}', '{}', now(), now(), now(), 'k' || i
              FROM generate_series(1, 500) i""", timeout=30)
        await conn.execute("""
            INSERT INTO idempotency_keys (tenant_id, app_id, key, task_id, fingerprint, created_at, expires_at)
            SELECT 't', 'a', 'k' || i, gen_random_uuid(), 'f', now(), now() + interval '1 day'
              FROM generate_series(1, 500) i""", timeout=30)
        await conn.execute("ANALYZE tasks, idempotency_keys", timeout=30)
        stats = {(r["tablename"], r["attname"]) for r in await conn.fetch(
            "SELECT tablename, attname FROM pg_stats WHERE schemaname = 'public'", timeout=10)}
        for kept in (("tasks", "state"), ("tasks", "tenant_id"), ("tasks", "run_at"), ("tasks", "created_at")):
            assert kept in stats, f"{kept} lost its statistics"
        for skipped in (("tasks", "payload"), ("tasks", "retry_policy"), ("tasks", "idempotency_key"),
                        ("idempotency_keys", "key"), ("idempotency_keys", "fingerprint"),
                        ("idempotency_keys_hash", "idempotency_key_hash")):
            assert skipped not in stats, f"{skipped} still gets statistics"
    finally:
        await conn.close()
