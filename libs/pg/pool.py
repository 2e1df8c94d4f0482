"""asyncpg pools with the timeouts every database call must have."""

from __future__ import annotations

import asyncpg


async def create_pool(dsn: str, *, min_size: int = 1, max_size: int = 10,
                      statement_timeout_ms: int = 10_000, command_timeout: float = 15.0) -> asyncpg.Pool:
    """A pool whose every statement is bounded on both the server and the client."""
    return await asyncpg.create_pool(
        dsn,
        min_size=min_size,
        max_size=max_size,
        command_timeout=command_timeout,
        timeout=10,
        server_settings={
            "statement_timeout": str(statement_timeout_ms),
            "idle_in_transaction_session_timeout": "30000",
            "lock_timeout": str(statement_timeout_ms),
        },
    )
