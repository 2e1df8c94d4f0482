"""The cron service's errors and their one mapping to gRPC status.

Handlers raise `CronServiceError` subclasses; `abort` turns them into the
status the gateway passes on to the customer (and so the HTTP status, via
ratchet.libs.rpc.status). Calls this service makes to the gateway and to
history fail as `Transient` (try again later: the slot stays open) or
`Refused` (the peer said no for good), classified in `from_rpc_error`.
"""

from __future__ import annotations

import grpc


class CronServiceError(Exception):
    """Base class: a gRPC code and a message saying what to do."""

    code: grpc.StatusCode = grpc.StatusCode.INTERNAL

    def __init__(self, message: str):
        super().__init__(message)
        self.message = message


class InvalidArgument(CronServiceError):
    """Bad input (a malformed schedule): nothing was written."""

    code = grpc.StatusCode.INVALID_ARGUMENT


class NotFound(CronServiceError):
    """No such schedule for this app (unknown ids and other apps' ids alike)."""

    code = grpc.StatusCode.NOT_FOUND

    def __init__(self, schedule_id: str):
        super().__init__(f"schedule {schedule_id!r} not found")


class AlreadyExists(CronServiceError):
    """A request_id reused for a different schedule."""

    code = grpc.StatusCode.ALREADY_EXISTS


class FailedPrecondition(CronServiceError):
    """A trigger the gateway refused for good (e.g. the task type is no longer deployed)."""

    code = grpc.StatusCode.FAILED_PRECONDITION


class Unavailable(CronServiceError):
    """The cron database (or a peer a call needs) cannot be reached; retry shortly."""

    code = grpc.StatusCode.UNAVAILABLE


class DeadlineExceeded(CronServiceError):
    """The call ran out of time; it may have taken effect."""

    code = grpc.StatusCode.DEADLINE_EXCEEDED


class Internal(CronServiceError):
    code = grpc.StatusCode.INTERNAL


class PeerError(Exception):
    """A call to the gateway or history failed."""

    def __init__(self, peer: str, code: grpc.StatusCode, detail: str):
        super().__init__(f"{peer}: {code.name}: {detail}")
        self.peer = peer
        self.code = code
        self.detail = detail


class Transient(PeerError):
    """Worth retrying: unreachable, slow, restarting, or not yet able to serve.

    UNIMPLEMENTED counts (a gateway mid-upgrade), and so do UNAUTHENTICATED
    and PERMISSION_DENIED (a mesh token being rotated): dropping slots over a
    deployment mistake would lose them for good.
    """


class Refused(PeerError):
    """The peer refused the request for good (bad template, unknown task type...)."""


TRANSIENT_CODES = frozenset({
    grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.DEADLINE_EXCEEDED, grpc.StatusCode.CANCELLED,
    grpc.StatusCode.ABORTED, grpc.StatusCode.UNIMPLEMENTED, grpc.StatusCode.UNAUTHENTICATED,
    grpc.StatusCode.PERMISSION_DENIED, grpc.StatusCode.INTERNAL, grpc.StatusCode.UNKNOWN,
})


def from_rpc_error(peer: str, err: grpc.aio.AioRpcError) -> PeerError:
    """Classify a failed call to `peer`."""
    cls = Transient if err.code() in TRANSIENT_CODES else Refused
    return cls(peer, err.code(), err.details() or err.code().name)


async def abort(context: grpc.aio.ServicerContext, err: CronServiceError) -> None:
    """End a gRPC call with err (raises, as grpc.aio abort does)."""
    await context.abort(err.code, err.message)
