"""The DispatchService edge: authentication, input validation, health."""

from __future__ import annotations

import grpc
import pytest
from dispatch_helpers import AUTH, poll, seconds, wait_until
from grpc_health.v1 import health_pb2, health_pb2_grpc

from ratchet.internal.worker.v1 import worker_pb2 as wpb


@pytest.mark.parametrize("metadata, fragment", [
    ((), "missing credentials"),
    ((("authorization", "Bearer not-the-token"),), "not accepted"),
    ((("authorization", "Basic abc"),), "malformed"),
])
async def test_calls_without_an_accepted_token_are_refused(stub, history, metadata, fragment):
    calls = [
        lambda: stub.Heartbeat(wpb.HeartbeatRequest(worker_id="w"), metadata=metadata, timeout=5),
        lambda: stub.Complete(wpb.CompleteRequest(worker_id="w"), metadata=metadata, timeout=5),
    ]
    for call in calls:
        with pytest.raises(grpc.aio.AioRpcError) as info:
            await call()
        assert info.value.code() == grpc.StatusCode.UNAUTHENTICATED
        assert fragment in info.value.details()
    with pytest.raises(grpc.aio.AioRpcError) as info:
        async for _ in stub.Poll(wpb.PollRequest(worker_id="w", capacity=1), metadata=metadata, timeout=5):
            pass
    assert info.value.code() == grpc.StatusCode.UNAUTHENTICATED
    assert not history.fake.calls_of("LeaseTasks")


async def test_a_valid_token_is_accepted(stub):
    response = await stub.Heartbeat(wpb.HeartbeatRequest(worker_id="w"), metadata=AUTH, timeout=5)
    assert list(response.results) == []


@pytest.mark.parametrize("request_, fragment", [
    (wpb.PollRequest(worker_id="w", capacity=0), "capacity must be 1..1000"),
    (wpb.PollRequest(worker_id="w", capacity=1001), "capacity must be 1..1000"),
    (wpb.PollRequest(worker_id="w", capacity=-3), "capacity must be 1..1000"),
    (wpb.PollRequest(worker_id="", capacity=1), "worker_id must not be empty"),
    (wpb.PollRequest(worker_id="w", capacity=1, max_wait=seconds(61)), "max_wait must be at most 60s"),
    (wpb.PollRequest(worker_id="w", capacity=1, app_ids=[""]), "app_ids[0] must not be empty"),
])
async def test_bad_polls_are_refused_and_touch_nothing(stub, history, request_, fragment):
    history.fake.add_task(0)
    with pytest.raises(grpc.aio.AioRpcError) as info:
        async for _ in stub.Poll(request_, metadata=AUTH, timeout=5):
            pass
    assert info.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert fragment in info.value.details()
    assert not history.fake.calls_of("LeaseTasks")


async def test_bad_heartbeats_and_completions_are_refused(stub, history):
    bad_ref = wpb.LeaseRef(shard_id=0, task_id="t", lease_epoch=0)
    with pytest.raises(grpc.aio.AioRpcError) as info:
        await stub.Heartbeat(wpb.HeartbeatRequest(worker_id="w", leases=[bad_ref]), metadata=AUTH, timeout=5)
    assert info.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert "leases[0].lease_epoch" in info.value.details()
    no_outcome = wpb.Completion(shard_id=0, task_id="t", lease_epoch=1)
    with pytest.raises(grpc.aio.AioRpcError) as info:
        await stub.Complete(wpb.CompleteRequest(worker_id="w", completions=[no_outcome]), metadata=AUTH, timeout=5)
    assert info.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert "completions[0].outcome" in info.value.details()
    assert not history.fake.calls_of("RecordHeartbeats") and not history.fake.calls_of("CompleteTasks")


async def _health(target: str) -> int:
    async with grpc.aio.insecure_channel(target) as channel:
        reply = await health_pb2_grpc.HealthStub(channel).Check(health_pb2.HealthCheckRequest(service=""), timeout=5)
        return reply.status


async def test_health_is_not_serving_until_history_answers(make_dispatcher, history):
    from ratchet.libs.pg.cluster import free_port
    dead = await make_dispatcher(target=f"127.0.0.1:{free_port()}")
    alive = await make_dispatcher()
    # Health needs no host-agent token.
    serving = []

    async def probe():
        serving.append(await _health(alive.target))
    await wait_until(lambda: alive.history.reachable.is_set(), what="history reachable")
    for _ in range(200):
        await probe()
        if serving[-1] == health_pb2.HealthCheckResponse.SERVING:
            break
    assert serving[-1] == health_pb2.HealthCheckResponse.SERVING
    assert history.fake.calls_of("WatchReady")  # its headers said history is up, no event needed
    assert not dead.history.reachable.is_set()
    assert await _health(dead.target) == health_pb2.HealthCheckResponse.NOT_SERVING


async def test_max_wait_zero_is_one_round_without_parking(stub, history):
    tasks = await poll(stub, capacity=5, max_wait=0)
    assert tasks == []
    assert len(history.fake.calls_of("LeaseTasks")) >= 1
