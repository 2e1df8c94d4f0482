"""LocalPlatform's process management, on fake services (fast, no real mesh):
restart on death, held-down services, start-up failures that show the log."""

from __future__ import annotations

import json
import pathlib
import time

import pytest

from ratchet.cli import procs
from ratchet.cli.platform import SERVICES, LocalPlatform, PlatformError
from tests.integration.cli.conftest import fake_options


def _wait(cond, timeout=15.0):
    deadline = time.monotonic() + timeout
    while not cond():
        assert time.monotonic() < deadline, "condition not met in time"
        time.sleep(0.05)


def test_lifecycle_restart_hold_and_records(state_dir):
    p = LocalPlatform(state_dir, shards=3, **fake_options(history={"lease_duration_s": 3}))
    with p:
        history = json.loads(p.config_path("history").read_text())
        assert history["lease_duration_s"] == 3 and sorted(history["shards"]) == ["0", "1", "2"]
        gateway = json.loads(p.config_path("gateway").read_text())
        assert gateway["shard_ids"] == [0, 1, 2] and gateway["history_target"] == p.grpc_address("history")
        agent = json.loads(p.config_path("hostagent").read_text())
        assert agent["control_target"] == p.grpc_address("gateway") and agent["host_token"]
        assert p.config_path("hostagent").stat().st_mode & 0o777 == 0o600

        endpoints = json.loads((state_dir / "endpoints.json").read_text())
        assert endpoints["api_key"] and endpoints["grpc"] == p.grpc_address("gateway")
        assert (state_dir / "endpoints.json").stat().st_mode & 0o777 == 0o600
        assert (state_dir / "secrets" / "admin_key").stat().st_mode & 0o777 == 0o600
        assert {n: s["pid"] for n, s in endpoints["services"].items()} == {
            n: p.service_pid(n) for n in SERVICES}

        # A crash is restarted by the supervisor, and the records follow.
        old = p.service_pid("dispatcher")
        p.kill("dispatcher")
        _wait(lambda: p.service_pid("dispatcher") not in (None, old))
        p.wait_serving("dispatcher", timeout=15)
        assert p._supervisor.restarts["dispatcher"] == 1
        _wait(lambda: json.loads((state_dir / "endpoints.json").read_text())["services"]["dispatcher"]["pid"]
              == p.service_pid("dispatcher"))

        # A service stopped on purpose stays down until started again.
        p.stop_service("hostagent")
        time.sleep(1.0)  # longer than the first restart backoff (0.5 s): it must not come back
        assert p.service_pid("hostagent") is None and p.health("hostagent") == "UNREACHABLE"
        p.start_service("hostagent")
        assert p.health("hostagent") == "SERVING"

        # A paused service is still ours; resume brings it back.
        p.pause("gateway")
        p.resume("gateway")
        p.wait_serving("gateway", timeout=10)
        pids = {n: (p.service_pid(n), procs.start_time(p.service_pid(n))) for n in p.procs}
    assert all(not procs.is_ours(pid, st) for pid, st in pids.values())
    assert not p.cluster.running()


def test_restart_reuses_keys_ports_postgres_and_tenant(state_dir):
    with LocalPlatform(state_dir, shards=1, **fake_options()) as p:
        first = dict(p.endpoints)
    with LocalPlatform(state_dir, shards=1, **fake_options()) as p:
        again = p.endpoints
    for key in ("api_key", "admin_key", "tenant_id", "grpc", "rest"):
        assert again[key] == first[key], key
    assert again["postgres"]["port"] == first["postgres"]["port"]


def test_a_service_that_cannot_start_fails_start_with_its_log(state_dir):
    p = LocalPlatform(state_dir, shards=1, **fake_options(dispatcher={"fake_exit_code": 3}))
    with pytest.raises(PlatformError, match=r"dispatcher exited with code 3(.|\n)*exiting on purpose"):
        p.start()
    # start() cleans up what it had started.
    assert all(p.service_pid(n) is None for n in ("history", "gateway"))
    assert not p.cluster.running()


def test_unknown_service_overrides_are_refused(state_dir):
    with pytest.raises(ValueError, match="unknown service"):
        LocalPlatform(state_dir, overrides={"quota": {}})


def test_services_die_with_a_killed_supervisor(state_dir, tmp_path):
    """SIGKILL the process running the platform: every service it started exits."""
    import os
    import signal
    import subprocess
    import sys

    script = tmp_path / "run_platform.py"
    script.write_text(
        "import json, sys, time\n"
        "from ratchet.cli.platform import LocalPlatform\n"
        "from tests.integration.cli.conftest import fake_options\n"
        f"p = LocalPlatform({str(state_dir)!r}, shards=1, **fake_options())\n"
        "p.start()\n"
        "print(json.dumps({n: p.service_pid(n) for n in p.procs}), flush=True)\n"
        "time.sleep(600)\n")
    repo = str(pathlib.Path(__file__).resolve().parents[3])
    proc = subprocess.Popen([sys.executable, str(script)], stdout=subprocess.PIPE, text=True, cwd=repo,
                            env={**os.environ, "PYTHONPATH": repo})
    pids: dict = {}
    try:
        pids = json.loads(proc.stdout.readline())
        assert pids and all(pids.values())
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait(timeout=10)
        _wait(lambda: not any(_alive(pid) for pid in pids.values()), timeout=20)
    finally:
        if proc.poll() is None:
            proc.kill()
        for pid in pids.values():
            if pid and _alive(pid):
                os.kill(pid, signal.SIGKILL)
        _stop_postgres(state_dir)


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except (FileNotFoundError, ProcessLookupError):
        return False


def _stop_postgres(state_dir) -> None:
    from ratchet.libs.pg.cluster import LocalCluster
    cluster = LocalCluster(state_dir / "pg")
    if cluster.running():
        cluster.stop(mode="immediate")
