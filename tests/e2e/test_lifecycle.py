"""Task lifecycle end to end: SDK, REST and CLI against the real mesh."""

from __future__ import annotations

import concurrent.futures
import json
import os
import subprocess
import sys
import uuid

import httpx
import pytest

from ratchet.client import Client, Conflict, InvalidArgument, NotFound, PayloadTooLarge, Unauthenticated
from ratchet.libs.shardmap import new_task_id

pytestmark = pytest.mark.timeout(120)


def test_sdk_enqueue_runs_and_reports_result_and_timeline(client):
    tid = client.enqueue("echo", {"hello": "world"})
    info = client.wait(tid, timeout=30)
    assert info.state == "SUCCEEDED", info
    assert info.result["payload"] == {"hello": "world"}
    assert info.result["attempt"] == 1 and info.attempt == 1 and info.max_attempts >= 1
    assert info.result["lease_epoch"] >= 1
    [attempt] = info.attempts
    assert attempt.outcome == "SUCCEEDED" and attempt.worker_id
    assert attempt.started_at and attempt.finished_at and info.finished_at
    assert info.created_at <= attempt.started_at <= attempt.finished_at


def test_retryable_failures_retry_then_succeed(client):
    info = client.wait(client.enqueue("fail_until", {"succeed_on": 3}), timeout=30)
    assert info.state == "SUCCEEDED" and info.result == {"attempt": 3}
    assert [a.outcome for a in info.attempts] == ["FAILED", "FAILED", "SUCCEEDED"]
    assert info.attempts[0].error.error_class == "RetryableError"
    assert "fails on purpose" in info.attempts[0].error.message


def test_exhausted_task_is_failed_with_payload_error_and_stack(client):
    info = client.wait(client.enqueue("always_fail", {"keep": "me"}), timeout=30)
    assert info.state == "FAILED"
    assert info.attempt == 3 == info.max_attempts
    assert info.payload == {"keep": "me"}
    assert info.error.error_class == "ValueError"
    assert "always fails" in info.error.message
    assert "always_fail" in info.error.stack  # the handler's frame is in the stack


def test_fatal_error_is_not_retried(client):
    info = client.wait(client.enqueue("fatal", {}), timeout=30)
    assert info.state == "FAILED" and info.attempt == 1
    assert info.error.error_class == "FatalError"


def test_enqueue_retry_override_beats_task_type_policy(client):
    info = client.wait(client.enqueue("always_fail", {}, retry={"max_attempts": 1}), timeout=30)
    assert info.state == "FAILED" and info.attempt == 1 and info.max_attempts == 1


def test_delayed_task_waits_on_the_shard_clock(client):
    tid = client.enqueue("echo", {"delayed": True}, delay="1500ms")
    assert client.get(tid).state == "ENQUEUED"
    info = client.wait(tid, timeout=30)
    assert info.state == "SUCCEEDED"
    waited = (info.attempts[0].started_at - info.created_at).total_seconds()
    assert waited >= 1.45, waited


def test_batch_of_1000_in_request_order(client):
    marker = uuid.uuid4().hex
    tasks = [{"task_type": "echo", "payload": {"i": i, "m": marker}} for i in range(1000)]
    ids = client.enqueue_batch(tasks)
    assert len(ids) == 1000 and len(set(ids)) == 1000
    for i in (0, 1, 499, 998, 999):
        info = client.wait(ids[i], timeout=60)
        assert info.state == "SUCCEEDED" and info.payload == {"i": i, "m": marker}


def test_batch_over_1000_is_refused_whole(client):
    keys = [f"over-{uuid.uuid4().hex}" for _ in range(1001)]
    tasks = [{"task_type": "echo", "payload": {"i": i}, "idempotency_key": k} for i, k in enumerate(keys)]
    with pytest.raises(InvalidArgument, match=r"1,?000"):
        client.enqueue_batch(tasks)
    # Nothing was written: the first key is still free for a different request.
    tid = client.enqueue("echo", {"different": True}, idempotency_key=keys[0])
    assert client.wait(tid, timeout=30).payload == {"different": True}


def test_50_concurrent_enqueues_with_one_key_make_one_task(platform):
    key = f"same-{uuid.uuid4().hex}"

    def one(_):
        with platform.client() as c:
            return c.enqueue("echo", {"k": key}, idempotency_key=key)

    with concurrent.futures.ThreadPoolExecutor(max_workers=50) as pool:
        ids = list(pool.map(one, range(50)))
    assert len(set(ids)) == 1
    with platform.client() as c:
        assert c.wait(ids[0], timeout=30).state == "SUCCEEDED"


