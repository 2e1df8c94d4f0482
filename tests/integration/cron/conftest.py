"""Fixtures for the cron service's integration tests: a real ratchet_cron
database per test, fake gateway ControlService and fake HistoryService on a
real grpc.aio server, and cron processes-in-miniature (CronServer) started
in-process against them."""

from __future__ import annotations

import asyncio
import collections
import dataclasses
import itertools
import os
import time

import asyncpg
import grpc
import pytest
import pytest_asyncio

from ratchet.api.schedules.v1 import schedules_pb2 as spb
from ratchet.api.tasks.v1 import tasks_pb2
from ratchet.internal.cron.v1 import cron_pb2 as cpb
from ratchet.internal.cron.v1 import cron_pb2_grpc
from ratchet.internal.gateway.v1 import control_pb2, control_pb2_grpc
from ratchet.internal.history.v1 import history_pb2, history_pb2_grpc
from ratchet.libs.shardmap import ShardMap, new_task_id, slot_for_key
from ratchet.services.cron import config as cron_config
from ratchet.services.cron.server import CronServer

MESH_TOKEN = "cron-mesh-token-for-tests"
SHARDS = [0, 1, 2, 3]
TENANT, APP = "tenant-1", "app-1"
CALLER = cpb.Caller(tenant_id=TENANT, app_id=APP)
TERMINAL = {tasks_pb2.TASK_STATE_SUCCEEDED, tasks_pb2.TASK_STATE_FAILED, tasks_pb2.TASK_STATE_CANCELED,
            tasks_pb2.TASK_STATE_EXPIRED}


@dataclasses.dataclass
class FakeTask:
    task_id: str
    tenant_id: str
    schedule_id: str
    scheduled_time: float  # epoch seconds
    request: object
    state: int = tasks_pb2.TASK_STATE_ENQUEUED


class FakeMesh(control_pb2_grpc.ControlServiceServicer, history_pb2_grpc.HistoryServiceServicer):
    """The gateway's EnqueueScheduled and history's GetTask/CancelTask, in memory.

    Enqueues are deduplicated by the key the real gateway makes
    (`sched:<schedule_id>@<RFC 3339 UTC>`); every call is recorded.
    `fail_enqueues` answers the next N enqueues UNAVAILABLE.
    """

    def __init__(self):
        self.shard_map = ShardMap.even(SHARDS)
        self.tasks: dict[str, FakeTask] = {}
        self.by_key: dict[str, str] = {}
        self.enqueue_calls: collections.Counter = collections.Counter()
        self.first_call: dict[str, float] = {}  # key -> wall time of its first EnqueueScheduled
        self.cancels: list[str] = []
        self.get_calls = 0
        self.fail_enqueues = 0
        self.refuse_enqueues: str | None = None
        self.conflict_with: str | None = None

    async def EnqueueScheduled(self, request, context):
        if dict(context.invocation_metadata()).get("authorization") != f"Bearer {MESH_TOKEN}":
            await context.abort(grpc.StatusCode.UNAUTHENTICATED, "bad mesh token")
        key = f"sched:{request.schedule_id}@{request.scheduled_time.ToJsonString()}"
        self.enqueue_calls[key] += 1
        self.first_call.setdefault(key, time.time())
        if self.fail_enqueues > 0:
            self.fail_enqueues -= 1
            await context.abort(grpc.StatusCode.UNAVAILABLE, "gateway restarting")
        if self.refuse_enqueues:
            await context.abort(grpc.StatusCode.INVALID_ARGUMENT, self.refuse_enqueues)
        if self.conflict_with:
            await context.abort(grpc.StatusCode.ALREADY_EXISTS, "key taken by a different request",
                                trailing_metadata=(("ratchet-original-task-id", self.conflict_with),))
        if key in self.by_key:
            return control_pb2.EnqueueScheduledResponse(task_id=self.by_key[key], deduplicated=True)
        task_id = new_task_id(slot_for_key(request.tenant_id, key))
        self.by_key[key] = task_id
        self.tasks[task_id] = FakeTask(task_id, request.tenant_id, request.schedule_id,
                                       request.scheduled_time.ToDatetime().timestamp(), request.task)
        return control_pb2.EnqueueScheduledResponse(task_id=task_id)

    async def _task(self, request, context) -> FakeTask:
        t = self.tasks.get(request.task_id)
        if t is None or t.tenant_id != request.tenant_id or \
                self.shard_map.shard_for_task(request.task_id) != request.shard_id:
            await context.abort(grpc.StatusCode.NOT_FOUND, "no such task")
        return t

    async def GetTask(self, request, context):
        self.get_calls += 1
        t = await self._task(request, context)
        return history_pb2.GetTaskResponse(task=tasks_pb2.Task(task_id=t.task_id, state=t.state))

    async def CancelTask(self, request, context):
        t = await self._task(request, context)
        self.cancels.append(t.task_id)
        if t.state not in TERMINAL:
            t.state = tasks_pb2.TASK_STATE_CANCELED
        return history_pb2.CancelTaskResponse(state=t.state)

    # -- helpers for tests ------------------------------------------------------
    def tasks_of(self, schedule_id: str) -> list[FakeTask]:
        return sorted((t for t in self.tasks.values() if t.schedule_id == schedule_id),
                      key=lambda t: t.scheduled_time)

    def finish(self, task_id: str) -> None:
        self.tasks[task_id].state = tasks_pb2.TASK_STATE_SUCCEEDED

    def sends_of(self, schedule_id: str) -> dict[str, int]:
        return {k: n for k, n in self.enqueue_calls.items() if k.startswith(f"sched:{schedule_id}@")}


