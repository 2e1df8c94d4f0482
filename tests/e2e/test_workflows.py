"""Workflows end to end (issue 24): the real mesh, the real sandbox, the SDK, REST and the
CLI. Each run gets its own folder for side-effect counts, so runs do not interfere."""

from __future__ import annotations

import os
import pathlib
import shutil
import subprocess
import sys
import tempfile
import time
import uuid

import httpx
import pytest

from ratchet.client import InvalidArgument

from .conftest import APP_DIR, deploy, wait_for

pytestmark = pytest.mark.timeout(180)


@pytest.fixture
def effects():
    folder = tempfile.mkdtemp(prefix="ratchet-wf-")
    os.chmod(folder, 0o777)  # the sandbox may run as another uid
    yield pathlib.Path(folder)
    shutil.rmtree(folder, ignore_errors=True)


def _runs(folder: pathlib.Path, name: str) -> int:
    path = folder / name
    return len(path.read_text().splitlines()) if path.exists() else 0


def _finished(client, wid: str, timeout: float = 60.0):
    def done():
        run = client.get_workflow(wid)
        return run if run.state in ("SUCCEEDED", "FAILED", "CANCELED", "EXPIRED") else None
    return wait_for(done, timeout=timeout, what=f"workflow {wid} to finish")


def _waiting_at(client, wid: str, name: str, timeout: float = 30.0):
    def waiting():
        run = client.get_workflow(wid)
        return run if run.state == "WAITING" and run.pending and run.pending.name == name else None
    return wait_for(waiting, timeout=timeout, what=f"workflow {wid} to wait at {name}")


def test_the_issue_example_runs_through_step_sleep_event_and_version(client, effects):
    user = uuid.uuid4().hex
    wid = client.start_workflow("onboard", {"dir": str(effects), "user": user, "sleep_s": 0.5})
    run = _waiting_at(client, wid, "approved")
    assert run.pending.kind == "WAIT" and run.pending.match == {"user": user}
    assert client.send_workflow_event(wid, "approved", {"user": user, "by": "ops"}) is True
    run = _finished(client, wid)
    assert run.state == "SUCCEEDED", run
    assert run.result == {"account": {"id": user, "runs": 1}, "approval": {"user": user, "by": "ops"},
                          "activated": "v2"}
    assert [(s.position, s.name, s.kind, s.state) for s in run.steps] == [
        (0, "create_account", "STEP", "COMPLETED"), (1, "cool_off", "SLEEP", "COMPLETED"),
        (2, "approved", "WAIT", "COMPLETED"), (3, "activation-v2", "VERSION", "COMPLETED"),
        (4, "activate_v2", "STEP", "COMPLETED")]
    assert _runs(effects, "create") == 1  # three activations, one execution of the step
    assert run.activations >= 3


def test_an_inbox_event_sent_before_the_wait_is_kept_for_it(client, effects):
    user = uuid.uuid4().hex
    wid = client.start_workflow("onboard", {"dir": str(effects), "user": user, "sleep_s": 2})
    _waiting_at(client, wid, "cool_off")
    assert client.send_workflow_event(wid, "approved", {"user": user}) is False  # kept
    run = _finished(client, wid)
    assert run.state == "SUCCEEDED" and run.result["approval"] == {"user": user}


def test_a_broadcast_wakes_only_matching_waits_and_not_after_a_timeout(client, effects):
    a, b, late = (uuid.uuid4().hex for _ in range(3))
    wa = client.start_workflow("onboard", {"dir": str(effects), "user": a, "sleep_s": 0.1})
    wb = client.start_workflow("onboard", {"dir": str(effects), "user": b, "sleep_s": 0.1})
    wl = client.start_workflow("onboard", {"dir": str(effects), "user": late, "sleep_s": 0.1, "timeout": "1s"})
    for wid in (wa, wb):
        _waiting_at(client, wid, "approved")
    assert client.send_event("approved", {"user": a, "extra": 1}) == 1
    assert _finished(client, wa).result["approval"] == {"user": a, "extra": 1}
    assert client.get_workflow(wb).state == "WAITING"
    timed_out = _finished(client, wl)  # the 1 s timeout passes; TimeoutError is caught
    assert timed_out.state == "SUCCEEDED" and timed_out.result["approval"] is None
    assert client.send_event("approved", {"user": late}) == 0
    wait_step = next(s for s in timed_out.steps if s.name == "approved")
    assert wait_step.state == "FAILED" and wait_step.error.error_class == "TimeoutError"
    client.cancel_workflow(wb)
    assert _finished(client, wb).state == "CANCELED"


