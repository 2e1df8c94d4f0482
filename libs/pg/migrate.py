"""The one migration runner: plain numbered .sql files per service.

`apply(dsn, service, folder)` applies `NNNN_name.sql` files in order, each in
its own transaction, and records `(service, version)` in schema_migrations.
Run it against every shard (and the control database) at start-up; it is
idempotent and safe to run from several processes at once (advisory lock).
"""

from __future__ import annotations

import pathlib
import re

import asyncpg

_FILE = re.compile(r"^(\d{4})_[a-z0-9_]+\.sql$")
_LOCK_KEY = 0x5241_5443  # "RATC"


def migration_files(folder: pathlib.Path) -> list[tuple[int, pathlib.Path]]:
    out = []
    for p in sorted(folder.iterdir()):
        if p.suffix != ".sql":
            continue
        m = _FILE.match(p.name)
        if not m:
            raise ValueError(f"migration file {p} must be named NNNN_snake_case.sql")
        out.append((int(m.group(1)), p))
    versions = [v for v, _ in out]
    if versions != list(range(1, len(versions) + 1)):
        raise ValueError(f"migrations in {folder} must be numbered 0001.. without gaps: {versions}")
    return out


async def apply(dsn: str, service: str, folder: pathlib.Path) -> list[int]:
    """Apply pending migrations; returns the versions applied now."""
    conn = await asyncpg.connect(dsn, timeout=10)
    applied_now = []
    try:
        await conn.execute("SELECT pg_advisory_lock($1)", _LOCK_KEY)
        await conn.execute(
            """CREATE TABLE IF NOT EXISTS schema_migrations (
                 service text NOT NULL, version int NOT NULL,
                 applied_at timestamptz NOT NULL DEFAULT clock_timestamp(),
                 PRIMARY KEY (service, version))"""
        )
        done = {r["version"] for r in await conn.fetch(
            "SELECT version FROM schema_migrations WHERE service = $1", service)}
        for version, path in migration_files(folder):
            if version in done:
                continue
            async with conn.transaction():
                await conn.execute(path.read_text())
                await conn.execute(
                    "INSERT INTO schema_migrations (service, version) VALUES ($1, $2)", service, version)
            applied_now.append(version)
    finally:
        try:
            await conn.execute("SELECT pg_advisory_unlock($1)", _LOCK_KEY)
        finally:
            await conn.close()
    return applied_now
