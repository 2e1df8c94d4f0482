"""The CLI and client against the real local platform (every service
a process, real Postgres): dead letters listed, fixed and bulk-retried;
retry rules from deploy; checkpoints and schedule fields on tasks; schedules
and breakers through the gateway. One platform for the module."""

from __future__ import annotations

import importlib.util
import json
import os
import pathlib
import subprocess
import sys
import tempfile
import textwrap

import pytest

from ratchet.cli.platform import SERVICES, LocalPlatform
from tests.integration.cli.conftest import REPO

MISSING = [s for s in SERVICES if importlib.util.find_spec(f"ratchet.services.{s}.__main__") is None]
pytestmark = [pytest.mark.skipif(bool(MISSING), reason=f"service(s) not built yet: {MISSING}"),
              pytest.mark.timeout(180)]

APP = '''
import os

from ratchet import RetryPolicy, task

ONCE = RetryPolicy(max_attempts=1, base="100ms", cap="100ms")


@task(retries=ONCE)
def report(ctx, payload):
    """Fails until the marker file exists: the bug a customer fixes before a bulk retry."""
    if not os.path.exists(payload["fixed_if"]):
        raise KeyError("customer_id")
    return {"ok": payload["n"], "retry": ctx.attempt}


@task(retries=RetryPolicy(max_attempts=5, base="100ms", cap="100ms", rules={"ValueError": "fatal"}))
def strict(ctx, payload):
    raise ValueError("never worth retrying")


@task
def count(ctx, payload):
    for n in range(1, payload + 1):
        ctx.checkpoint({"done": n})
    return {"schedule_id": ctx.schedule_id,
            "scheduled_time": ctx.scheduled_time.isoformat() if ctx.scheduled_time else None}
'''


@pytest.fixture(scope="module")
def platform():
    root = pathlib.Path(tempfile.mkdtemp(prefix="ratchet-cli4-"))
    os.chmod(root, 0o755)
    app = root / "app"
    app.mkdir()
    (app / "app.py").write_text(textwrap.dedent(APP))
    plat = LocalPlatform(root / "state", shards=2, pg_settings={"fsync": "off", "synchronous_commit": "off"},
                         overrides={"hostagent": {"heartbeat_interval_s": 0.3}})
    plat.start()
    try:
        plat.marker = root / "fixed"
        assert ratchet(plat, "deploy", str(app))[0] == 0
        yield plat
    finally:
        plat.stop()


def ratchet(plat: LocalPlatform, *args: str) -> tuple[int, object, str]:
    env = {**os.environ, "RATCHET_ENDPOINT": plat.grpc_address("gateway"), "RATCHET_API_KEY": plat.tenant["api_key"]}
    res = subprocess.run([sys.executable, "-m", "ratchet.cli", *args], env=env, capture_output=True, text=True,
                         timeout=90, cwd=REPO)
    out = json.loads(res.stdout) if res.stdout.strip() else None
    return res.returncode, out, res.stderr


def test_dead_letters_are_listed_fixed_and_retried_in_bulk(platform):
    with platform.client() as client:
        ids = [client.enqueue("report", {"n": n, "fixed_if": str(platform.marker)}) for n in range(5)]
        for task_id in ids:
            assert client.wait(task_id, timeout=30).state == "FAILED"
    code, out, err = ratchet(platform, "tasks", "list", "--state", "FAILED", "--type", "report",
                             "--error-class", "KeyError", "--since", "10m", "--page-size", "2", "--all")
    assert code == 0, err
    assert sorted(t["task_id"] for t in out["tasks"]) == sorted(ids)
    assert {t["error"]["message"] for t in out["tasks"]} == {"'customer_id'"}
    code, out, err = ratchet(platform, "tasks", "retry", "--type", "report", "--dry-run")
    assert (code, out) == (0, {"matched": 5, "operation": None}), err
    platform.marker.touch()  # the fix is deployed
    code, op, err = ratchet(platform, "tasks", "retry", "--type", "report", "--error-class", "KeyError",
                            "--request-id", "fix-customer-id", "--wait", "60")
    assert code == 0 and (op["state"], op["matched"], op["succeeded"], op["failed"]) == ("SUCCEEDED", 5, 5, 0), \
        err + json.dumps(op)
    with platform.client() as client:
        retried = [client.get(task_id).retried_as for task_id in ids]
        assert all(retried)
        results = [client.wait(new_id, timeout=30) for new_id in retried]
    assert sorted(r.result["ok"] for r in results) == list(range(5))
    assert {r.retry_of for r in results} == set(ids)
    # Re-running the same request is the same operation: nothing is retried twice.
    code, again, err = ratchet(platform, "tasks", "retry", "--type", "report", "--error-class", "KeyError",
                               "--request-id", "fix-customer-id")
    assert code == 0 and again["operation"]["operation_id"] == op["operation_id"], err
    code, _, err = ratchet(platform, "tasks", "retry", "--type", "other", "--request-id", "fix-customer-id")
    assert code == 1 and err.startswith("error: ALREADY_EXISTS: request_id 'fix-customer-id' was already used")


def test_a_fatal_rule_from_deploy_fails_at_once(platform):
    with platform.client() as client:
        info = client.wait(client.enqueue("strict"), timeout=30)
    assert info.state == "FAILED" and info.attempt == 1 and info.error.error_class == "ValueError"
    assert info.retry["rules"]["ValueError"]["non_retryable"] is True


def test_checkpoints_and_scheduled_time_reach_the_task(platform):
    code, sched, err = ratchet(platform, "schedules", "create", "0 0 1 1 *", "count", "--payload", "3",
                               "--overlap", "skip")
    assert code == 0 and sched["state"] == "ACTIVE" and sched["overlap_policy"] == "skip", err
    code, fired, err = ratchet(platform, "schedules", "trigger", sched["schedule_id"])
    assert code == 0 and fired["task_id"], err
    with platform.client() as client:
        info = client.wait(fired["task_id"], timeout=30)
    assert info.state == "SUCCEEDED" and info.checkpoint == {"done": 3}
    assert info.schedule_id == sched["schedule_id"] == info.result["schedule_id"]
    assert info.scheduled_time.isoformat() == info.result["scheduled_time"]
    code, listed, _ = ratchet(platform, "schedules", "list")
    assert [s["schedule_id"] for s in listed["schedules"]] == [sched["schedule_id"]]
    assert ratchet(platform, "schedules", "pause", sched["schedule_id"])[1]["state"] == "PAUSED"
    assert ratchet(platform, "schedules", "delete", sched["schedule_id"])[0] == 0
    code, _, err = ratchet(platform, "schedules", "get", sched["schedule_id"])
    assert code == 1 and err.startswith("error: NOT_FOUND")


def test_bad_input_is_one_line_from_the_real_services(platform):
    code, _, err = ratchet(platform, "schedules", "create", "61 * * * *", "count")
    assert code == 1 and err.startswith("error: INVALID_ARGUMENT") and "61" in err and err.count("\n") == 1
    code, _, err = ratchet(platform, "operations", "get", "no-such-operation")
    assert code == 1 and err.startswith("error: ")
    code, out, err = ratchet(platform, "breakers", "list")
    assert code == 0 and out == {"breakers": []}, err
