"""The whole mesh as separate processes over loopback gRPC, on its own
Postgres, with short leases and grace periods so failure paths run in
seconds. One platform per test session; tests use distinct task payloads so
they do not interfere."""

from __future__ import annotations

import os
import pathlib
import subprocess
import sys
import tempfile
import time

import grpc
import pytest

from ratchet.cli.platform import LocalPlatform
from ratchet.internal.hostagent.v1 import hostagent_pb2, hostagent_pb2_grpc

APP_DIR = pathlib.Path(__file__).parent / "app"

# Short timings: a lost lease is noticed in ~2 s, a cancel grace is 2 s.
OVERRIDES = {
    "history": {"lease_duration_s": 2.0, "cancel_grace_s": 2.0},
    "dispatcher": {"lease_duration_s": 2.0},
    "hostagent": {"heartbeat_interval_s": 0.4, "capacity": 8},
}


@pytest.fixture(scope="session")
def platform():
    root = pathlib.Path(tempfile.mkdtemp(prefix="ratchet-e2e-"))
    os.chmod(root, 0o755)
    plat = LocalPlatform(root / "state", shards=4, overrides=OVERRIDES,
                         pg_settings={"fsync": "off", "synchronous_commit": "off"})
    plat.start()
    try:
        deploy(plat, APP_DIR, "default")
        yield plat
    finally:
        plat.stop()


def deploy(plat: LocalPlatform, app_dir: pathlib.Path, app: str) -> dict:
    """Deploy with the real CLI, as a user would."""
    env = {**os.environ, "RATCHET_ENDPOINT": plat.grpc_address("gateway"),
           "RATCHET_API_KEY": plat.tenant["api_key"]}
    res = subprocess.run([sys.executable, "-m", "ratchet.cli", "deploy", str(app_dir), "--app", app],
                         env=env, capture_output=True, text=True, timeout=60)
    assert res.returncode == 0, res.stdout + res.stderr
    return res


@pytest.fixture
def client(platform):
    with platform.client() as c:
        yield c


def wait_for(predicate, timeout: float = 20.0, interval: float = 0.05, what: str = "condition"):
    """Poll predicate until it returns a truthy value or the deadline passes."""
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout}s waiting for {what}")
        time.sleep(interval)


def sandbox_running(plat: LocalPlatform, task_id: str):
    """The host agent's sandbox record running task_id, or None."""
    with grpc.insecure_channel(plat.grpc_address("hostagent")) as ch:
        stub = hostagent_pb2_grpc.HostAgentServiceStub(ch)
        resp = stub.ListSandboxes(hostagent_pb2.ListSandboxesRequest(), timeout=5)
    for sb in resp.sandboxes:
        if sb.task_id == task_id:
            return sb
    return None
