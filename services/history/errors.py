"""History's errors: the shared vocabulary (libs/rpc/errors), subclassed only where
history knows more (a shard id, a task or operation id, a fixed sentence), and the
translation of a shard database's exceptions into them.

Handlers are decorated with libs/rpc/errors.rpc (or rpc_stream), the one place an error
becomes a status. Per-item outcomes that callers expect (a stale lease on completion or
heartbeat, an idempotency conflict) are not errors: they come back in the response.
These errors fail a whole RPC and change nothing.
"""

from __future__ import annotations

import asyncio

import asyncpg

from ratchet.libs.rpc.errors import (
    Aborted,
    AlreadyExists,
    DeadlineExceeded,
    InvalidArgument,
    NotFound,
    ServiceError,
    TooLarge,
    Unavailable,
)

__all__ = ["CONNECTION_ERRORS", "Contention", "InvalidArgument", "OperationConflict",
           "OperationNotFound", "ShardTimeout", "ShardUnavailable", "TaskNotFound", "TooLarge", "UnknownShard",
           "translate_db_error"]

class UnknownShard(InvalidArgument):
    """The request names a shard this history service does not serve."""

    def __init__(self, shard_id: int, known: list[int]):
        super().__init__(f"shard_id {shard_id} is not served here; known shards: {known}")


class TaskNotFound(NotFound):
    """No such task for this tenant (unknown and foreign ids look the same)."""

    def __init__(self, task_id: str):
        super().__init__(f"task {task_id} not found")


class OperationNotFound(NotFound):
    """No such bulk operation for this tenant (unknown and foreign ids look the same)."""

    def __init__(self, operation_id: str):
        super().__init__(f"bulk operation {operation_id} not found")


class OperationConflict(AlreadyExists):
    """A bulk operation id already names another tenant's or app's operation."""

    def __init__(self, operation_id: str):
        super().__init__(f"bulk operation id {operation_id} is already taken; mint a new one")


class ShardUnavailable(Unavailable):
    """The shard's database cannot be reached; nothing was done, retry later."""

    def __init__(self, shard_id: int, detail: str):
        super().__init__(f"shard {shard_id} is unavailable ({detail}); retry later")


class ShardTimeout(DeadlineExceeded):
    """A database call ran out of time after it was sent: the outcome is unknown."""

    def __init__(self, shard_id: int):
        super().__init__(f"shard {shard_id} did not answer in time; the outcome is unknown, "
                         "retry with the same ids or keys")


class Contention(Aborted):
    """A deadlock or serialization failure rolled the transaction back; safe to retry."""

    def __init__(self, detail: str):
        super().__init__(f"{detail}; the request was rolled back, retry it")


# Errors that mean the database could not be reached (nothing was sent, or
# the connection died): the caller may retry.
CONNECTION_ERRORS = (OSError, asyncpg.PostgresConnectionError, asyncpg.InterfaceError,
                     asyncpg.CannotConnectNowError, asyncpg.TooManyConnectionsError,
                     asyncpg.AdminShutdownError, asyncpg.CrashShutdownError)


def translate_db_error(shard_id: int, exc: BaseException) -> ServiceError | None:
    """The domain error for a database exception, or None when it is a bug."""
    if isinstance(exc, asyncpg.exceptions._base.DataError):
        return None  # asyncpg refused our values: a bug here, not the shard's
    if isinstance(exc, asyncpg.exceptions._base.InternalClientError):
        # What asyncpg raises on a connection whose backend was terminated while
        # idle: the query was never sent, and the connection is unusable.
        return ShardUnavailable(shard_id, "connection lost")
    if isinstance(exc, (asyncpg.QueryCanceledError, asyncio.TimeoutError, TimeoutError)):
        return ShardTimeout(shard_id)
    if isinstance(exc, (asyncpg.DeadlockDetectedError, asyncpg.SerializationError,
                        asyncpg.LockNotAvailableError)):
        return Contention(f"shard {shard_id} hit a deadlock or serialization failure")
    if isinstance(exc, CONNECTION_ERRORS):
        return ShardUnavailable(shard_id, type(exc).__name__)
    return None
