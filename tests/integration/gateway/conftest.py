"""Fixtures for the gateway's integration tests: a real control database, a
fake in-memory HistoryService on a real grpc.aio server, and the gateway
itself (gRPC + REST) in-process."""

from __future__ import annotations

import asyncio
import base64
import dataclasses
import hashlib
import io
import tarfile
import tempfile

import grpc
import httpx
import pytest_asyncio
from google.protobuf import json_format, struct_pb2

from ratchet.api.apps.v1 import apps_pb2, apps_pb2_grpc
from ratchet.api.tasks.v1 import tasks_pb2, tasks_pb2_grpc
from ratchet.api.tenants.v1 import tenants_pb2, tenants_pb2_grpc
from ratchet.internal.history.v1 import history_pb2, history_pb2_grpc
from ratchet.libs.pg.cluster import free_port
from ratchet.libs.shardmap import ShardMap
from ratchet.services.gateway import config as gw_config
from ratchet.services.gateway.server import Gateway

ADMIN_KEY = "admin-secret-for-tests"
HOST_TOKEN = "host-token-for-tests"
SHARDS = [0, 1, 2, 3]


class FakeHistory(history_pb2_grpc.HistoryServiceServicer):
    """An in-memory history: idempotency by (tenant, app, key), tenant-scoped reads.

    It checks the gateway's routing (each task on the shard its id names) and
    records every call, so tests can assert that bad input sent nothing.
    """

    def __init__(self, shard_ids: list[int]):
        self.shard_map = ShardMap.even(shard_ids)
        self.tasks: dict[str, history_pb2.NewTask] = {}
        self.states: dict[str, int] = {}
        self.keys: dict[tuple[str, str, str], tuple[str, str]] = {}
        self.calls: list[tuple[str, object]] = []
        self.delay_s = 0.0

    async def CreateTasks(self, request, context):
        self.calls.append(("CreateTasks", request))
        if self.delay_s:
            await asyncio.sleep(self.delay_s)
        results, conflict, new = [], False, []
        for t in request.tasks:
            if self.shard_map.shard_for_task(t.task_id) != request.shard_id:
                await context.abort(grpc.StatusCode.INVALID_ARGUMENT, f"task {t.task_id} is not on {request.shard_id}")
            known = self.keys.get((t.tenant_id, t.app_id, t.idempotency_key)) if t.idempotency_key else None
            if known is None:
                results.append(history_pb2.CreateResult(task_id=t.task_id))
                new.append(t)
            elif known[1] == t.fingerprint:
                results.append(history_pb2.CreateResult(task_id=known[0], deduplicated=True))
            else:
                conflict = True
                results.append(history_pb2.CreateResult(task_id=known[0], conflict=True))
        if not conflict:
            for t in new:
                self.tasks[t.task_id] = t
                self.states[t.task_id] = tasks_pb2.TASK_STATE_ENQUEUED
                if t.idempotency_key:
                    self.keys[(t.tenant_id, t.app_id, t.idempotency_key)] = (t.task_id, t.fingerprint)
        return history_pb2.CreateTasksResponse(results=results)

    async def _owned(self, request, context) -> history_pb2.NewTask:
        t = self.tasks.get(request.task_id)
        if t is None or t.tenant_id != request.tenant_id or \
                self.shard_map.shard_for_task(request.task_id) != request.shard_id:
            await context.abort(grpc.StatusCode.NOT_FOUND, "no such task")
        return t

    async def GetTask(self, request, context):
        self.calls.append(("GetTask", request))
        t = await self._owned(request, context)
        payload = json_format.Parse(t.payload_json.decode(), struct_pb2.Value())
        task = tasks_pb2.Task(task_id=t.task_id, task_type=t.task_type, queue=t.queue,
                              state=self.states[t.task_id], max_attempts=t.retry.max_attempts, version=1,
                              payload=payload, idempotency_key=t.idempotency_key, retry=t.retry,
                              timeouts=t.timeouts)
        return history_pb2.GetTaskResponse(task=task)

    async def CancelTask(self, request, context):
        self.calls.append(("CancelTask", request))
        await self._owned(request, context)
        self.states[request.task_id] = tasks_pb2.TASK_STATE_CANCELED
        return history_pb2.CancelTaskResponse(state=tasks_pb2.TASK_STATE_CANCELED)


