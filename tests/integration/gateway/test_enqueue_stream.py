"""TaskService.EnqueueTaskStream and the SDK's AsyncClient that uses it: every
call on the stream is answered exactly as EnqueueTask would have answered it
(ids, deduplication, conflicts with the original id, validation, auth,
deadlines), many calls share one stream, and one call's failure never ends it.
Against a real control database and the fake history (fakes.py)."""

from __future__ import annotations

import asyncio

import grpc
import pytest

from ratchet.aio import AsyncClient
from ratchet.api.tasks.v1 import tasks_pb2
from ratchet.client import Conflict, DeadlineExceeded, InvalidArgument, PayloadTooLarge, Unauthenticated, batch_request
from ratchet.libs.pg.cluster import free_port
from ratchet.libs.rpc.callstream import STREAM_HEADER

from .conftest import start_gateway

pytestmark = pytest.mark.timeout(60)


def _endpoint(env) -> str:
    return f"127.0.0.1:{env.gateway.grpc_port}"


def _created(env, key: str) -> list:
    return [c for n, c in env.history.calls if n == "CreateTasks" and any(t.idempotency_key == key for t in c.tasks)]


async def test_concurrent_enqueues_share_one_stream_and_each_reaches_history(env):
    async with AsyncClient(_endpoint(env), env.api_key) as client:
        keys = [f"stream-many-{i}" for i in range(50)]
        ids = await asyncio.gather(*(client.enqueue("send", {"i": i}, idempotency_key=k) for i, k in enumerate(keys)))
        assert len(set(ids)) == 50
        assert client._stream.opened == 1 and client._stream.stream_calls == 50
        # Calls made while a write was in progress went out together.
        assert client._stream.writes < 50
    for k, task_id in zip(keys, ids, strict=True):
        (call,) = _created(env, k)
        (t,) = [t for t in call.tasks if t.idempotency_key == k]
        assert t.task_id == task_id and t.task_type == "send" and t.tenant_id == env.tenant_id


async def test_a_retried_key_is_deduplicated_and_a_different_request_conflicts_with_the_original(env):
    async with AsyncClient(_endpoint(env), env.api_key) as client:
        req = tasks_pb2.EnqueueTaskRequest(task_type="send", idempotency_key="stream-dedupe")
        req.payload.struct_value.fields["v"].number_value = 1
        first = await client.send_enqueue(req)
        again = await client.send_enqueue(req)
        assert not first.deduplicated and again.deduplicated and again.task_id == first.task_id
        with pytest.raises(Conflict) as e:
            await client.enqueue("send", {"v": 2}, idempotency_key="stream-dedupe")
        assert e.value.task_id == first.task_id and e.value.code == "ALREADY_EXISTS"
        assert first.task_id in e.value.message
        assert client._stream.opened == 1


async def test_bad_input_fails_that_call_only_and_changes_nothing(env):
    async with AsyncClient(_endpoint(env), env.api_key) as client:
        before = len(env.history.calls)
        with pytest.raises(InvalidArgument) as e:
            await client.enqueue("no_such_type", idempotency_key="stream-bad")
        assert "registered types" in e.value.message and e.value.http_status == 400
        with pytest.raises(InvalidArgument):
            await client.enqueue("send", queue="bad queue name!" * 20, idempotency_key="stream-bad-2")
        assert len(env.history.calls) == before  # nothing was sent to history
        assert await client.enqueue("send", idempotency_key="stream-good")  # the stream is still good
        assert client._stream.opened == 1


async def test_a_bad_key_is_refused_on_every_call(env):
    async with AsyncClient(_endpoint(env), "not-a-key", max_retries=0) as client:
        for _ in range(2):
            with pytest.raises(Unauthenticated) as e:
                await client.enqueue("send")
            assert e.value.http_status == 401 and "API key" in e.value.message


