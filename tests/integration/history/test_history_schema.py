"""The migrated shard schema equals the committed services/history/schema.sql."""

from __future__ import annotations

import asyncio
import pathlib
import uuid

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
    assert await migrate.apply(migrated, "history", HISTORY / "migrations") == list(range(1, 19))
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
    """A checker that never fails proves nothing: corrupt a correct log one way at a time.

    Since migration 0008 a task's log is partly implied by its row (the create, a running
    lease), so the corruptions are made to the rows the view reads: the task row and task_log.
    """
    from .helpers import check_transition_logs
    dsn = fresh_db("hist_logcheck")
    await migrate.apply(dsn, "history", HISTORY / "migrations")
    conn = await asyncpg.connect(dsn, timeout=10)
    leased, done = "01a22a36-c756-8d73-aca5-6a93404431af", "01a22a36-c756-8d73-aca5-6a93404431b0"
    try:
        await conn.execute(
            """INSERT INTO tasks (task_id, tenant_id, app_id, queue, task_type, state, version, attempt,
                                  max_attempts, lease_epoch, payload, retry_policy, timeouts, run_at,
                                  created_at, updated_at, lease_expires_at, worker_id, lease_check_at)
               VALUES ($1, 't', 'a', 'q', 'x', 'LEASED', 2, 1, 1, 1, '1', '{}', '{}', now(), now(), now(),
                       now(), 'w', now())""", leased)
        await conn.execute(
            """INSERT INTO tasks (task_id, tenant_id, app_id, queue, task_type, state, version, attempt,
                                  max_attempts, lease_epoch, payload, retry_policy, timeouts, run_at,
                                  created_at, updated_at, finished_at, worker_id)
               VALUES ($1, 't', 'a', 'q', 'x', 'SUCCEEDED', 3, 1, 1, 1, '1', '{}', '{}', now(), now(), now(),
                       now(), 'w')""", done)
        await conn.execute(
            """INSERT INTO task_log (task_id, version, from_state, to_state, lease_epoch, at, reason, outcome,
                                     leased_at, attempt, worker_id)
               VALUES ($1, 3, 'LEASED', 'SUCCEEDED', 1, now(), 's', 'SUCCEEDED', now(), 1, 'w')""", done)
        implied = "01a22a36-c756-8d73-aca5-6a93404431b2"  # a first lease's success: no log row (0010)
        await conn.execute(
            """INSERT INTO tasks (task_id, tenant_id, app_id, queue, task_type, state, version, attempt,
                                  max_attempts, lease_epoch, payload, retry_policy, timeouts, run_at,
                                  created_at, updated_at, started_at, finished_at, worker_id)
               VALUES ($1, 't', 'a', 'q', 'x', 'SUCCEEDED', 3, 1, 1, 1, '1', '{}', '{}', now(), now(), now(),
                       now(), now(), 'w')""", implied)
        for task_id in (done, implied):
            log = await conn.fetch("SELECT version, from_state, to_state FROM task_transitions WHERE task_id = $1 "
                                   "ORDER BY version", task_id)
            assert [tuple(r) for r in log] == [(1, None, "ENQUEUED"), (2, "ENQUEUED", "LEASED"),
                                               (3, "LEASED", "SUCCEEDED")]
        await check_transition_logs(dsn)  # the correct log passes
        corruptions = [  # (break it, put it back)
            ("UPDATE task_log SET version = 4", "UPDATE task_log SET version = 3"),
            ("UPDATE task_log SET lease_epoch = 5", "UPDATE task_log SET lease_epoch = 1"),
            ("UPDATE task_log SET to_state = 'CANCELED'", "UPDATE task_log SET to_state = 'SUCCEEDED'"),
            ("UPDATE task_log SET from_state = 'ENQUEUED', outcome = NULL, leased_at = NULL, attempt = NULL, "
             "worker_id = NULL",
             "UPDATE task_log SET from_state = 'LEASED', outcome = 'SUCCEEDED', leased_at = now(), attempt = 1, "
             "worker_id = 'w'"),
            (f"UPDATE tasks SET version = 4 WHERE task_id = '{implied}'",
             f"UPDATE tasks SET version = 3 WHERE task_id = '{implied}'"),
            (f"UPDATE tasks SET state = 'FAILED' WHERE task_id = '{implied}'",
             f"UPDATE tasks SET state = 'SUCCEEDED' WHERE task_id = '{implied}'"),
            (f"UPDATE tasks SET version = 3 WHERE task_id = '{leased}'",
             f"UPDATE tasks SET version = 2 WHERE task_id = '{leased}'"),
            (f"UPDATE tasks SET state = 'RETRY_WAIT', lease_expires_at = NULL, lease_check_at = NULL "
             f"WHERE task_id = '{leased}'",
             f"UPDATE tasks SET state = 'LEASED', lease_expires_at = now(), lease_check_at = now() "
             f"WHERE task_id = '{leased}'"),
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


async def test_the_log_refuses_rows_the_task_row_implies(fresh_db):
    """Migration 0008: no lease rows, and a row leaving LEASED must carry its lease."""
    dsn = fresh_db("hist_logrows")
    await migrate.apply(dsn, "history", HISTORY / "migrations")
    conn = await asyncpg.connect(dsn, timeout=10)
    tid = "01a22a36-c756-8d73-aca5-6a93404431b1"
    cols = "(task_id, version, from_state, to_state, lease_epoch, at, reason, outcome, leased_at, attempt, worker_id)"
    try:
        for values in ("($1, 2, 'ENQUEUED', 'LEASED', 1, now(), 'l', NULL, now(), 1, 'w')",  # a lease row
                       "($1, 3, 'LEASED', 'SUCCEEDED', 1, now(), 's', 'SUCCEEDED', NULL, NULL, NULL)",  # no lease
                       "($1, 3, 'LEASED', 'SUCCEEDED', 1, now(), 's', 'SUCCEEDED', now(), 1, NULL)",  # no worker
                       "($1, 2, 'ENQUEUED', 'CANCELED', 0, now(), 'c', NULL, now(), 1, 'w')"):  # lease, not leased
            try:
                await conn.execute(f"INSERT INTO task_log {cols} VALUES {values}", tid)
            except asyncpg.CheckViolationError:
                continue
            raise AssertionError(f"task_log accepted {values}")
    finally:
        await conn.close()


def _migrations_up_to(tmp_path, last: int):
    """A folder holding the history migrations 0001..last (a database migrated from it stands
    where a shard stood before the later ones)."""
    folder = tmp_path / f"migrations_{last}"
    folder.mkdir()
    for f in sorted((HISTORY / "migrations").glob("*.sql")):
        if int(f.name[:4]) <= last:
            (folder / f.name).write_text(f.read_text())
    return folder


async def _logs_and_attempts(conn) -> tuple[list[tuple], list[tuple]]:
    """Every transition and every attempt of a shard, as the views list them."""
    return ([tuple(r) for r in await conn.fetch("SELECT * FROM task_transitions ORDER BY task_id, version")],
            [tuple(r) for r in await conn.fetch("SELECT * FROM task_attempts ORDER BY task_id, attempt")])


async def test_migration_0008_keeps_every_log_and_attempt(fresh_db, tmp_path):
    """Logs written in the old form (a row per transition) read the same through the views after
    migration 0008 folds them: closed leases into their ends, running leases and creates into the
    task rows (a bulk retry's create, whose reason names the operation, stays a row)."""
    old = _migrations_up_to(tmp_path, 7)
    dsn = fresh_db("hist_0008")
    assert await migrate.apply(dsn, "history", old) == [1, 2, 3, 4, 5, 6, 7]
    ids = {k: f"01a22a36-c756-8d73-aca5-6a93404431{n:02x}" for n, k in enumerate("sleqr", start=0xc0)}
    conn = await asyncpg.connect(dsn, timeout=10)
    try:
        task = """INSERT INTO tasks (task_id, tenant_id, app_id, queue, task_type, state, version, attempt,
                                     max_attempts, lease_epoch, payload, retry_policy, timeouts, run_at,
                                     created_at, updated_at, finished_at, worker_id, lease_expires_at,
                                     lease_check_at, retry_of)
                  VALUES ($1, 't', 'a', 'q', 'x', $2, $3, $4::int, 3, $4::int, '1', '{}', '{}', now(),
                          '2026-01-01T00:00:00Z', $5, $6, $7, $8, $8, $9)"""
        t0 = __import__("datetime").datetime(2026, 1, 1, tzinfo=__import__("datetime").timezone.utc)
        at = [t0 + __import__("datetime").timedelta(seconds=s) for s in range(10)]
        # s: succeeded first time; l: leased now; e: failed once, retried, succeeded; q: enqueued;
        # r: a bulk retry of s, enqueued.
        await conn.execute(task, ids["s"], "SUCCEEDED", 3, 1, at[2], at[2], "w1", None, None)
        await conn.execute(task, ids["l"], "LEASED", 2, 1, at[1], None, "w2", at[9], None)
        await conn.execute(task, ids["e"], "SUCCEEDED", 6, 2, at[6], at[6], "w4", None, None)
        await conn.execute(task, ids["q"], "ENQUEUED", 1, 0, at[0], None, None, None, None)
        await conn.execute(task, ids["r"], "ENQUEUED", 1, 0, at[0], None, None, None, ids["s"])
        log = """INSERT INTO task_transitions (task_id, version, from_state, to_state, lease_epoch, at, reason,
                                               attempt, worker_id, outcome, error_class, error_message)
                 VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12)"""
        rows = [
            (ids["s"], 1, None, "ENQUEUED", 0, t0, "created", None, None, None, None, None),
            (ids["s"], 2, "ENQUEUED", "LEASED", 1, at[1], "leased", 1, "w1", None, None, None),
            (ids["s"], 3, "LEASED", "SUCCEEDED", 1, at[2], "succeeded", None, None, "SUCCEEDED", None, None),
            (ids["l"], 1, None, "ENQUEUED", 0, t0, "created", None, None, None, None, None),
            (ids["l"], 2, "ENQUEUED", "LEASED", 1, at[1], "leased", 1, "w2", None, None, None),
            (ids["e"], 1, None, "ENQUEUED", 0, t0, "created", None, None, None, None, None),
            (ids["e"], 2, "ENQUEUED", "LEASED", 1, at[1], "leased", 1, "w3", None, None, None),
            (ids["e"], 3, "LEASED", "RETRY_WAIT", 1, at[2], "attempt 1 failed, retrying", None, None, "FAILED",
             "ValueError", "bad"),
            (ids["e"], 4, "RETRY_WAIT", "ENQUEUED", 1, at[4], "retry backoff elapsed", None, None, None, None,
             None),
            (ids["e"], 5, "ENQUEUED", "LEASED", 2, at[5], "leased", 2, "w4", None, None, None),
            (ids["e"], 6, "LEASED", "SUCCEEDED", 2, at[6], "succeeded", None, None, "SUCCEEDED", None, None),
            (ids["q"], 1, None, "ENQUEUED", 0, t0, "created", None, None, None, None, None),
            (ids["r"], 1, None, "ENQUEUED", 0, t0, "retried by operation op-1", None, None, None, None, None),
        ]
        await conn.executemany(log, rows)

        before = await _logs_and_attempts(conn)
        assert len(before[0]) == len(rows) and len(before[1]) == 4
        assert await migrate.apply(dsn, "history", _migrations_up_to(tmp_path, 8)) == [8]
        assert await _logs_and_attempts(conn) == before
        stored = await conn.fetch("SELECT task_id, version FROM task_log ORDER BY task_id, version")
        assert [(str(r["task_id"]), r["version"]) for r in stored] == sorted(
            [(ids["s"], 3), (ids["e"], 3), (ids["e"], 4), (ids["e"], 6), (ids["r"], 1)])
    finally:
        await conn.close()


async def test_migration_0010_keeps_every_log_and_attempt(fresh_db, tmp_path):
    """A first lease's success stored as a log row before migration 0010 is dropped by it and read
    off the task row, the same; a second attempt's success and a version-3 success logged with
    another reason keep their rows."""
    old = _migrations_up_to(tmp_path, 9)
    dsn = fresh_db("hist_0010")
    assert await migrate.apply(dsn, "history", old) == [1, 2, 3, 4, 5, 6, 7, 8, 9]
    dt = __import__("datetime")
    t0 = dt.datetime(2026, 1, 1, tzinfo=dt.timezone.utc)
    at = [t0 + dt.timedelta(seconds=s) for s in range(10)]
    ids = [f"01a22a36-c756-8d73-aca5-6a93404431{n:02x}" for n in range(0xd0, 0xd3)]
    conn = await asyncpg.connect(dsn, timeout=10)
    try:
        task = """INSERT INTO tasks (task_id, tenant_id, app_id, queue, task_type, state, version, attempt,
                                     max_attempts, lease_epoch, payload, retry_policy, timeouts, run_at,
                                     created_at, updated_at, started_at, finished_at, worker_id)
                  VALUES ($1, 't', 'a', 'q', 'x', 'SUCCEEDED', $2::bigint, $3::int, 3, $3::int, '1', '{}', '{}',
                          now(), $4, $5, $6, $5, 'w')"""
        await conn.execute(task, ids[0], 3, 1, t0, at[2], at[1])  # first lease's success
        await conn.execute(task, ids[1], 3, 1, t0, at[2], at[1])  # same, logged with another reason
        await conn.execute(task, ids[2], 6, 2, t0, at[6], at[1])  # second attempt's success
        log = """INSERT INTO task_log (task_id, version, from_state, to_state, lease_epoch, at, reason, outcome,
                                       leased_at, attempt, worker_id, error_class)
                 VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12)"""
        await conn.executemany(log, [
            (ids[0], 3, "LEASED", "SUCCEEDED", 1, at[2], "succeeded", "SUCCEEDED", at[1], 1, "w", None),
            (ids[1], 3, "LEASED", "SUCCEEDED", 1, at[2], "succeeded late", "SUCCEEDED", at[1], 1, "w", None),
            (ids[2], 3, "LEASED", "RETRY_WAIT", 1, at[2], "retrying", "FAILED", at[1], 1, "w0", "E"),
            (ids[2], 4, "RETRY_WAIT", "ENQUEUED", 1, at[4], "retry backoff elapsed", None, None, None, None, None),
            (ids[2], 6, "LEASED", "SUCCEEDED", 2, at[6], "succeeded", "SUCCEEDED", at[5], 2, "w", None),
        ])

        before = await _logs_and_attempts(conn)
        assert len(before[0]) == 3 + 3 + 6 and len(before[1]) == 1 + 1 + 2
        assert await migrate.apply(dsn, "history", _migrations_up_to(tmp_path, 10)) == [10]
        assert await _logs_and_attempts(conn) == before
        stored = await conn.fetch("SELECT task_id, version FROM task_log ORDER BY task_id, version")
        assert [(str(r["task_id"]), r["version"]) for r in stored] == [
            (ids[1], 3), (ids[2], 3), (ids[2], 4), (ids[2], 6)]
    finally:
        await conn.close()


async def test_migrations_0012_and_0013_keep_every_task_row(fresh_db, tmp_path):
    """0012 rewrites tasks with its columns in a new order and 0013 stores the default queue,
    policy and timeouts as NULL: every row reads back the same, column by column (NULL read as
    the default), and only the defaults became NULL."""
    old = _migrations_up_to(tmp_path, 11)
    dsn = fresh_db("hist_0013")
    assert await migrate.apply(dsn, "history", old) == list(range(1, 12))
    ids = [f"01a22a36-c756-8d73-aca5-6a93404431{n:02x}" for n in range(0xe0, 0xe3)]
    conn = await asyncpg.connect(dsn, timeout=10)
    read = """SELECT *, COALESCE(queue, 'default') AS q, COALESCE(retry_policy, '{}') AS rp,
                      COALESCE(timeouts, '{}') AS tmo FROM tasks ORDER BY task_id"""
    try:
        insert = """INSERT INTO tasks (task_id, tenant_id, app_id, queue, task_type, state, version, attempt,
                                       max_attempts, lease_epoch, payload, retry_policy, timeouts, run_at,
                                       created_at, updated_at, started_at, worker_id, lease_expires_at,
                                       lease_check_at, attempt_deadline)
                    VALUES ($1, 't', 'a', $2, 'x', 'LEASED', 2, 1, 3, 1, '1', $3::jsonb, $4::jsonb, now(),
                            now(), now(), now(), 'w', now() + interval '1 minute', now() + interval '1 minute',
                            now() + interval '10 minutes')"""
        await conn.execute(insert, ids[0], "default", "{}", "{}")
        await conn.execute(insert, ids[1], "mail", '{"max_attempts": 9}', '{"start_to_close_s": 5}')
        await conn.execute(insert, ids[2], "default", '{"factor": 3}', "{}")
        before = [{k: v for k, v in dict(r).items() if k not in ("queue", "retry_policy", "timeouts")}
                  for r in await conn.fetch(read)]
        logs = await _logs_and_attempts(conn)
        assert await migrate.apply(dsn, "history", HISTORY / "migrations") == [12, 13, 14, 15, 16, 17, 18]
        # (0017 adds parent_id, NULL on every task that was there)
        after = [dict(r) for r in await conn.fetch(read)]
        assert all(r.pop("parent_id") is None for r in after)
        assert [{k: v for k, v in r.items() if k not in ("queue", "retry_policy", "timeouts")}
                for r in after] == before
        assert [(r["queue"], r["retry_policy"], r["timeouts"]) for r in after] == [
            (None, None, None), ("mail", '{"max_attempts": 9}', '{"start_to_close_s": 5}'),
            (None, '{"factor": 3}', None)]
        assert await _logs_and_attempts(conn) == logs
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
            SELECT gen_random_uuid(), 't' || (i % 3), 'a', 'q', 'x', 'ENQUEUED', 1,
                   convert_to(repeat('p', 200), 'UTF8'), '{"max_attempts": 5}', '{}', now(), now(), now(), 'k' || i
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


async def test_analyze_samples_tasks_coarsely(fresh_db):
    """Migration 0014: tasks keeps statistics at target 10 (ANALYZE samples 3,000 rows, not
    30,000): at most ten most-common values and an 11-bound histogram per column, still on
    every column a query filters on."""
    dsn = fresh_db("hist_coarse")
    await migrate.apply(dsn, "history", HISTORY / "migrations")
    conn = await asyncpg.connect(dsn, timeout=10)
    try:
        await conn.execute("""
            INSERT INTO tasks (task_id, tenant_id, app_id, queue, task_type, state, max_attempts, payload,
                               run_at, created_at, updated_at)
            SELECT gen_random_uuid(), 't' || (i % 40), 'a' || (i % 40), 'q', 'x', 'ENQUEUED', 1, '\\x6e756c6c',
                   now() + i * interval '1 second', now(), now()
              FROM generate_series(1, 6000) i""", timeout=30)
        await conn.execute("ANALYZE tasks", timeout=30)
        rows = {r["attname"]: r for r in await conn.fetch(
            "SELECT attname, most_common_vals::text AS mcv, histogram_bounds::text AS hist FROM pg_stats "
            "WHERE schemaname = 'public' AND tablename = 'tasks'", timeout=10)}
        assert {"state", "tenant_id", "app_id", "run_at", "finished_at", "lease_check_at"} <= set(rows)
        hist = rows["run_at"]["hist"]
        assert hist is not None and hist.count(",") + 1 <= 11, hist  # (default target: 101 bounds)
        mcv = rows["tenant_id"]["mcv"]
        assert mcv is None or mcv.count(",") + 1 <= 10, mcv
        targets = dict(await conn.fetch(
            "SELECT attname, attstattarget FROM pg_attribute WHERE attrelid = 'tasks'::regclass AND attnum > 0 "
            "AND NOT attisdropped", timeout=10))
        assert set(targets.values()) == {0, 10}, targets  # (none left at the default, -1)
    finally:
        await conn.close()


async def test_a_new_rows_times_default_to_the_transactions_start(fresh_db):
    """Migration 0015: created_at, run_at and updated_at default to now() (what the COPY of
    uniform tasks leaves to the table), a stable default, so COPY keeps its multi-row insert."""
    dsn = fresh_db("hist_times")
    await migrate.apply(dsn, "history", HISTORY / "migrations")
    conn = await asyncpg.connect(dsn, timeout=10)
    try:
        defaults = dict(await conn.fetch(
            "SELECT a.attname, pg_get_expr(d.adbin, d.adrelid) FROM pg_attrdef d JOIN pg_attribute a "
            "ON a.attrelid = d.adrelid AND a.attnum = d.adnum WHERE d.adrelid = 'tasks'::regclass "
            "AND a.attname IN ('created_at', 'run_at', 'updated_at')", timeout=10))
        assert defaults == {"created_at": "now()", "run_at": "now()", "updated_at": "now()"}
        assert await conn.fetchval("SELECT provolatile::text FROM pg_proc WHERE proname = 'now'", timeout=10) == "s"
        async with conn.transaction():
            start = await conn.fetchval("SELECT now()")
            await asyncio.sleep(0.02)
            await conn.copy_records_to_table("tasks", columns=("task_id", "tenant_id", "app_id", "task_type", "state",
                                                               "max_attempts", "payload"),
                                             records=[(uuid.uuid4(), "t", "a", "x", "ENQUEUED", 1, b"null")])
            row = await conn.fetchrow("SELECT created_at, run_at, updated_at FROM tasks")
        assert row["created_at"] == row["run_at"] == row["updated_at"] == start
    finally:
        await conn.close()
