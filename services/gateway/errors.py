"""The gateway's errors and their one mapping to gRPC status (and so HTTP).

Every error a customer can see carries a gRPC code, a sentence saying what to
fix, and optionally an explicit HTTP status (413 for oversize input, which has
no gRPC code of its own) and extra fields (the original task id of a conflict),
sent as trailing metadata over gRPC and inside the JSON error over REST.

Oversize input (payload, bundle, request body) is RESOURCE_EXHAUSTED over gRPC,
the code gRPC itself uses for a message over its size limit, and which the SDK
maps to PayloadTooLarge (not retried); over REST it is 413, set explicitly so
it stays 413 whatever the shared table later says for RESOURCE_EXHAUSTED
(quotas may want 429). Nothing is written.
"""

from __future__ import annotations

import grpc

from ratchet.libs.rpc.status import http_status

# Trailing-metadata keys (gRPC) that mirror the extra JSON fields (REST).
META_PREFIX = "ratchet-"


class GatewayError(Exception):
    """Base class: code + message + optional HTTP status and extra fields."""

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
        body = {"code": self.code.name, "http_status": self.http_status, "message": self.message}
        body.update(self.fields)
        return {"error": body}


class InvalidArgument(GatewayError):
    """Bad input: nothing was written."""

    code = grpc.StatusCode.INVALID_ARGUMENT


class TooLarge(GatewayError):
    """Input over a size limit: RESOURCE_EXHAUSTED / HTTP 413, nothing was written."""

    code = grpc.StatusCode.RESOURCE_EXHAUSTED

    def __init__(self, message: str, **fields: str):
        super().__init__(message, http=413, **fields)


class Unauthenticated(GatewayError):
    code = grpc.StatusCode.UNAUTHENTICATED


class PermissionDenied(GatewayError):
    code = grpc.StatusCode.PERMISSION_DENIED


class NotFound(GatewayError):
    code = grpc.StatusCode.NOT_FOUND


class AlreadyExists(GatewayError):
    """An idempotency key reused for a different request, or a duplicate name."""

    code = grpc.StatusCode.ALREADY_EXISTS


class Unavailable(GatewayError):
    """A shard (through history) or the control database cannot be reached."""

    code = grpc.StatusCode.UNAVAILABLE


class DeadlineExceeded(GatewayError):
    """A call ran out of time: the outcome is unknown (maybe committed)."""

    code = grpc.StatusCode.DEADLINE_EXCEEDED


class DataLoss(GatewayError):
    code = grpc.StatusCode.DATA_LOSS


class Internal(GatewayError):
    code = grpc.StatusCode.INTERNAL


_BY_CODE = {cls.code: cls for cls in (InvalidArgument, TooLarge, Unauthenticated, PermissionDenied, NotFound,
                                      AlreadyExists, Unavailable, DeadlineExceeded, DataLoss, Internal)}


def from_code(code: grpc.StatusCode, message: str) -> GatewayError:
    """A GatewayError for a status code another service answered with."""
    err = _BY_CODE.get(code, Internal)(message)
    if err.code != code:
        err.code = code
    return err


def from_peer(e: grpc.aio.AioRpcError, peer: str, timeout: float) -> GatewayError:
    """What another mesh service (the cron service, the dispatcher) answered, as a gateway error.

    Its own refusals (a malformed cron expression, an unknown schedule) pass
    through with their code and sentence; trouble reaching it names it.
    """
    code = e.code()
    if code == grpc.StatusCode.UNAVAILABLE:
        return Unavailable(f"the {peer} is unavailable ({e.details()}); retry later")
    if code == grpc.StatusCode.DEADLINE_EXCEEDED:
        return DeadlineExceeded(f"the {peer} did not answer within {timeout:g}s; the call may have taken effect: "
                                f"retry it (with the same request_id when creating)")
    return from_code(code, e.details() or f"the {peer} answered {code.name}")


async def abort(context: grpc.aio.ServicerContext, err: GatewayError) -> None:
    """End a gRPC call with err (raises, as grpc.aio abort does)."""
    await context.abort(err.code, err.message, trailing_metadata=err.trailing_metadata())
