"""The dispatcher's errors.

Handlers raise the shared errors (libs/rpc/errors), subclassed here only where the
dispatcher knows more (the shard, whether a call may have been applied); the shared
edge (libs/rpc/errors.rpc) turns them into the status the host agent acts on. Calls
this service makes to history fail as `ShardUnavailable` (worth retrying) or
`HistoryRejected` (history's code passed through), classified in `from_rpc_error`.
"""

from __future__ import annotations

import grpc

from ratchet.libs.rpc.errors import Aborted, Internal, InvalidArgument, ServiceError, Unauthenticated, Unavailable

__all__ = ["BreakerConflict", "BreakersUnavailable", "CallUnavailable", "HistoryRejected", "InvalidArgument",
           "MismatchedAnswer", "ServiceError", "ShardUnavailable", "Unauthenticated", "from_rpc_error"]

# History answers that mean "try again later": the shard (or history itself)
# is down or slow, or a transaction was rolled back by contention. Anything
# else is a real refusal (RESOURCE_EXHAUSTED is "too large" on this mesh, not
# "busy": retrying it would never succeed).
TRANSIENT_CODES = frozenset({
    grpc.StatusCode.UNAVAILABLE,
    grpc.StatusCode.DEADLINE_EXCEEDED,
    grpc.StatusCode.ABORTED,
})

RETRY_HINT = "retry the call (heartbeats and completions are fenced and safe to repeat)"


class _RetryTheCall(Unavailable):
    """UNAVAILABLE whose status tells the host agent to send the call again. The hint is
    in the status message only: str() (logs, and the messages that quote this error) is
    the bare reason."""

    def __init__(self, message: str):
        super().__init__(message)
        self.message = f"{message}; {RETRY_HINT}"


class ShardUnavailable(_RetryTheCall):
    """A history call for one shard failed in a way worth retrying.

    `ambiguous` is true when the call may have been applied (a deadline passed
    after sending), so the caller must not report it as a clean failure.
    """

    def __init__(self, shard_id: int, detail: str, *, ambiguous: bool = False):
        super().__init__(f"shard {shard_id} unavailable: {detail}")
        self.shard_id = shard_id
        self.ambiguous = ambiguous


class CallUnavailable(_RetryTheCall):
    """The whole call failed because the shards it needed did not answer;
    the host agent should retry it."""


class HistoryRejected(ServiceError):
    """History refused a call for a non-transient reason; its code passes through."""

    def __init__(self, shard_id: int, code: grpc.StatusCode, detail: str):
        super().__init__(f"history refused the request for shard {shard_id}: {detail}")
        self.code = code
        self.shard_id = shard_id


class MismatchedAnswer(Internal):
    """History answered a different number of results than items it was sent."""


class BreakersUnavailable(Unavailable):
    """The breakers database did not answer (or not in time); retry shortly.
    Dispatch goes on meanwhile with the breakers as last loaded."""


class BreakerConflict(Aborted):
    """A breaker changed between reading it and writing it (its compare-and-set
    matched no row). Writers lock the row first, so this means a bug or a
    writer that skipped the lock; the change was not applied."""


def from_rpc_error(shard_id: int, err: grpc.aio.AioRpcError) -> ShardUnavailable | HistoryRejected:
    """Classify a failed history call for `shard_id`."""
    code = err.code()
    if code in TRANSIENT_CODES or code == grpc.StatusCode.CANCELLED:
        ambiguous = code in (grpc.StatusCode.DEADLINE_EXCEEDED, grpc.StatusCode.CANCELLED)
        return ShardUnavailable(shard_id, f"{code.name}: {err.details()}", ambiguous=ambiguous)
    return HistoryRejected(shard_id, code, err.details() or code.name)
