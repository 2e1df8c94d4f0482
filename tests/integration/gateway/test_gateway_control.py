"""Deployments, tenants, the ControlService for host agents, health, and the
documents served over HTTP."""

from __future__ import annotations

import os
import pathlib

import grpc
import httpx
import pytest
from google.protobuf import timestamp_pb2
from grpc_health.v1 import health_pb2, health_pb2_grpc

from ratchet.api.apps.v1 import apps_pb2
from ratchet.api.tasks.v1 import tasks_pb2
from ratchet.api.tenants.v1 import tenants_pb2
from ratchet.internal.gateway.v1 import control_pb2, control_pb2_grpc
from ratchet.libs.shardmap import new_task_id
from ratchet.services.gateway.rest import openapi

from .conftest import ADMIN_KEY, HOST_TOKEN, b64, make_bundle, start_gateway

pytestmark = pytest.mark.timeout(60)


def control(env) -> control_pb2_grpc.ControlServiceStub:
    return control_pb2_grpc.ControlServiceStub(env.channel)


HOST_MD = (("authorization", f"Bearer {HOST_TOKEN}"),)


async def test_deploy_round_trip_over_rest_and_control_service(env):
    bundle, digest = make_bundle({"app.py": b"# v2\n", "lib/util.py": b"X = 1\n"})
    body = {"bundle": b64(bundle), "digest": digest, "module": "app",
            "handlers": [{"name": "send", "retry": {"max_attempts": 7}, "non_retryable": ["ValueError"]},
                         {"name": "resize"}, {"name": "report.weekly"}]}
    r = await env.http.post("/v1/apps/default/deployments", json=body, headers=env.auth())
    assert r.status_code == 200, r.text
    dep = r.json()["deployment"]
    assert dep["created"] is True and dep["digest"] == digest and dep["app"] == "default"
    again = (await env.http.post("/v1/apps/default/deployments", json=body, headers=env.auth())).json()
    assert again["deployment"]["created"] is False and again["deployment"]["created_at"] == dep["created_at"]

    active = await control(env).GetActiveDeployment(control_pb2.GetActiveDeploymentRequest(app_id=env.app_id),
                                                    metadata=HOST_MD, timeout=5)
    assert active.tenant_id == env.tenant_id and active.deployment.digest == digest
    assert [h.name for h in active.deployment.handlers] == ["send", "resize", "report.weekly"]
    got = await control(env).GetBundle(control_pb2.GetBundleRequest(digest=digest), metadata=HOST_MD, timeout=5)
    assert got.bundle == bundle

    # The new handler is usable at once, with its policy.
    e = await env.http.post("/v1/tasks", json={"task_type": "report.weekly"}, headers=env.auth())
    assert e.status_code == 200, e.text
    e = await env.http.post("/v1/tasks", json={"task_type": "send"}, headers=env.auth())
    sent = env.history.tasks[e.json()["task_id"]]
    assert sent.retry.max_attempts == 7 and list(sent.non_retryable) == ["ValueError"]


async def test_control_service_needs_a_host_token(env):
    for md in ((), env.md(), (("authorization", f"Bearer {ADMIN_KEY}"),)):
        with pytest.raises(grpc.aio.AioRpcError) as e:
            await control(env).GetActiveDeployment(control_pb2.GetActiveDeploymentRequest(app_id=env.app_id),
                                                   metadata=md, timeout=5)
        assert e.value.code() == grpc.StatusCode.UNAUTHENTICATED
    with pytest.raises(grpc.aio.AioRpcError) as e:
        await control(env).GetBundle(control_pb2.GetBundleRequest(digest="sha256:" + "0" * 64), metadata=HOST_MD,
                                     timeout=5)
    assert e.value.code() == grpc.StatusCode.NOT_FOUND


@pytest.mark.parametrize("change, status, needle", [
    ({"digest": "sha256:" + "0" * 64}, 400, "does not match"),
    ({"digest": "md5:x"}, 400, "sha256:"),
    ({"handlers": []}, 400, "at least one"),
    ({"handlers": [{"name": "bad name"}]}, 400, "handlers[0].name"),
    ({"handlers": [{"name": "a"}, {"name": "a"}]}, 400, "twice"),
    ({"handlers": [{"name": "a", "retry": {"max_attempts": 500}}]}, 400, "handlers[0].retry.max_attempts"),
    ({"module": "not a module"}, 400, "module"),
    ({"unknown_field": 1}, 400, "unknown_field"),
])
async def test_bad_deployments_are_refused(env, change, status, needle):
    bundle, digest = make_bundle({"app.py": b"# bad\n"})
    body = {"bundle": b64(bundle), "digest": digest, "handlers": [{"name": "send"}], **change}
    r = await env.http.post("/v1/apps/default/deployments", json=body, headers=env.auth())
    assert r.status_code == status, r.text
    assert needle in r.json()["error"]["message"]


