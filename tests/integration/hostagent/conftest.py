"""Fixtures: fake dispatcher + control on a real gRPC server, and a host agent
(in-process, its sandboxes real processes) pointed at them."""

from __future__ import annotations

import asyncio
import shutil
import tempfile

import pytest

from ratchet.services.hostagent.config import load
from ratchet.services.hostagent.server import HostAgent
from tests.integration.hostagent.fakes import SAMPLE_APP, TOKEN, serve_fakes


@pytest.fixture
async def fakes():
    server, port, dispatcher, control = await serve_fakes()
    control.deploy("app-1", {"app.py": SAMPLE_APP})
    yield port, dispatcher, control
    await server.stop(0)


@pytest.fixture
def work_dir():
    # Unix socket paths must be short: not under pytest's long tmp_path.
    path = tempfile.mkdtemp(prefix="rha-", dir="/tmp")
    yield path
    for dirpath in (path,):
        shutil.rmtree(dirpath, onerror=_force_remove)


def _force_remove(func, path, _exc):
    import os
    import stat

    if not os.path.lexists(path):
        return
    parent = os.path.dirname(path)
    os.chmod(parent, os.stat(parent).st_mode | stat.S_IWUSR | stat.S_IXUSR)
    if os.path.isdir(path):
        os.chmod(path, 0o755)
    func(path)


def agent_config(port: int, work_dir: str, **overrides):
    return load(overrides={
        "dispatcher_target": f"127.0.0.1:{port}", "control_target": f"127.0.0.1:{port}", "host_token": TOKEN,
        "work_dir": work_dir, "capacity": 2, "heartbeat_interval_s": 0.1, "poll_max_wait_s": 1.0,
        "deployment_cache_s": 0.0, "rpc_timeout_s": 5.0, "shutdown_grace_s": 1.0, "worker_id": "agent-test",
        **overrides})


@pytest.fixture
async def agent(fakes, work_dir):
    port, _dispatcher, _control = fakes
    host_agent = HostAgent(agent_config(port, work_dir))
    await host_agent.start()
    yield host_agent
    await asyncio.wait_for(host_agent.stop(grace_s=0.5), 30)
