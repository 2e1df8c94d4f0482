"""The final dump: every row of the checker's tables on every shard (the tasks'
schedule_id and scheduled_time columns included, and the workflow tables when the
shards have them), and the cron database's
schedules and slots, as JSON."""

from __future__ import annotations

import asyncio
import datetime as dt
import decimal
import json
import pathlib
import uuid

TABLES = ("tasks", "task_attempts", "task_transitions", "timers", "idempotency_keys",
          # workflows (migration 0016): the step log, the open waits, the inbox
          "workflow_steps", "workflow_waits", "workflow_inbox")
# services/cron/migrations/0001_schedules.sql
CRON_TABLES = ("schedules", "schedule_slots")


def _plain(value):
    if isinstance(value, (uuid.UUID, decimal.Decimal)):
        return str(value) if isinstance(value, uuid.UUID) else float(value)
    if isinstance(value, (dt.datetime, dt.date)):
        return value.isoformat()
    if isinstance(value, dt.timedelta):
        return value.total_seconds()
    if isinstance(value, (bytes, bytearray, memoryview)):
        return bytes(value).decode("utf-8", "replace")
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    return value


async def _dump_shard(dsn: str, tables: tuple[str, ...]) -> tuple[dict, str]:
    import asyncpg

    conn = await asyncpg.connect(dsn, timeout=10)
    try:
        # One snapshot for every table: a consistent cut even if something still runs.
        async with conn.transaction(isolation="repeatable_read", readonly=True):
            now = await conn.fetchval("SELECT clock_timestamp()", timeout=10)
            out = {}
            present = {r["tablename"] for r in await conn.fetch(
                "SELECT tablename FROM pg_tables WHERE schemaname = 'public' "
                "UNION SELECT viewname FROM pg_views WHERE schemaname = 'public'", timeout=10)}
            for table in tables:
                if table not in present:
                    continue
                rows = await conn.fetch(f'SELECT * FROM "{table}"', timeout=60)
                out[table] = [{k: _plain(v) for k, v in r.items()} for r in rows]
        return out, now.isoformat()
    finally:
        await conn.close(timeout=5)


def dump_shards(dsns: dict[str, str], path: str | pathlib.Path | None = None,
                tables: tuple[str, ...] = TABLES, cron_dsn: str | None = None) -> dict:
    """Dump every shard ({shard_id: dsn}), and the cron database when `cron_dsn` is given
    (under "cron": {db_now, schedules, schedule_slots}); write it to `path` when given."""
    async def run():
        return await asyncio.gather(*(_dump_shard(dsn, tables) for dsn in dsns.values()))
    results = asyncio.run(run())
    dump = {"db_now": max(now for _, now in results) if results else None,
            "shards": {sid: tables_ for sid, (tables_, _) in zip(dsns, results, strict=True)}}
    if cron_dsn is not None:
        cron, now = asyncio.run(_dump_shard(cron_dsn, CRON_TABLES))
        dump["cron"] = {"db_now": now, **cron}
    if path is not None:
        pathlib.Path(path).write_text(json.dumps(dump, default=str))
    return dump


def platform_shard_dsns(platform) -> dict[str, str]:
    """The shard databases of a LocalPlatform, reached directly (never through a proxy)."""
    return {str(i): platform.cluster.dsn(f"ratchet_shard_{i}") for i in range(platform.shards)}


def await_timer_quiescence(dsns: dict[str, str], timeout_s: float) -> dict:
    """Wait until no timer is left for a finished task (a lease timer rescheduled while the task
    completed may outlive it until it fires and is discarded). Returns {"found", "left"}."""
    import time

    async def count() -> int:
        import asyncpg

        total = 0
        for dsn in dsns.values():
            conn = await asyncpg.connect(dsn, timeout=10)
            try:
                total += await conn.fetchval(
                    "SELECT count(*) FROM timers m JOIN tasks t ON t.task_id = m.task_id "
                    "WHERE t.state IN ('SUCCEEDED', 'FAILED', 'CANCELED', 'EXPIRED')", timeout=10)
            finally:
                await conn.close(timeout=5)
        return total

    deadline = time.monotonic() + timeout_s
    found = left = asyncio.run(count())
    while left and time.monotonic() < deadline:
        time.sleep(0.25)
        left = asyncio.run(count())
    return {"found": found, "left": left}