async def test_bundle_with_escaping_path_is_refused_and_not_stored(env):
    bundle, digest = make_bundle({"../evil.py": b"x"})
    r = await env.http.post("/v1/apps/default/deployments",
                            json={"bundle": b64(bundle), "digest": digest, "handlers": [{"name": "send"}]},
                            headers=env.auth())
    assert r.status_code == 400 and "escapes" in r.json()["error"]["message"]
    assert not (pathlib.Path(env.blob_dir) / "sha256" / f"{digest[7:]}.tar.gz").exists()


async def test_oversize_bundle_is_413(env, tmp_path):
    gw = await start_gateway(env.gateway.config.control_dsn, 1, str(tmp_path), max_bundle_bytes=100)
    try:
        bundle, digest = make_bundle({"app.py": os.urandom(5000)})
        async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{gw.rest_port}") as http:
            r = await http.post("/v1/apps/default/deployments",
                                json={"bundle": b64(bundle), "digest": digest, "handlers": [{"name": "send"}]},
                                headers=env.auth())
        assert r.status_code == 413, r.text
    finally:
        await gw.stop(grace=0)


async def test_deploying_another_apps_name_is_403(env):
    with pytest.raises(grpc.aio.AioRpcError) as e:
        await env.deploy(env.api_key, app="billing")
    assert e.value.code() == grpc.StatusCode.PERMISSION_DENIED and "'default'" in e.value.details()


async def test_tenant_creation_rules(env):
    r = await env.http.post("/v1/tenants", json={"name": "rest-made"}, headers=env.auth(ADMIN_KEY))
    assert r.status_code == 200, r.text
    made = r.json()
    assert made["app"] == "default" and made["api_key"].startswith("rk_") and len(made["api_key"]) == 35
    dup = await env.http.post("/v1/tenants", json={"name": "rest-made"}, headers=env.auth(ADMIN_KEY))
    assert dup.status_code == 409
    for bad in ("", "Upper", "9lives", "x" * 65, "under_score"):
        r = await env.http.post("/v1/tenants", json={"name": bad}, headers=env.auth(ADMIN_KEY))
        assert r.status_code == 400, bad
    r = await env.http.post("/v1/tenants", json={"name": "sneaky"}, headers=env.auth())
    assert r.status_code == 401
    # The new key works at once, and only its hash is stored.
    e = await env.http.post("/v1/tasks", json={"task_type": "send"}, headers=env.auth(made["api_key"]))
    assert e.status_code == 400 and "deploy the app first" in e.text
    stored = env.cluster.psql("SELECT key_hash FROM api_keys", env.gateway.config.control_dsn.rsplit("/", 1)[1])
    assert made["api_key"] not in stored


async def test_grpc_health_and_reflection_names(env):
    stub = health_pb2_grpc.HealthStub(env.channel)
    for name in ("", "ratchet.api.tasks.v1.TaskService", "ratchet.internal.gateway.v1.ControlService"):
        resp = await stub.Check(health_pb2.HealthCheckRequest(service=name), timeout=5)
        assert resp.status == health_pb2.HealthCheckResponse.SERVING


async def test_openapi_and_healthz_are_served(env):
    r = await env.http.get("/openapi.json")
    assert r.status_code == 200
    doc = r.json()
    assert doc == openapi.generate(openapi.public_services())
    assert {"/v1/tasks", "/v1/tasks:batch", "/v1/tasks/{task_id}", "/v1/tasks/{task_id}/cancel",
            "/v1/apps/{app}/deployments", "/v1/tenants"} <= set(doc["paths"])
    h = await env.http.get("/healthz")
    assert h.status_code == 200 and h.json()["status"] == "ok"


async def test_unknown_route_and_wrong_method(env):
    r = await env.http.get("/v1/nothing", headers=env.auth())
    assert r.status_code == 404 and r.json()["error"]["code"] == "NOT_FOUND"
    r = await env.http.delete("/v1/tasks", headers=env.auth())
    assert r.status_code == 405 and r.headers["Allow"] == "GET, POST"
    r = await env.http.get("/v1/tasks/abc?extra=1", headers=env.auth())
    assert r.status_code == 400 and "extra" in r.json()["error"]["message"]