async def test_raw_stream_answers_by_call_id_with_the_unary_status(env):
    """The wire contract for other-language clients: headers first, one answer per call_id."""
    stream = env.tasks.EnqueueTaskStream(metadata=env.md(), timeout=20)
    assert dict(await stream.initial_metadata())[STREAM_HEADER] == "1"  # the call-stream contract
    # Two calls in one message, a third in another.
    await stream.write(tasks_pb2.EnqueueTaskStreamRequest(calls=[
        tasks_pb2.EnqueueTaskCall(call_id=7, request=tasks_pb2.EnqueueTaskRequest(task_type="send",
                                                                                 idempotency_key="raw-1")),
        tasks_pb2.EnqueueTaskCall(call_id=9, request=tasks_pb2.EnqueueTaskRequest(task_type=""), timeout_ms=5000)]))
    original = (await env.tasks.EnqueueTask(tasks_pb2.EnqueueTaskRequest(task_type="send", idempotency_key="raw-2"),
                                            metadata=env.md(), timeout=5)).task_id
    await stream.write(tasks_pb2.EnqueueTaskStreamRequest(calls=[tasks_pb2.EnqueueTaskCall(
        call_id=11, request=tasks_pb2.EnqueueTaskRequest(task_type="resize", idempotency_key="raw-2"))]))
    await stream.done_writing()
    answers = {}
    async for reply in stream:
        for a in reply.answers:
            answers[a.call_id] = a
    assert set(answers) == {7, 9, 11}
    assert answers[7].WhichOneof("outcome") == "response" and answers[7].response.task_id
    err = answers[9].error
    assert err.code == grpc.StatusCode.INVALID_ARGUMENT.value[0] and "task_type" in err.message
    conflict = answers[11].error
    assert conflict.code == grpc.StatusCode.ALREADY_EXISTS.value[0]
    assert dict(conflict.fields) == {"original_task_id": original}
    assert await stream.code() == grpc.StatusCode.OK


async def test_a_call_past_its_timeout_is_answered_deadline_exceeded(env, tmp_path):
    gw = await start_gateway(env.gateway.config.control_dsn, int(env.gateway.config.history_target.split(":")[1]),
                             str(tmp_path), rpc_timeout_s=0.3)
    env.history.delay_s = 1.0
    try:
        async with AsyncClient(f"127.0.0.1:{gw.grpc_port}", env.api_key, max_retries=0) as client:
            with pytest.raises(DeadlineExceeded) as e:
                await client.enqueue("send", idempotency_key="stream-slow")
            assert "may have taken effect" in e.value.message or "may or may not" in e.value.message
    finally:
        env.history.delay_s = 0.0
        await gw.stop(grace=0)


async def test_unary_mode_gives_the_same_answers(env):
    async with AsyncClient(_endpoint(env), env.api_key, stream=False) as client:
        task_id = await client.enqueue("send", idempotency_key="unary-mode")
        assert await client.enqueue("send", idempotency_key="unary-mode") == task_id
        with pytest.raises(Conflict) as e:
            await client.enqueue("send", {"x": 1}, idempotency_key="unary-mode")
        assert e.value.task_id == task_id
        ids = await client.enqueue_batch([{"task_type": "send"},
                                          {"task_type": "send", "idempotency_key": "unary-mode"}])
        assert len(ids) == 2 and ids[1] == task_id  # a unary EnqueueTasks, same answers
        assert client._stream.stream_calls == 0


async def test_a_gateway_stopping_ends_the_stream_cleanly_and_the_client_carries_on(env, tmp_path):
    port = free_port()
    gw = await start_gateway(env.gateway.config.control_dsn, int(env.gateway.config.history_target.split(":")[1]),
                             str(tmp_path), grpc_port=port)
    async with AsyncClient(f"127.0.0.1:{port}", env.api_key) as client:
        first = await client.enqueue("send", idempotency_key="stop-1")
        await gw.stop(grace=1)
        gw = await start_gateway(env.gateway.config.control_dsn,
                                 int(env.gateway.config.history_target.split(":")[1]), str(tmp_path), grpc_port=port)
        try:
            # The old stream is over; the call retries on a new one to the new gateway.
            second = await client.enqueue("send", idempotency_key="stop-2")
            assert second != first and client._stream.opened == 2
        finally:
            await gw.stop(grace=0)


async def test_a_client_built_outside_any_event_loop_works_inside_one(env):
    """Built in a thread with no running loop (as at import time), used from asyncio.run in
    that thread: the channel is made in the loop that uses it. (This test's own loop keeps
    serving the in-process gateway meanwhile.)"""
    def build_and_use() -> str:
        client = AsyncClient(_endpoint(env), env.api_key)

        async def use() -> str:
            try:
                return await client.enqueue("send", idempotency_key="built-outside-a-loop")
            finally:
                await client.close()
        return asyncio.run(use())

    assert await asyncio.wait_for(asyncio.to_thread(build_and_use), 30)


