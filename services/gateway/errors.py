"""The gateway's errors: the shared vocabulary (libs/rpc/errors), which every gateway
module raises, and what only the gateway knows: how a peer's answer (the cron service,
the dispatcher) reads to the customer.

Every error a customer can see carries a gRPC code, a sentence saying what to fix, and
optionally an explicit HTTP status and extra fields (the original task id of a conflict),
sent as trailing metadata over gRPC and inside the JSON error over REST. Oversize input
(payload, bundle, request body) is libs' TooLarge: RESOURCE_EXHAUSTED over gRPC, which the
SDK maps to PayloadTooLarge (not retried), and 413 over REST. The shards' answers are
named by history_client (it knows the shard).
"""

from __future__ import annotations

import grpc

from ratchet.libs.rpc.errors import DeadlineExceeded, ServiceError, Unavailable, from_code

__all__ = ["from_peer"]


def from_peer(e: grpc.aio.AioRpcError, peer: str, timeout: float) -> ServiceError:
    """What another mesh service (the cron service, the dispatcher) answered, as the gateway's error.

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