async def test_grpc_tenant_service_needs_admin(env):
    with pytest.raises(grpc.aio.AioRpcError) as e:
        await env.tenants.CreateTenant(tenants_pb2.CreateTenantRequest(name="nope"), metadata=env.md(), timeout=5)
    assert e.value.code() == grpc.StatusCode.UNAUTHENTICATED


async def test_redeploying_an_older_digest_makes_it_active_again(env):
    t = await env.new_tenant("rollback-co")
    first = (await env.deploy(t.api_key, files={"app.py": b"# one\n"})).deployment
    second = (await env.deploy(t.api_key, files={"app.py": b"# two\n"},
                               handlers=[apps_pb2.Handler(name="only_two")])).deployment
    assert first.created and second.created and first.digest != second.digest
    back = (await env.deploy(t.api_key, files={"app.py": b"# one\n"})).deployment
    assert not back.created and back.digest == first.digest
    active = await control(env).GetActiveDeployment(control_pb2.GetActiveDeploymentRequest(app_id=t.app_id),
                                                    metadata=HOST_MD, timeout=5)
    assert active.deployment.digest == first.digest
    r = await env.http.post("/v1/tasks", json={"task_type": "only_two"}, headers=env.auth(t.api_key))
    assert r.status_code == 400 and "registered types: resize, send" in r.json()["error"]["message"]


async def test_a_redeploy_that_changes_a_handlers_policy_is_what_the_next_enqueues_get(env):
    """The deployment cache resolves each handler's policy once per deployment: a redeploy of
    the same task type with another default policy (and a rollback to the first) reaches every
    enqueue form at once, never the policy cached for the deployment before."""
    t = await env.new_tenant("policy-co")
    md = env.md(t.api_key)

    async def policies() -> list[tuple[int, int, list[str]]]:
        """(max_attempts, start_to_close s, non_retryable) history got from each form of enqueue."""
        ids = [(await env.http.post("/v1/tasks", json={"task_type": "send"}, headers=env.auth(t.api_key))
                ).json()["task_id"]]
        ids.append((await env.tasks.EnqueueTask(tasks_pb2.EnqueueTaskRequest(task_type="send"), metadata=md,
                                                timeout=5)).task_id)
        items = [tasks_pb2.EnqueueTaskRequest(task_type="send", task_id=new_task_id(), payload_json="{}")
                 for _ in range(3)]
        ids += (await env.tasks.EnqueueTasks(tasks_pb2.EnqueueTasksRequest(tasks=items), metadata=md,
                                             timeout=5)).task_ids
        cols = tasks_pb2.TaskColumns(task_type="send", payloads_json=["{}", "{}"])
        ids += (await env.tasks.EnqueueTasks(tasks_pb2.EnqueueTasksRequest(columns=cols), metadata=md,
                                             timeout=5)).task_ids
        slot = timestamp_pb2.Timestamp(seconds=1_900_000_000 + len(env.history.tasks))
        ids.append((await control(env).EnqueueScheduled(control_pb2.EnqueueScheduledRequest(
            tenant_id=t.tenant_id, app_id=t.app_id, schedule_id="s1", scheduled_time=slot,
            task=tasks_pb2.EnqueueTaskRequest(task_type="send")), metadata=HOST_MD, timeout=5)).task_id)
        sent = [env.history.tasks[i] for i in ids]
        return [(s.retry.max_attempts, s.timeouts.start_to_close.seconds, list(s.non_retryable)) for s in sent]

    def send(max_attempts: int, start_to_close: int, non_retryable: list[str]) -> list[apps_pb2.Handler]:
        return [apps_pb2.Handler(name="send", retry=tasks_pb2.RetryPolicy(max_attempts=max_attempts),
                                 timeouts=tasks_pb2.Timeouts(start_to_close={"seconds": start_to_close}),
                                 non_retryable=non_retryable)]

    await env.deploy(t.api_key, files={"app.py": b"# one\n"}, handlers=send(4, 60, ["KeyError"]))
    assert await policies() == [(4, 60, ["KeyError"])] * 8
    await env.deploy(t.api_key, files={"app.py": b"# two\n"}, handlers=send(9, 30, []))
    assert await policies() == [(9, 30, [])] * 8
    await env.deploy(t.api_key, files={"app.py": b"# one\n"}, handlers=send(4, 60, ["KeyError"]))
    assert await policies() == [(4, 60, ["KeyError"])] * 8
