"""The dispatcher's errors on the shared edge (libs/rpc/errors): the code and message the
host agent reads for each."""

from __future__ import annotations

import grpc
import pytest

from ratchet.libs.rpc import errors as shared
from ratchet.libs.rpc.errors import status_of
from ratchet.services.dispatcher.errors import (
    BreakerConflict,
    BreakersUnavailable,
    CallUnavailable,
    HistoryRejected,
    InvalidArgument,
    MismatchedAnswer,
    ShardUnavailable,
    Unauthenticated,
    from_rpc_error,
)

RETRY = "; retry the call (heartbeats and completions are fenced and safe to repeat)"


@pytest.mark.parametrize("err, code, message", [
    (InvalidArgument("capacity must be 1..1000"), grpc.StatusCode.INVALID_ARGUMENT, "capacity must be 1..1000"),
    (Unauthenticated("missing credentials"), grpc.StatusCode.UNAUTHENTICATED, "missing credentials"),
    (ShardUnavailable(3, "UNAVAILABLE: down"), grpc.StatusCode.UNAVAILABLE,
     "shard 3 unavailable: UNAVAILABLE: down" + RETRY),
    (CallUnavailable("no lease was extended"), grpc.StatusCode.UNAVAILABLE, "no lease was extended" + RETRY),
    (HistoryRejected(2, grpc.StatusCode.FAILED_PRECONDITION, "nope"), grpc.StatusCode.FAILED_PRECONDITION,
     "history refused the request for shard 2: nope"),
    (MismatchedAnswer("history answered 1 results for 2 items"), grpc.StatusCode.INTERNAL,
     "history answered 1 results for 2 items"),
    (BreakersUnavailable("retry shortly"), grpc.StatusCode.UNAVAILABLE, "retry shortly"),
    (BreakerConflict("not changed"), grpc.StatusCode.ABORTED, "not changed"),
])
def test_each_error_answers_its_code_and_message(err, code, message):
    status = status_of(err, "Poll")
    assert (status.code, status.message) == (code, message)
    assert isinstance(err, shared.ServiceError)


def test_the_retry_hint_is_in_the_status_only():
    # Logs and the messages that quote a shard's failure carry the bare reason.
    assert str(ShardUnavailable(1, "slow")) == "shard 1 unavailable: slow"


def test_the_shared_names_are_the_dispatchers():
    assert InvalidArgument is shared.InvalidArgument and Unauthenticated is shared.Unauthenticated


class _Failed(grpc.aio.AioRpcError):
    def __init__(self, code: grpc.StatusCode, details: str):
        super().__init__(code, grpc.aio.Metadata(), grpc.aio.Metadata(), details)


@pytest.mark.parametrize("code, ambiguous", [(grpc.StatusCode.UNAVAILABLE, False), (grpc.StatusCode.ABORTED, False),
                                             (grpc.StatusCode.DEADLINE_EXCEEDED, True),
                                             (grpc.StatusCode.CANCELLED, True)])
def test_history_failures_worth_retrying(code, ambiguous):
    err = from_rpc_error(4, _Failed(code, "x"))
    assert isinstance(err, ShardUnavailable) and err.ambiguous is ambiguous and err.shard_id == 4


def test_history_refusals_pass_their_code_through():
    err = from_rpc_error(4, _Failed(grpc.StatusCode.RESOURCE_EXHAUSTED, "too large"))
    assert isinstance(err, HistoryRejected) and err.code == grpc.StatusCode.RESOURCE_EXHAUSTED
    assert err.message == "history refused the request for shard 4: too large"
