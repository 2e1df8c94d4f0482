"""The one error edge of every service: domain errors with a gRPC code (and so an HTTP
status, libs/rpc/status), and the decorators that turn whatever a handler raises into
the call's status.

A handler raises a ServiceError subclass with a sentence that says what to fix; the
edge answers with its code and message (and its extra fields as trailing metadata,
e.g. `ratchet-original-task-id`). A TimeoutError is DEADLINE_EXCEEDED; anything else is
a bug: logged with its traceback and answered INTERNAL, never with its text. One
vocabulary: the classes here, subclassed by a service only to add what it knows
(a shard id, a fixed sentence).
"""

from __future__ import annotations

import asyncio
import functools
import logging
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import grpc

from ratchet.libs.rpc.status import http_status

log = logging.getLogger(__name__)

# Trailing-metadata keys (gRPC) that mirror an error's extra fields (REST: the JSON body).
META_PREFIX = "ratchet-"


class ServiceError(Exception):
    """A refusal with a gRPC code, a message saying what to do, an optional explicit HTTP
    status (413 for oversize input, which has no gRPC code of its own) and extra fields."""

    code: grpc.StatusCode = grpc.StatusCode.INTERNAL

    def __init__(self, message: str, *, http: int | None = None, **fields: str):
        super().__init__(message)
        self.message = message
        self.http = http
        self.fields = fields

    @property
    def http_status(self) -> int:
        """The HTTP status: explicit when the error has one, else the shared table."""
        return self.http or http_status(self.code)

    def trailing_metadata(self) -> tuple[tuple[str, str], ...]:
        """Extra fields as gRPC trailing metadata, e.g. ratchet-original-task-id."""
        return tuple((META_PREFIX + k.replace("_", "-"), str(v)) for k, v in sorted(self.fields.items()))

    def to_json(self) -> dict:
        """The REST error body."""
        body: dict[str, Any] = {"code": self.code.name, "http_status": self.http_status, "message": self.message}
        body.update(self.fields)
        return {"error": body}


class InvalidArgument(ServiceError):
    """Bad input: nothing was written; the message names the field and how to fix it."""

    code = grpc.StatusCode.INVALID_ARGUMENT


class TooLarge(ServiceError):
    """Input over a size limit: RESOURCE_EXHAUSTED (the code gRPC uses for a message over
    its limit) and HTTP 413, set here so it stays 413 whatever the shared table says for
    RESOURCE_EXHAUSTED (quotas may want 429). Nothing was written."""

    code = grpc.StatusCode.RESOURCE_EXHAUSTED

    def __init__(self, message: str, **fields: str):
        super().__init__(message, http=413, **fields)


class Unauthenticated(ServiceError):
    code = grpc.StatusCode.UNAUTHENTICATED


class PermissionDenied(ServiceError):
    code = grpc.StatusCode.PERMISSION_DENIED


class NotFound(ServiceError):
    code = grpc.StatusCode.NOT_FOUND


class AlreadyExists(ServiceError):
    """A key or name reused for a different request."""

    code = grpc.StatusCode.ALREADY_EXISTS


class FailedPrecondition(ServiceError):
    code = grpc.StatusCode.FAILED_PRECONDITION


class Aborted(ServiceError):
    """Rolled back by contention (a deadlock, a serialization failure): safe to retry."""

    code = grpc.StatusCode.ABORTED


class Unavailable(ServiceError):
    """A dependency (a shard, a database, a peer) cannot be reached: retry later."""

    code = grpc.StatusCode.UNAVAILABLE


class DeadlineExceeded(ServiceError):
    """Out of time: the outcome is unknown (it may have taken effect)."""

    code = grpc.StatusCode.DEADLINE_EXCEEDED


class DataLoss(ServiceError):
    code = grpc.StatusCode.DATA_LOSS


class Unimplemented(ServiceError):
    code = grpc.StatusCode.UNIMPLEMENTED


class Internal(ServiceError):
    code = grpc.StatusCode.INTERNAL


_BY_CODE = {cls.code: cls for cls in (InvalidArgument, TooLarge, Unauthenticated, PermissionDenied, NotFound,
                                      AlreadyExists, FailedPrecondition, Aborted, Unavailable, DeadlineExceeded,
                                      DataLoss, Unimplemented, Internal)}


def from_code(code: grpc.StatusCode, message: str, **fields: str) -> ServiceError:
    """The error for a status another service answered with (its code kept as it is)."""
    err = _BY_CODE.get(code, Internal)(message)
    err.code, err.fields = code, fields
    return err


def status_of(exc: BaseException, method: str) -> ServiceError:
    """What a call that raised exc answers: a ServiceError as it is, a timeout as
    DEADLINE_EXCEEDED, anything else (a bug) INTERNAL, logged with its traceback."""
    if isinstance(exc, ServiceError):
        return exc
    if isinstance(exc, TimeoutError):
        return DeadlineExceeded(f"{method} did not finish within the call's time")
    log.error("unexpected error in %s", method, exc_info=exc)
    return Internal(f"internal error in {method} ({type(exc).__name__}); it has been logged")


async def abort(context: grpc.aio.ServicerContext, exc: BaseException, method: str) -> None:
    """End the call with exc's status (raises, as grpc.aio's abort does)."""
    err = status_of(exc, method)
    await context.abort(err.code, err.message, err.trailing_metadata())


def rpc(fn: Callable[..., Awaitable[Any]]) -> Callable[..., Awaitable[Any]]:
    """A unary (or stream-unary) handler whose errors become the call's status."""

    @functools.wraps(fn)
    async def wrapper(self, request, context):
        try:
            return await fn(self, request, context)
        except (asyncio.CancelledError, grpc.aio.AbortError):
            raise
        except Exception as exc:  # noqa: BLE001 - the edge: every error becomes a status, once
            await abort(context, exc, fn.__name__)

    return wrapper


def rpc_stream(fn: Callable[..., AsyncIterator[Any]]) -> Callable[..., AsyncIterator[Any]]:
    """Like `rpc`, for server-streaming handlers."""

    @functools.wraps(fn)
    async def wrapper(self, request, context):
        try:
            async for item in fn(self, request, context):
                yield item
        except (asyncio.CancelledError, grpc.aio.AbortError):
            raise
        except Exception as exc:  # noqa: BLE001 - as in rpc: every error becomes the stream's status
            await abort(context, exc, fn.__name__)

    return wrapper
