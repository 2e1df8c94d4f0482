"""History's domain errors and their gRPC status: the one place where the
mapping happens (HTTP follows from ratchet.libs.rpc.status).

Per-item outcomes that callers expect (a stale lease on completion or
heartbeat, an idempotency conflict) are not errors: they come back in the
response. These errors fail a whole RPC and change nothing.
"""

from __future__ import annotations

import asyncio
import functools
import logging
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import asyncpg
import grpc

log = logging.getLogger(__name__)


class HistoryError(Exception):
    """Base of history's domain errors; `code` is the gRPC status."""

    code = grpc.StatusCode.INTERNAL


class InvalidArgument(HistoryError):
    """The request is malformed; the message says what to fix."""

    code = grpc.StatusCode.INVALID_ARGUMENT


class UnknownShard(InvalidArgument):
    """The request names a shard this history service does not serve."""

    def __init__(self, shard_id: int, known: list[int]):
        super().__init__(f"shard_id {shard_id} is not served here; known shards: {known}")


class PayloadTooLarge(HistoryError):
    """A payload is over the inline limit."""

    code = grpc.StatusCode.RESOURCE_EXHAUSTED


class NotFound(HistoryError):
    """No such task for this tenant (unknown and foreign ids look the same)."""

    code = grpc.StatusCode.NOT_FOUND

    def __init__(self, task_id: str):
        super().__init__(f"task {task_id} not found")


class OperationNotFound(HistoryError):
    """No such bulk operation for this tenant (unknown and foreign ids look the same)."""

    code = grpc.StatusCode.NOT_FOUND

    def __init__(self, operation_id: str):
        super().__init__(f"bulk operation {operation_id} not found")


class OperationConflict(HistoryError):
    """A bulk operation id already names another tenant's or app's operation."""

    code = grpc.StatusCode.ALREADY_EXISTS

    def __init__(self, operation_id: str):
        super().__init__(f"bulk operation id {operation_id} is already taken; mint a new one")


class ShardUnavailable(HistoryError):
    """The shard's database cannot be reached; nothing was done, retry later."""

    code = grpc.StatusCode.UNAVAILABLE

    def __init__(self, shard_id: int, detail: str):
        super().__init__(f"shard {shard_id} is unavailable ({detail}); retry later")


class ShardTimeout(HistoryError):
    """A database call ran out of time after it was sent: the outcome is unknown."""

    code = grpc.StatusCode.DEADLINE_EXCEEDED

    def __init__(self, shard_id: int):
        super().__init__(f"shard {shard_id} did not answer in time; the outcome is unknown, "
                         "retry with the same ids or keys")


class Contention(HistoryError):
    """A deadlock or serialization failure rolled the transaction back; safe to retry."""

    code = grpc.StatusCode.ABORTED

    def __init__(self, detail: str):
        super().__init__(f"{detail}; the request was rolled back, retry it")


# Errors that mean the database could not be reached (nothing was sent, or
# the connection died): the caller may retry.
CONNECTION_ERRORS = (OSError, asyncpg.PostgresConnectionError, asyncpg.InterfaceError,
                     asyncpg.CannotConnectNowError, asyncpg.TooManyConnectionsError,
                     asyncpg.AdminShutdownError, asyncpg.CrashShutdownError)


def translate_db_error(shard_id: int, exc: BaseException) -> HistoryError | None:
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


async def _abort(context: grpc.aio.ServicerContext, exc: BaseException, method: str) -> None:
    if isinstance(exc, HistoryError):
        await context.abort(exc.code, str(exc))
    log.exception("unexpected error in %s", method)
    await context.abort(grpc.StatusCode.INTERNAL, f"internal error in {method}: {type(exc).__name__}")


def rpc(fn: Callable[..., Awaitable[Any]]) -> Callable[..., Awaitable[Any]]:
    """Decorate a unary handler so domain errors become their gRPC status."""

    @functools.wraps(fn)
    async def wrapper(self, request, context):
        try:
            return await fn(self, request, context)
        except asyncio.CancelledError:
            raise
        except grpc.aio.AbortError:
            raise
        except Exception as exc:  # noqa: BLE001 - every domain error and any bug end here, once: a status
            await _abort(context, exc, fn.__name__)

    return wrapper


def rpc_stream(fn: Callable[..., AsyncIterator[Any]]) -> Callable[..., AsyncIterator[Any]]:
    """Like `rpc`, for server-streaming handlers."""

    @functools.wraps(fn)
    async def wrapper(self, request, context):
        try:
            async for item in fn(self, request, context):
                yield item
        except asyncio.CancelledError:
            raise
        except grpc.aio.AbortError:
            raise
        except Exception as exc:  # noqa: BLE001 - as in rpc: every error becomes the stream's status
            await _abort(context, exc, fn.__name__)

    return wrapper