def make_bundle(files: dict[str, bytes] | None = None) -> tuple[bytes, str]:
    """A deterministic gzip tar and its digest."""
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:gz") as tar:
        for name, data in sorted((files or {"app.py": b"# handlers\n"}).items()):
            info = tarfile.TarInfo(name)
            info.size, info.mtime = len(data), 0
            tar.addfile(info, io.BytesIO(data))
    data = buf.getvalue()
    return data, "sha256:" + hashlib.sha256(data).hexdigest()


@dataclasses.dataclass
class Env:
    """A running gateway, its fake history and a deployed tenant."""

    gateway: Gateway
    history: FakeHistory
    channel: grpc.aio.Channel
    http: httpx.AsyncClient
    api_key: str
    tenant_id: str
    app_id: str
    cluster: object
    blob_dir: str

    @property
    def tasks(self) -> tasks_pb2_grpc.TaskServiceStub:
        return tasks_pb2_grpc.TaskServiceStub(self.channel)

    @property
    def apps(self) -> apps_pb2_grpc.AppServiceStub:
        return apps_pb2_grpc.AppServiceStub(self.channel)

    @property
    def tenants(self) -> tenants_pb2_grpc.TenantServiceStub:
        return tenants_pb2_grpc.TenantServiceStub(self.channel)

    def md(self, key: str | None = None) -> tuple:
        return (("authorization", f"Bearer {key or self.api_key}"),)

    def auth(self, key: str | None = None) -> dict:
        return {"Authorization": f"Bearer {key or self.api_key}"}

    async def new_tenant(self, name: str) -> tenants_pb2.CreateTenantResponse:
        return await self.tenants.CreateTenant(tenants_pb2.CreateTenantRequest(name=name),
                                               metadata=self.md(ADMIN_KEY), timeout=10)

    async def deploy(self, key: str, app: str = "default", handlers=None, files=None):
        bundle, digest = make_bundle(files)
        hs = handlers or [apps_pb2.Handler(name="send"), apps_pb2.Handler(
            name="resize", retry=tasks_pb2.RetryPolicy(max_attempts=3))]
        return await self.apps.CreateDeployment(apps_pb2.CreateDeploymentRequest(
            app=app, bundle=bundle, digest=digest, handlers=hs), metadata=self.md(key), timeout=10)


def sha(s: str) -> str:
    return hashlib.sha256(s.encode()).hexdigest()


async def start_history(fake: FakeHistory) -> tuple[grpc.aio.Server, int]:
    server = grpc.aio.server()
    history_pb2_grpc.add_HistoryServiceServicer_to_server(fake, server)
    port = server.add_insecure_port("127.0.0.1:0")
    await server.start()
    return server, port


async def start_gateway(control_dsn: str, history_port: int, blob_dir: str, **overrides) -> Gateway:
    cfg = gw_config.load(overrides={
        "control_dsn": control_dsn, "history_target": f"127.0.0.1:{history_port}", "shard_ids": SHARDS,
        "blob_dir": blob_dir, "admin_key_sha256": sha(ADMIN_KEY), "host_token_sha256": [sha(HOST_TOKEN)],
        "rpc_timeout_s": 5.0, **overrides})
    gw = Gateway(cfg)
    await gw.start()
    return gw


@pytest_asyncio.fixture(scope="module")
async def env(pg_cluster):
    name = f"gw_control_{free_port()}"
    pg_cluster.create_database(name)
    dsn = pg_cluster.dsn(name)
    fake = FakeHistory(SHARDS)
    hserver, hport = await start_history(fake)
    blob_dir = tempfile.mkdtemp(prefix="ratchet-gw-blobs-")
    gw = await start_gateway(dsn, hport, blob_dir)
    channel = grpc.aio.insecure_channel(f"127.0.0.1:{gw.grpc_port}")
    http = httpx.AsyncClient(base_url=f"http://127.0.0.1:{gw.rest_port}", timeout=30)
    e = Env(gw, fake, channel, http, "", "", "", pg_cluster, blob_dir)
    t = await e.new_tenant("acme")
    e.api_key, e.tenant_id, e.app_id = t.api_key, t.tenant_id, t.app_id
    await e.deploy(t.api_key)
    yield e
    await http.aclose()
    await channel.close()
    await gw.stop(grace=1)
    await hserver.stop(0)


def b64(data: bytes) -> str:
    return base64.b64encode(data).decode()
