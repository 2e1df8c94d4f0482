"""Fixtures: a fake history on a free port, the dispatcher in-process in
front of it (its breakers in a real database), and an authenticated
DispatchService stub."""

from __future__ import annotations

import hashlib
from collections.abc import Awaitable, Callable

import grpc
import pytest
from dispatch_fake_history import FakeHistoryServer
from dispatch_helpers import TOKEN

from ratchet.internal.worker.v1 import worker_pb2_grpc as wgrpc
from ratchet.services.dispatcher.config import DispatcherConfig
from ratchet.services.dispatcher.server import DispatcherServer


@pytest.fixture
async def history():
    server = FakeHistoryServer()
    await server.start()
    yield server
    await server.stop()


@pytest.fixture(scope="session")
def dispatch_dsn(pg_cluster):
    """One breakers database shared by the tests that trip no breaker (creating
    a database per test would cost more than the tests). Breaker tests use
    fresh_db."""
    pg_cluster.create_database("dispatch_shared")
    return pg_cluster.dsn("dispatch_shared")


@pytest.fixture
async def make_dispatcher(history, dispatch_dsn):
    """make_dispatcher(**config_overrides) -> started DispatcherServer (stopped after the test)."""
    started: list[DispatcherServer] = []

    async def make(target: str | None = None, tick_s: float | None = None, refresh_s: float | None = None,
                   **overrides) -> DispatcherServer:
        fields = dict(history_target=target or history.target, shard_ids=[0, 1],
                      host_token_sha256=[hashlib.sha256(TOKEN.encode()).hexdigest()],
                      rpc_timeout_s=2.0, dsn=dispatch_dsn)
        fields.update(overrides)
        server = DispatcherServer(DispatcherConfig(**fields))
        if tick_s is not None:
            server.tick._tick_s = tick_s
        if refresh_s is not None:
            server.breaker_loop.refresh_s = refresh_s
        await server.start()
        started.append(server)
        return server

    yield make
    for server in started:
        await server.stop(grace=0.5)


@pytest.fixture
async def stub_for() -> Callable[[DispatcherServer], Awaitable[wgrpc.DispatchServiceStub]]:
    channels: list[grpc.aio.Channel] = []

    async def make(server: DispatcherServer) -> wgrpc.DispatchServiceStub:
        channel = grpc.aio.insecure_channel(server.target)
        channels.append(channel)
        return wgrpc.DispatchServiceStub(channel)

    yield make
    for channel in channels:
        await channel.close()


@pytest.fixture
async def dispatcher(make_dispatcher):
    return await make_dispatcher()


@pytest.fixture
async def stub(dispatcher, stub_for):
    return await stub_for(dispatcher)
