"""The one error edge (libs/rpc/errors): what a handler raises becomes the call's status."""

from __future__ import annotations

import asyncio
import logging

import grpc
import pytest

from ratchet.libs.rpc import errors


class Context:
    """What grpc.aio's ServicerContext.abort does: record, then raise AbortError."""

    def __init__(self):
        self.aborted = None

    async def abort(self, code, details="", trailing_metadata=()):
        self.aborted = (code, details, tuple(trailing_metadata))
        raise grpc.aio.AbortError()


class Handlers:
    def __init__(self, exc):
        self.exc = exc

    @errors.rpc
    async def Unary(self, request, context):
        raise self.exc

    @errors.rpc_stream
    async def Stream(self, request, context):
        yield 1
        raise self.exc


async def _unary(exc):
    ctx = Context()
    with pytest.raises(grpc.aio.AbortError):
        await Handlers(exc).Unary(None, ctx)
    return ctx.aborted


async def test_a_domain_error_answers_its_code_message_and_fields():
    code, details, meta = await _unary(errors.AlreadyExists("key k was used for another task", original_task_id="t1"))
    assert code == grpc.StatusCode.ALREADY_EXISTS and details == "key k was used for another task"
    assert meta == (("ratchet-original-task-id", "t1"),)


async def test_a_timeout_is_deadline_exceeded_and_names_the_method():
    code, details, _ = await _unary(TimeoutError())
    assert code == grpc.StatusCode.DEADLINE_EXCEEDED and "Unary" in details


async def test_a_bug_is_internal_logged_and_its_text_stays_inside(caplog):
    with caplog.at_level(logging.ERROR, logger="ratchet.libs.rpc.errors"):
        code, details, _ = await _unary(KeyError("secret-internal-detail"))
    assert code == grpc.StatusCode.INTERNAL and "KeyError" in details and "secret" not in details
    assert any("unexpected error in Unary" in r.message for r in caplog.records)


async def test_cancellation_is_not_turned_into_a_status():
    with pytest.raises(asyncio.CancelledError):
        await Handlers(asyncio.CancelledError()).Unary(None, Context())


async def test_a_stream_ends_with_the_errors_status_after_what_it_yielded():
    ctx, got = Context(), []
    with pytest.raises(grpc.aio.AbortError):
        async for item in Handlers(errors.Unavailable("shard 3 is down; retry")).Stream(None, ctx):
            got.append(item)
    assert got == [1] and ctx.aborted[:2] == (grpc.StatusCode.UNAVAILABLE, "shard 3 is down; retry")


def test_http_status_follows_the_code_except_where_set():
    assert errors.InvalidArgument("x").http_status == 400
    assert errors.TooLarge("payload is 300000 bytes; at most 262144").http_status == 413
    assert errors.TooLarge("x").code == grpc.StatusCode.RESOURCE_EXHAUSTED
    assert errors.NotFound("x").to_json() == {"error": {"code": "NOT_FOUND", "http_status": 404, "message": "x"}}


@pytest.mark.parametrize("code", [c for c in grpc.StatusCode if c != grpc.StatusCode.OK])
def test_from_code_keeps_any_code_a_peer_answered(code):
    err = errors.from_code(code, "peer said no", shard_id="2")
    assert err.code == code and err.message == "peer said no" and err.fields == {"shard_id": "2"}
    assert isinstance(err, errors.ServiceError)