def test_same_key_different_request_conflicts_with_original_id(client):
    key = f"conflict-{uuid.uuid4().hex}"
    tid = client.enqueue("echo", {"v": 1}, idempotency_key=key)
    with pytest.raises(Conflict) as err:
        client.enqueue("echo", {"v": 2}, idempotency_key=key)
    assert err.value.task_id == tid


def test_other_tenants_task_is_not_found(platform, client):
    tid = client.enqueue("echo", {"private": True})
    with platform.admin_client() as admin:
        other = admin.create_tenant(f"other-{uuid.uuid4().hex[:8]}")
    with Client(platform.grpc_address("gateway"), other["api_key"]) as intruder:
        with pytest.raises(NotFound) as foreign:
            intruder.get(tid)
        missing = new_task_id()
        with pytest.raises(NotFound) as unknown:
            intruder.get(missing)
        # Same answer for a foreign id and an unknown one: nothing leaks.
        assert str(foreign.value).replace(tid, "ID") == str(unknown.value).replace(missing, "ID")
        with pytest.raises(NotFound):
            intruder.cancel(tid)
    assert client.get(tid).state in ("ENQUEUED", "LEASED", "SUCCEEDED")


def test_oversize_payload_is_refused_and_nothing_written(client):
    key = f"big-{uuid.uuid4().hex}"
    with pytest.raises(PayloadTooLarge):
        client.enqueue("echo", "x" * (256 * 1024), idempotency_key=key)
    tid = client.enqueue("echo", "small", idempotency_key=key)
    assert client.wait(tid, timeout=30).payload == "small"


def test_unknown_task_type_is_invalid(client):
    with pytest.raises(InvalidArgument, match="echo"):
        client.enqueue("no_such_handler", {})


def test_bad_api_key_is_unauthenticated(platform):
    with Client(platform.grpc_address("gateway"), "rk_wrong") as c, pytest.raises(Unauthenticated):
        c.enqueue("echo", {})


def _rest(platform) -> httpx.Client:
    return httpx.Client(base_url=platform.endpoints["rest"], timeout=10,
                        headers={"Authorization": f"Bearer {platform.tenant['api_key']}"})


def test_rest_translation_status_codes_and_openapi(platform):
    with _rest(platform) as http:
        r = http.post("/v1/tasks", json={"task_type": "echo", "payload": {"via": "rest"},
                                         "idempotency_key": f"rest-{uuid.uuid4().hex}"})
        assert r.status_code == 200, r.text
        tid = r.json()["task_id"]
        r = http.post("/v1/tasks:batch", json={"tasks": [{"task_type": "echo", "payload": i} for i in range(3)]})
        assert r.status_code == 200 and len(r.json()["task_ids"]) == 3
        r = http.get(f"/v1/tasks/{tid}")
        assert r.status_code == 200 and r.json()["task"]["task_type"] == "echo"
        assert http.post("/v1/tasks", json={"task_type": "echo", "bogus": 1}).status_code == 400
        assert http.post("/v1/tasks", content=b"{not json").status_code == 400
        assert http.get("/v1/tasks/not-a-task-id").status_code == 400
        assert http.get(f"/v1/tasks/{new_task_id()}").status_code == 404
        assert http.post("/v1/tasks", json={"task_type": "echo", "payload": "x" * 262145}).status_code == 413
        r = http.post(f"/v1/tasks/{tid}/cancel", json={})
        assert r.status_code == 200 and r.json()["state"] in ("TASK_STATE_CANCELED", "TASK_STATE_SUCCEEDED",
                                                               "TASK_STATE_LEASED")
        spec = http.get("/openapi.json").json()
        paths = {"/v1/tasks", "/v1/tasks:batch", "/v1/tasks/{task_id}", "/v1/tasks/{task_id}/cancel"}
        assert paths <= set(spec["paths"])
    with httpx.Client(base_url=platform.endpoints["rest"], timeout=10) as anon:
        assert anon.post("/v1/tasks", json={"task_type": "echo"}).status_code == 401


def test_cli_tasks_enqueue_get_cancel(platform):
    env = {**os.environ, "RATCHET_ENDPOINT": platform.grpc_address("gateway"),
           "RATCHET_API_KEY": platform.tenant["api_key"]}

    def cli(*args):
        res = subprocess.run([sys.executable, "-m", "ratchet.cli", *args], env=env,
                             capture_output=True, text=True, timeout=60)
        assert res.returncode == 0, res.stdout + res.stderr
        return json.loads(res.stdout)

    tid = cli("tasks", "enqueue", "echo", "--payload", '{"cli": true}', "--delay", "60s")["task_id"]
    assert cli("tasks", "get", tid)["state"] == "ENQUEUED"
    cli("tasks", "cancel", tid)
    assert cli("tasks", "get", tid)["state"] == "CANCELED"