async def test_get_cancel_and_wait(env):
    from ratchet.client import NotFound
    from ratchet.libs.shardmap import new_task_id
    async with AsyncClient(_endpoint(env), env.api_key) as client:
        task_id = await client.enqueue("send", {"n": 1})
        info = await client.get(task_id)
        assert info.task_id == task_id and info.state == "ENQUEUED"
        with pytest.raises(TimeoutError, match=f"task {task_id} is still ENQUEUED after 0.3s"):
            await client.wait(task_id, timeout=0.3, max_interval=0.05)
        assert await client.cancel(task_id) == "CANCELED"
        with pytest.raises(NotFound):
            await client.get(new_task_id())


# -- EnqueueTasks calls on the stream --------------------------------------------
async def test_raw_stream_carries_batch_calls_beside_single_ones(env):
    """A call with `batch` is an EnqueueTasks call, answered with batch_response or its error;
    a call that sets both request and batch is refused and changes nothing."""
    stream = env.tasks.EnqueueTaskStream(metadata=env.md(), timeout=20)
    assert dict(await stream.initial_metadata())[STREAM_HEADER] == "1"
    batch = tasks_pb2.EnqueueTasksRequest(tasks=[
        tasks_pb2.EnqueueTaskRequest(task_type="send", idempotency_key=f"raw-batch-{i}") for i in range(3)])
    bad = tasks_pb2.EnqueueTasksRequest(tasks=[tasks_pb2.EnqueueTaskRequest(task_type="send"),
                                               tasks_pb2.EnqueueTaskRequest(task_type="no_such_type")])
    before = len(env.history.calls)
    await stream.write(tasks_pb2.EnqueueTaskStreamRequest(calls=[
        tasks_pb2.EnqueueTaskCall(call_id=1, batch=batch),
        tasks_pb2.EnqueueTaskCall(call_id=2, request=tasks_pb2.EnqueueTaskRequest(task_type="send",
                                                                                 idempotency_key="raw-single")),
        tasks_pb2.EnqueueTaskCall(call_id=3, batch=bad),
        tasks_pb2.EnqueueTaskCall(call_id=4, batch=batch, request=tasks_pb2.EnqueueTaskRequest(task_type="send"))]))
    await stream.done_writing()
    answers = {}
    async for reply in stream:
        for a in reply.answers:
            answers[a.call_id] = a
    assert set(answers) == {1, 2, 3, 4}
    assert answers[1].WhichOneof("outcome") == "batch_response"
    ids = list(answers[1].batch_response.task_ids)
    assert len(set(ids)) == 3
    for i, task_id in enumerate(ids):  # in request order, each with its own key
        (call,) = _created(env, f"raw-batch-{i}")
        assert [t.task_id for t in call.tasks if t.idempotency_key == f"raw-batch-{i}"] == [task_id]
    assert answers[2].WhichOneof("outcome") == "response" and answers[2].response.task_id
    assert answers[3].error.code == grpc.StatusCode.INVALID_ARGUMENT.value[0]
    assert "no_such_type" in answers[3].error.message
    both = answers[4].error
    assert both.code == grpc.StatusCode.INVALID_ARGUMENT.value[0] and "set one of request and batch" in both.message
    # Only the good batch and the single call reached history (the batch may be split by shard).
    sent = [t for n, c in env.history.calls[before:] if n == "CreateTasks" for t in c.tasks]
    assert sorted(t.idempotency_key for t in sent) == sorted([f"raw-batch-{i}" for i in range(3)] + ["raw-single"])
    assert await stream.code() == grpc.StatusCode.OK


