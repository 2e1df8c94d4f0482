"""Domain errors of the dispatcher and their gRPC status: the one place where
the mapping happens. Handlers raise these; `grpc_status` turns them into a
status the host agent can act on."""

from __future__ import annotations

import functools
import logging
from collections.abc import Awaitable, Callable
from typing import Any

import grpc

log = logging.getLogger(__name__)

# History answers that mean "try again later": the shard (or history itself)
# is down or slow, or a transaction was rolled back by contention. Anything
# else is a real refusal (RESOURCE_EXHAUSTED is "too large" on this mesh, not
# "busy": retrying it would never succeed).
TRANSIENT_CODES = frozenset({
    grpc.StatusCode.UNAVAILABLE,
    grpc.StatusCode.DEADLINE_EXCEEDED,
    grpc.StatusCode.ABORTED,
})


class DispatcherError(Exception):
    """Base of the dispatcher's domain errors."""

    code = grpc.StatusCode.INTERNAL


class Unauthenticated(DispatcherError):
    """The call carries no host-agent token, or one we do not accept."""

    code = grpc.StatusCode.UNAUTHENTICATED


class InvalidRequest(DispatcherError):
    """The request is malformed; the message says which field and how to fix it."""

    code = grpc.StatusCode.INVALID_ARGUMENT


class ShardUnavailable(DispatcherError):
    """A history call for one shard failed in a way worth retrying.

    `ambiguous` is true when the call may have been applied (a deadline passed
    after sending), so the caller must not report it as a clean failure.
    """

    code = grpc.StatusCode.UNAVAILABLE

    def __init__(self, shard_id: int, detail: str, *, ambiguous: bool = False):
        super().__init__(f"shard {shard_id} unavailable: {detail}")
        self.shard_id = shard_id
        self.ambiguous = ambiguous


class CallUnavailable(DispatcherError):
    """The whole call failed because the shards it needed did not answer;
    the host agent should retry it."""

    code = grpc.StatusCode.UNAVAILABLE


class HistoryRejected(DispatcherError):
    """History refused a call for a non-transient reason; its code passes through."""

    def __init__(self, shard_id: int, code: grpc.StatusCode, detail: str):
        super().__init__(f"history refused the request for shard {shard_id}: {detail}")
        self.code = code
        self.shard_id = shard_id


class BreakersUnavailable(DispatcherError):
    """The breakers database did not answer (or not in time); retry shortly.
    Dispatch goes on meanwhile with the breakers as last loaded."""

    code = grpc.StatusCode.UNAVAILABLE


class BreakerConflict(DispatcherError):
    """A breaker changed between reading it and writing it (its compare-and-set
    matched no row). Writers lock the row first, so this means a bug or a
    writer that skipped the lock; the change was not applied."""

    code = grpc.StatusCode.ABORTED


def from_rpc_error(shard_id: int, err: grpc.aio.AioRpcError) -> DispatcherError:
    """Classify a failed history call for `shard_id`."""
    code = err.code()
    if code in TRANSIENT_CODES or code == grpc.StatusCode.CANCELLED:
        ambiguous = code in (grpc.StatusCode.DEADLINE_EXCEEDED, grpc.StatusCode.CANCELLED)
        return ShardUnavailable(shard_id, f"{code.name}: {err.details()}", ambiguous=ambiguous)
    return HistoryRejected(shard_id, code, err.details() or code.name)


def grpc_status(err: DispatcherError) -> tuple[grpc.StatusCode, str]:
    """The status code and message the host agent sees for a domain error."""
    if isinstance(err, (ShardUnavailable, CallUnavailable)):
        return err.code, f"{err}; retry the call (heartbeats and completions are fenced and safe to repeat)"
    return err.code, str(err)


def maps_errors(fn: Callable[..., Awaitable[Any]]) -> Callable[..., Awaitable[Any]]:
    """Turn DispatcherError raised by a unary handler into its gRPC status."""

    @functools.wraps(fn)
    async def wrapper(self, request, context):
        try:
            return await fn(self, request, context)
        except DispatcherError as err:
            code, message = grpc_status(err)
            log.debug("%s refused: %s %s", fn.__name__, code.name, message)
            await context.abort(code, message)

    return wrapper