@pytest_asyncio.fixture
async def mesh():
    fake = FakeMesh()
    server = grpc.aio.server()
    control_pb2_grpc.add_ControlServiceServicer_to_server(fake, server)
    history_pb2_grpc.add_HistoryServiceServicer_to_server(fake, server)
    port = server.add_insecure_port("127.0.0.1:0")
    await server.start()
    fake.target = f"127.0.0.1:{port}"
    yield fake
    await server.stop(0)


@dataclasses.dataclass
class Cron:
    """A running cron server and a stub to it."""

    server: CronServer
    channel: grpc.aio.Channel
    stub: cron_pb2_grpc.CronServiceStub
    stopped: bool = False

    async def stop(self) -> None:
        """Stop once: a test may stop a cron itself before the fixture's teardown does."""
        if self.stopped:
            return
        self.stopped = True
        await self.channel.close()
        await self.server.stop(0.5)


_db_counter = itertools.count()


@pytest_asyncio.fixture
async def cron_db(pg_cluster):
    """A new, empty database for one test. Created over asyncpg, not psql: forking
    psql (as another user) while this process runs gRPC threads can crash the child."""
    name = f"cron_{os.getpid()}_{next(_db_counter)}"
    conn = await asyncpg.connect(pg_cluster.dsn("postgres"), timeout=10)
    try:
        await conn.execute(f'CREATE DATABASE "{name}"', timeout=30)
    finally:
        await conn.close()
    return pg_cluster.dsn(name)


@pytest_asyncio.fixture
async def start_cron(mesh, cron_db):
    """start_cron(**config overrides) -> Cron; every one started is stopped at the end."""
    started: list[Cron] = []

    async def start(hooks=None, **overrides) -> Cron:
        base = dict(dsn=cron_db, gateway_target=mesh.target, history_target=mesh.target, shard_ids=SHARDS,
                    mesh_token=MESH_TOKEN, tick_interval_s=0.05, misfire_grace_s=0.5, buffer_check_s=0.1,
                    rpc_timeout_s=1.0, send_lease_s=2.0)
        base.update(overrides)
        server = CronServer(cron_config.load(overrides=base), hooks=hooks)
        await server.start()
        channel = grpc.aio.insecure_channel(server.target)
        cron = Cron(server, channel, cron_pb2_grpc.CronServiceStub(channel))
        started.append(cron)
        return cron

    yield start
    for cron in started:
        await cron.stop()  # a no-op for one the test already stopped


@pytest_asyncio.fixture
async def db(cron_db):
    conn = await asyncpg.connect(cron_db)
    yield conn
    await conn.close()


@pytest.fixture
def cron(start_cron):
    """A factory alias kept short in tests: `c = await cron()`."""
    return start_cron


async def create(stub, cron: str = "* * * * * *", *, task_type: str = "tick", caller=CALLER, **kw) -> spb.Schedule:
    req = spb.CreateScheduleRequest(cron=cron, task_template=spb.TaskTemplate(task_type=task_type), **kw)
    resp = await stub.CreateSchedule(cpb.CreateScheduleRequest(caller=caller, request=req), timeout=10)
    return resp.response.schedule


async def wait_for(predicate, timeout: float = 10.0, interval: float = 0.05, what: str = "condition"):
    """Await predicate() (sync or async) until truthy or the deadline passes."""
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if asyncio.iscoroutine(value):
            value = await value
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout}s waiting for {what}")
        await asyncio.sleep(interval)


async def holds(predicate, seconds: float, interval: float = 0.05, what: str = "condition"):
    """Assert predicate() stays truthy for `seconds` (the way to check that nothing happens)."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        assert predicate(), f"{what} stopped holding"
        await asyncio.sleep(interval)


async def fired(db, schedule_id: str) -> dict[float, str]:
    """slot (epoch seconds) -> task id of the schedule's FIRED slots."""
    rows = await db.fetch("SELECT slot, task_id FROM schedule_slots WHERE schedule_id = $1 AND state = 'FIRED'",
                          schedule_id)
    return {r["slot"].timestamp(): r["task_id"] for r in rows}


async def slots(db, schedule_id: str) -> list[asyncpg.Record]:
    return await db.fetch("SELECT * FROM schedule_slots WHERE schedule_id = $1 ORDER BY slot", schedule_id)