def test_a_sandbox_killed_between_side_effect_and_checkpoint_reruns_the_step_once(client, effects):
    wid = client.start_workflow("crash_after_effect", {"dir": str(effects)})
    run = _finished(client, wid)
    assert run.state == "SUCCEEDED", run
    assert run.result == {"first": 1, "charge": {"runs": 2, "step_attempt": 2}}
    assert _runs(effects, "first") == 1  # committed before the crash: never ran again
    assert _runs(effects, "charge") == 2
    charge = next(s for s in run.steps if s.name == "charge")
    assert charge.attempt == 2 and charge.state == "COMPLETED"


def test_a_deploy_under_live_runs_fails_a_removed_step_and_ctx_version_migrates_or_keeps_the_branch(
        platform, client, effects, tmp_path):
    # The sleeps outlast the deploy and the host agent's deployment cache (deployment_cache_s, 5 s).
    removed = client.start_workflow("release_steps", {"dir": str(effects), "sleep_s": 9})
    before_branch = client.start_workflow("branching", {"sleep_s": 9})
    past_branch = client.start_workflow("branching", {"sleep_s": 9, "activate_first": True})
    for wid in (removed, before_branch, past_branch):
        _waiting_at(client, wid, "pause" if wid == removed else "s")
    next_release = tmp_path / "app"
    shutil.copytree(APP_DIR, next_release)
    source = (next_release / "app.py").read_text()
    (next_release / "app.py").write_text(source.replace("WORKFLOW_RELEASE = 1", "WORKFLOW_RELEASE = 2"))
    deploy(platform, next_release, "default")
    try:
        runs = {wid: _finished(client, wid) for wid in (removed, before_branch, past_branch)}
    finally:
        deploy(platform, APP_DIR, "default")
    # Release 2 dropped the completed step b: a versioning error, and the next step never runs.
    run = runs[removed]
    assert run.state == "FAILED" and run.error.error_class == "WorkflowVersionError", run
    assert "'b'" in run.error.message and "'pause'" in run.error.message
    assert _runs(effects, "c") == 0
    # A run that had not reached the new marker takes the new branch ...
    run = runs[before_branch]
    assert run.state == "SUCCEEDED" and run.result == "v2", run
    assert [s.name for s in run.steps] == ["a", "s", "activation-v2", "activate_v2"]
    assert next(s for s in run.steps if s.kind == "VERSION").result == 1
    # ... one that passed that point before the marker existed keeps its branch (0).
    run = runs[past_branch]
    assert run.state == "SUCCEEDED" and run.result == "v1", run
    assert [s.name for s in run.steps] == ["a", "activate", "s"]


def test_a_runner_whose_lease_expired_mid_step_has_its_commit_refused(platform, client, effects):
    """Pausing the host agent mid-step lets the lease (2 s here) expire; once it runs again a new
    activation claims the step (step_attempt 2) and the stale runner's commit is refused, so
    the log holds the second runner's result only."""
    wid = client.start_workflow("slow_step", {"dir": str(effects), "seconds": 3})
    wait_for(lambda: _runs(effects, "slow") == 1, timeout=30, what="the step to start")
    platform.pause("hostagent")
    try:
        time.sleep(4)  # past the lease: history's timer moves the run to RETRY_WAIT
    finally:
        platform.resume("hostagent")
    run = _finished(client, wid)
    assert run.state == "SUCCEEDED", run
    assert run.result["step_attempt"] == 2 and run.result["runs"] == 2, run.result
    [work] = run.steps
    assert work.attempt == 2 and work.state == "COMPLETED" and work.result == run.result
    assert _runs(effects, "slow") == 2  # one execution per claim, and no third


