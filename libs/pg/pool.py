"""asyncpg pools with the timeouts every database call must have."""

from __future__ import annotations

import asyncpg


async def _keep_session(_conn: asyncpg.Connection) -> None:
    """Pool reset hook that sends nothing.

    asyncpg's default reset runs `SELECT pg_advisory_unlock_all(); CLOSE ALL;
    UNLISTEN *; RESET ALL` on every release: one more round trip and one more
    commit per request (pg_stat_statements showed ~1.06 reset calls per
    enqueue). Our services keep no session state (no advisory locks, cursors
    across calls, LISTEN or SET), and asyncpg still rolls back a transaction
    left open before this hook runs, so the reset query buys nothing.
    """


async def create_pool(dsn: str, *, min_size: int = 1, max_size: int = 10,
                      statement_timeout_ms: int = 10_000, command_timeout: float = 15.0,
                      settings: dict[str, str] | None = None) -> asyncpg.Pool:
    """A pool whose every statement is bounded on both the server and the client; `settings`
    are further session settings every connection starts with (see settable)."""
    return await asyncpg.create_pool(
        dsn,
        min_size=min_size,
        max_size=max_size,
        command_timeout=command_timeout,
        timeout=10,
        reset=_keep_session,
        server_settings={
            "statement_timeout": str(statement_timeout_ms),
            "idle_in_transaction_session_timeout": "30000",
            "lock_timeout": str(statement_timeout_ms),
            **(settings or {}),
        },
    )


async def settable(dsn: str, wanted: dict[str, str], timeout: float = 10.0) -> tuple[dict[str, str], dict[str, str]]:
    """(the session settings of `wanted` this DSN's role may start its sessions with, why the
    others may not): each is tried with set_config on one connection. A setting refused at
    start-up would fail every connection of a pool, not just name itself: a superuser-only
    one (wal_compression) needs superuser or, since Postgres 15, GRANT SET ON PARAMETER; a
    value the server was built without (lz4) is refused too."""
    ok: dict[str, str] = {}
    refused: dict[str, str] = {}
    conn = await asyncpg.connect(dsn, timeout=timeout)
    try:
        for name, value in wanted.items():
            try:
                await conn.execute("SELECT set_config($1, $2, false)", name, value, timeout=timeout)
            except asyncpg.PostgresError as e:
                refused[name] = f"{type(e).__name__}: {e}"
            else:
                ok[name] = value
    finally:
        await conn.close(timeout=timeout)
    return ok, refused
