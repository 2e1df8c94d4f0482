"""Fixtures for the gateway's integration tests: a real control database,
fake in-memory history, cron and dispatcher services on a real grpc.aio
server (fakes.py), and the gateway itself (gRPC + REST) in-process."""

from __future__ import annotations

import base64
import dataclasses
import gzip
import hashlib
import io
import tarfile
import tempfile

import grpc
import httpx
import pytest_asyncio

from ratchet.api.apps.v1 import apps_pb2, apps_pb2_grpc
from ratchet.api.tasks.v1 import tasks_pb2, tasks_pb2_grpc
from ratchet.api.tenants.v1 import tenants_pb2, tenants_pb2_grpc
from ratchet.libs.pg.cluster import free_port
from ratchet.services.gateway import config as gw_config
from ratchet.services.gateway.server import Gateway

from .fakes import FakeCron, FakeDispatcher, FakeHistory, start_peers

ADMIN_KEY = "admin-secret-for-tests"
HOST_TOKEN = "host-token-for-tests"
SHARDS = [0, 1, 2, 3]


def make_bundle(files: dict[str, bytes] | None = None) -> tuple[bytes, str]:
    """A deterministic gzip tar and its digest (the gzip header's mtime too: tarfile's "w:gz"
    stamps the current second there, so two bundles of the same files made a second apart
    differed, and a redeploy test saw a new digest now and then)."""
    buf = io.BytesIO()
    with gzip.GzipFile(fileobj=buf, mode="wb", mtime=0) as gz, tarfile.open(fileobj=gz, mode="w") as tar:
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
    cron: FakeCron = dataclasses.field(default_factory=FakeCron)
    dispatcher: FakeDispatcher = dataclasses.field(default_factory=FakeDispatcher)

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
    fake, cron, dispatcher = FakeHistory(SHARDS), FakeCron(), FakeDispatcher()
    peers, port = await start_peers(fake, cron, dispatcher)
    blob_dir = tempfile.mkdtemp(prefix="ratchet-gw-blobs-")
    gw = await start_gateway(dsn, port, blob_dir, cron_target=f"127.0.0.1:{port}",
                             dispatcher_target=f"127.0.0.1:{port}")
    channel = grpc.aio.insecure_channel(f"127.0.0.1:{gw.grpc_port}")
    http = httpx.AsyncClient(base_url=f"http://127.0.0.1:{gw.rest_port}", timeout=30)
    e = Env(gw, fake, channel, http, "", "", "", pg_cluster, blob_dir, cron, dispatcher)
    t = await e.new_tenant("acme")
    e.api_key, e.tenant_id, e.app_id = t.api_key, t.tenant_id, t.app_id
    await e.deploy(t.api_key)
    yield e
    await http.aclose()
    await channel.close()
    await gw.stop(grace=1)
    await peers.stop(0)


def b64(data: bytes) -> str:
    return base64.b64encode(data).decode()