def test_cancel_runs_the_registered_compensations_last_first_then_ends_canceled(client, effects):
    wid = client.start_workflow("with_refund", {"dir": str(effects), "sleep_s": 60})
    _waiting_at(client, wid, "hold")
    client.cancel_workflow(wid)
    run = _finished(client, wid)
    assert run.state == "CANCELED", run
    assert (_runs(effects, "charge"), _runs(effects, "refund"), _runs(effects, "notify"), _runs(effects, "ship")) \
        == (1, 1, 1, 0)
    kinds = [(s.name, s.kind, s.state) for s in run.steps]
    assert kinds[:3] == [("charge", "STEP", "COMPLETED"), ("refund", "ON_CANCEL", "COMPLETED"),
                         ("notify", "ON_CANCEL", "COMPLETED")]
    compensations = [s.name for s in run.steps if s.kind == "COMPENSATE"]
    assert compensations == ["compensate:notify", "compensate:refund"]  # the last registered first
    assert all(s.state == "COMPLETED" for s in run.steps if s.kind == "COMPENSATE")


def test_a_sleep_survives_a_restart_of_every_service(platform, client, effects):
    user = uuid.uuid4().hex
    wid = client.start_workflow("onboard", {"dir": str(effects), "user": user, "sleep_s": 4})
    _waiting_at(client, wid, "cool_off")
    for name in ("gateway", "history", "dispatcher", "hostagent", "cron"):
        platform.restart(name)
    _waiting_at(client, wid, "approved", timeout=60)
    client.send_event("approved", {"user": user})
    run = _finished(client, wid)
    assert run.state == "SUCCEEDED" and _runs(effects, "create") == 1


def test_a_long_workflow_pages_its_log(client):
    n = 1500
    wid = client.start_workflow("many_steps", {"n": n})
    run = _finished(client, wid, timeout=150)
    assert run.state == "SUCCEEDED" and run.result == n * (n - 1) // 2
    steps = list(client.iter_workflow_steps(wid))
    assert [s.position for s in steps] == list(range(n)) and steps[-1].name == f"s{n - 1}"


def test_rest_and_cli_start_read_and_refuse_bad_input(platform, client, effects):
    base, headers = platform.endpoints["rest"], {"authorization": f"Bearer {platform.tenant['api_key']}"}
    user = uuid.uuid4().hex
    with httpx.Client(base_url=base, headers=headers, timeout=10) as http:
        res = http.post("/v1/workflows", json={"workflow_type": "onboard",
                                               "input": {"dir": str(effects), "user": user, "sleep_s": 0.1},
                                               "idempotency_key": user})
        assert res.status_code == 200, res.text
        wid = res.json()["workflow_id"]
        again = http.post("/v1/workflows", json={"workflow_type": "onboard",
                                                 "input": {"dir": str(effects), "user": user, "sleep_s": 0.1},
                                                 "idempotency_key": user})
        assert again.json() == {"workflow_id": wid, "deduplicated": True}
        assert http.post("/v1/workflows", json={"workflow_type": "echo"}).status_code == 400  # a task
        assert http.post("/v1/tasks", json={"task_type": "onboard"}).status_code == 400  # a workflow
        assert http.get(f"/v1/workflows/{uuid.uuid4()}").status_code == 404
        assert http.post("/v1/events", json={"name": "bad name!", "data": {}}).status_code == 400
        res = http.post(f"/v1/workflows/{wid}/events", json={"name": "approved", "data": {"user": user}})
        assert res.status_code == 200, res.text
    assert _finished(client, wid).state == "SUCCEEDED"
    env = {**os.environ, "RATCHET_ENDPOINT": platform.grpc_address("gateway"),
           "RATCHET_API_KEY": platform.tenant["api_key"]}
    out = subprocess.run([sys.executable, "-m", "ratchet.cli", "workflows", "get", wid], env=env,
                         capture_output=True, text=True, timeout=60)
    assert out.returncode == 0 and "SUCCEEDED" in out.stdout and "create_account" in out.stdout, out
    with pytest.raises(InvalidArgument):
        client.start_workflow("echo", {})
