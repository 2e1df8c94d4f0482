"""The dispatcher as a process and its long-lived plumbing: the WatchReady
stream comes back after it breaks, reflection lists the service, and SIGTERM
stops the process cleanly."""

from __future__ import annotations

import asyncio
import hashlib
import json
import signal
import subprocess
import sys
import time

import grpc
from dispatch_helpers import TOKEN, poll, wait_until
from grpc_health.v1 import health_pb2, health_pb2_grpc
from grpc_reflection.v1alpha import reflection_pb2, reflection_pb2_grpc

from ratchet.libs.pg.cluster import free_port


async def test_a_broken_watch_stream_is_reopened_and_still_wakes_polls(make_dispatcher, stub_for, history):
    server = await make_dispatcher(tick_s=30.0)
    stub = await stub_for(server)
    await wait_until(lambda: history.fake.watchers == 1, what="WatchReady stream")
    history.fake.break_watches()
    await wait_until(lambda: server.watch.connects >= 2 and history.fake.watchers == 1, timeout=3,
                     what="stream reopened")
    pending = asyncio.ensure_future(poll(stub, capacity=1, max_wait=5))
    await wait_until(lambda: server.lot.parked() == 1, what="poll parked")
    task_id = history.fake.add_task(0)
    history.fake.notify(0)
    assert [t.task_id for t in await asyncio.wait_for(pending, 2)] == [task_id]


async def test_reflection_lists_the_dispatch_and_breaker_admin_services(dispatcher):
    async with grpc.aio.insecure_channel(dispatcher.target) as channel:
        stub = reflection_pb2_grpc.ServerReflectionStub(channel)
        call = stub.ServerReflectionInfo(timeout=5)
        await call.write(reflection_pb2.ServerReflectionRequest(list_services=""))
        reply = await call.read()
        await call.done_writing()
    names = {s.name for s in reply.list_services_response.service}
    assert "ratchet.internal.worker.v1.DispatchService" in names
    assert "ratchet.internal.dispatcher.v1.BreakerAdminService" in names
    assert "grpc.health.v1.Health" in names


def _health(port: int) -> int:
    with grpc.insecure_channel(f"127.0.0.1:{port}") as channel:
        return health_pb2_grpc.HealthStub(channel).Check(health_pb2.HealthCheckRequest(), timeout=1).status


async def test_the_process_serves_and_stops_on_sigterm(history, tmp_path, dispatch_dsn):
    port = free_port()
    config = tmp_path / "dispatcher.json"
    config.write_text(json.dumps({"history_target": history.target, "shard_ids": [0, 1], "grpc_port": port,
                                  "dsn": dispatch_dsn,
                                  "host_token_sha256": [hashlib.sha256(TOKEN.encode()).hexdigest()]}))
    proc = subprocess.Popen([sys.executable, "-m", "ratchet.services.dispatcher", "--config", str(config)],
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        deadline = time.monotonic() + 20
        status = None
        while status != health_pb2.HealthCheckResponse.SERVING:
            assert time.monotonic() < deadline, "dispatcher never reported SERVING"
            assert proc.poll() is None, proc.stdout.read()
            try:
                status = await asyncio.to_thread(_health, port)
            except grpc.RpcError:
                await asyncio.sleep(0.1)
        started = time.monotonic()
        proc.send_signal(signal.SIGTERM)
        code = await asyncio.to_thread(proc.wait, 10)
        assert code == 0
        assert time.monotonic() - started < 6
        assert "dispatcher stopped" in proc.stdout.read()
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(timeout=10)


async def test_a_bad_config_exits_2_naming_the_field(tmp_path):
    config = tmp_path / "dispatcher.json"
    config.write_text(json.dumps({"history_target": "127.0.0.1:1", "shard_ids": [], "host_token_sha256": ["x"],
                                  "dsn": "postgresql://127.0.0.1:1/x"}))
    proc = await asyncio.to_thread(subprocess.run, [sys.executable, "-m", "ratchet.services.dispatcher",
                                                    "--config", str(config)], capture_output=True, text=True,
                                   timeout=30)
    assert proc.returncode == 2
    assert "shard_ids" in proc.stderr
