"""The cron service's errors.

Handlers raise the shared errors (libs/rpc/errors); its edge turns them into the
status the gateway passes on to the customer (and so the HTTP status). Calls this
service makes to the gateway and to history fail as `Transient` (try again later:
the slot stays open) or `Refused` (the peer said no for good), classified in
`from_rpc_error`. These are not ServiceErrors on purpose: they say whether to try the
slot again, not what this service answers (libs `from_code` would carry the peer's code
out as ours: the gateway's UNAUTHENTICATED for a rotating mesh token is not the caller's).
"""

from __future__ import annotations

import grpc

from ratchet.libs.rpc.errors import (
    AlreadyExists,
    DeadlineExceeded,
    FailedPrecondition,
    Internal,
    InvalidArgument,
    ServiceError,
    Unavailable,
)
from ratchet.libs.rpc.errors import NotFound as _NotFound

__all__ = ["AlreadyExists", "DeadlineExceeded", "FailedPrecondition", "Internal", "InvalidArgument", "NotFound",
           "PeerError", "Refused", "ServiceError", "Transient", "Unavailable", "from_rpc_error"]


class NotFound(_NotFound):
    """No such schedule for this app (unknown ids and other apps' ids alike)."""

    def __init__(self, schedule_id: str):
        super().__init__(f"schedule {schedule_id!r} not found")


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