async def test_sdk_batches_go_on_the_stream_and_are_deduplicated_on_resend(env):
    async with AsyncClient(_endpoint(env), env.api_key) as client:
        tasks = [{"task_type": "send", "payload": {"i": i}} for i in range(5)]
        ids, one = await asyncio.gather(client.enqueue_batch(tasks), client.enqueue("send"))
        assert len(set(ids)) == 5 and one not in ids
        assert client._stream.opened == 1 and client._stream.stream_calls == 2
        # A prepared request resent (what the client's own retries do) names the same tasks.
        req = batch_request(tasks)
        first = await client.send_enqueue_batch(req)
        again = await client.send_enqueue_batch(req)
        assert list(again.task_ids) == list(first.task_ids)
        with pytest.raises(InvalidArgument) as e:
            await client.enqueue_batch([{"task_type": "no_such_type"}])
        assert e.value.http_status == 400 and client._stream.stream_calls == 5


async def test_an_oversized_request_fails_alone_and_leaves_the_stream_up(env):
    """Over gRPC's 64 MiB message limit a request would end the whole stream (every call on it
    ambiguous, itself retried as UNAVAILABLE): it goes as a unary call and fails
    RESOURCE_EXHAUSTED, the error that says what to fix, while the stream carries on."""
    async with AsyncClient(_endpoint(env), env.api_key) as client:
        await client.enqueue("send")
        huge = [{"task_type": "send", "payload": {"x": "a" * 200_000}}] * 400  # ~80 MB
        results = await asyncio.gather(client.enqueue_batch(huge), client.enqueue("send", idempotency_key="beside"),
                                       return_exceptions=True)
        assert isinstance(results[0], PayloadTooLarge) and results[0].code == "RESOURCE_EXHAUSTED"
        assert isinstance(results[1], str)  # the call beside it was not touched
        assert client._stream.opened == 1 and client._stream.stream_calls == 2


async def test_a_request_over_the_stream_limit_goes_unary(env, monkeypatch):
    from ratchet.libs.rpc import callstream
    monkeypatch.setattr(callstream, "MAX_STREAM_CALL_BYTES", 100_000)
    async with AsyncClient(_endpoint(env), env.api_key) as client:
        ok = await client.enqueue("send", {"x": "a" * 150_000})  # under the payload limit: enqueued, unary
        assert ok and client._stream.stream_calls == 0
        with pytest.raises(PayloadTooLarge) as e:  # over it: the gateway's own answer, naming the limit
            await client.enqueue("send", {"x": "a" * 300_000})
        assert e.value.http_status == 413 and "262144" in e.value.message.replace(",", "")
        await client.enqueue("send")
        assert client._stream.stream_calls == 1 and client._stream.opened == 1


def _count_columns(monkeypatch) -> list:
    from ratchet.services.gateway import validation
    seen = []
    real = validation.columns_batch

    def spy(req, *a, **kw):
        seen.append(len(req.columns.task_ids))
        return real(req, *a, **kw)
    monkeypatch.setattr(validation, "columns_batch", spy)
    return seen


async def test_sdk_batches_go_as_columns_to_a_gateway_that_reads_them(env, monkeypatch):
    seen = _count_columns(monkeypatch)
    async with AsyncClient(_endpoint(env), env.api_key) as client:
        ids = await client.enqueue_batch([{"task_type": "send", "payload": {"i": i}} for i in range(3)])
        assert seen == [3]
        # Items that differ in more than their payload go as items.
        mixed = await client.enqueue_batch([{"task_type": "send"}, {"task_type": "send", "idempotency_key": "k-col"}])
    assert seen == [3] and len(set(ids + mixed)) == 5
    sent = [t for n, c in env.history.calls if n == "CreateTasks"
            for t in (list(c.columns.task_ids) + [x.task_id for x in c.tasks]) if t in ids]
    assert sorted(sent) == sorted(ids)  # each reached history once, with the id the SDK minted


async def test_sdk_sends_columns_on_unary_calls_too(env, monkeypatch):
    """One message set on both paths: a unary EnqueueTasks carries the same columns."""
    seen = _count_columns(monkeypatch)
    req = batch_request([{"task_type": "send", "payload": i} for i in range(4)], columns=True)
    async with AsyncClient(_endpoint(env), env.api_key) as client:
        resp = await client.send_enqueue_batch(req)
        assert client._stream.stream_calls == 1
        assert list(resp.task_ids) == list(req.columns.task_ids)
    async with AsyncClient(_endpoint(env), env.api_key, stream=False) as client:
        resp = await client.send_enqueue_batch(req)  # a resend, unary: the same tasks
        assert list(resp.task_ids) == list(req.columns.task_ids)
    assert seen == [4, 4]
