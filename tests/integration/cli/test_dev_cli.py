"""`ratchet dev up --detach` / `dev status` / `dev down` on the real services,
as a user runs them, in a private state folder; plus one task end to end."""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
import urllib.request

import pytest

from ratchet.cli import procs
from ratchet.cli.platform import SERVICES
from tests.integration.cli.conftest import REPO

MISSING = [s for s in SERVICES if importlib.util.find_spec(f"ratchet.services.{s}.__main__") is None]
pytestmark = pytest.mark.skipif(bool(MISSING), reason=f"service(s) not built yet: {MISSING}")


def ratchet(*args: str, timeout: float = 200) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "ratchet.cli", *args], capture_output=True, text=True,
                          timeout=timeout, cwd=REPO)


def test_dev_up_status_down(state_dir):
    options = state_dir.parent / "options.json"
    options.write_text(json.dumps({"pg_settings": {"fsync": "off", "synchronous_commit": "off"}}))
    sd = ["--state-dir", str(state_dir)]
    up = ratchet("dev", "up", "--detach", "--shards", "2", "--options", str(options), *sd)
    assert up.returncode == 0, up.stderr + up.stdout
    try:
        endpoints = json.loads((state_dir / "endpoints.json").read_text())
        assert endpoints["rest"].startswith("http://127.0.0.1:") and endpoints["api_key"].startswith("rk_")
        assert endpoints["api_key"] in up.stdout and endpoints["rest"] in up.stdout

        status = ratchet("dev", "status", "--json", *sd)
        assert status.returncode == 0, status.stdout
        rows = json.loads(status.stdout)
        assert {s: rows[s]["status"] for s in SERVICES} == dict.fromkeys(SERVICES, "SERVING")
        assert rows["postgres"]["status"] == "RUNNING"

        with urllib.request.urlopen(endpoints["openapi"], timeout=10) as resp:
            assert resp.status == 200 and "/v1/tasks" in json.loads(resp.read())["paths"]

        deploy = ratchet("deploy", str(REPO / "examples" / "hello"), "--app", "default", *sd)
        assert deploy.returncode == 0, deploy.stderr
        assert {h["name"] for h in json.loads(deploy.stdout)["handlers"]} == {"greet", "add", "flaky", "slow", "signup"}
        done = ratchet("tasks", "enqueue", "greet", "--payload", '{"name": "CLI"}', "--wait", "60", *sd)
        assert done.returncode == 0, done.stderr + done.stdout
        assert json.loads(done.stdout)["result"]["greeting"] == "Hello, CLI!"
    finally:
        down = ratchet("dev", "down", *sd)
    assert down.returncode == 0, down.stderr
    for svc in endpoints["services"].values():
        assert not procs.is_ours(svc["pid"], svc["start_time"])
    after = ratchet("dev", "status", "--json", *sd)
    assert after.returncode == 1
    assert json.loads(after.stdout)["postgres"]["status"] == "DOWN"
