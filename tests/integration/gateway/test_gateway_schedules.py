"""Schedules (forwarded to a fake cron service), ControlService.EnqueueScheduled
(one task per slot), circuit breakers (forwarded to a fake dispatcher) and
retry rules on enqueue, through the gateway over REST and gRPC."""

from __future__ import annotations

import grpc
import httpx
import pytest
from google.protobuf import json_format, timestamp_pb2

from ratchet.api.apps.v1 import apps_pb2
from ratchet.api.schedules.v1 import schedules_pb2 as spb
from ratchet.api.schedules.v1 import schedules_pb2_grpc
from ratchet.api.tasks.v1 import breakers_pb2, breakers_pb2_grpc, tasks_pb2
from ratchet.internal.gateway.v1 import control_pb2, control_pb2_grpc
from ratchet.libs.pg.cluster import free_port
from ratchet.libs.shardmap import ShardMap, slot_for_key

from .conftest import ADMIN_KEY, HOST_TOKEN, SHARDS, start_gateway

pytestmark = pytest.mark.timeout(60)
MESH_MD = (("authorization", f"Bearer {HOST_TOKEN}"),)
TEMPLATE = {"task_type": "send", "payload": {"to": "ops"}}


def ts(text: str) -> timestamp_pb2.Timestamp:
    t = timestamp_pb2.Timestamp()
    t.FromJsonString(text)
    return t


# -- schedules ---------------------------------------------------------------

async def test_schedule_lifecycle_over_rest_is_forwarded_with_the_caller(env):
    r = await env.http.post("/v1/schedules", json={"cron": "*/5 * * * *", "task_template": TEMPLATE,
                                                   "overlap_policy": "OVERLAP_POLICY_SKIP"}, headers=env.auth())
    assert r.status_code == 200, r.text
    s = r.json()["schedule"]
    sid = s["schedule_id"]
    assert s["task_template"]["payload"] == {"to": "ops"} and s["overlap_policy"] == "OVERLAP_POLICY_SKIP"
    name, sent = env.cron.calls[-1]
    assert name == "CreateSchedule" and (sent.caller.tenant_id, sent.caller.app_id) == (env.tenant_id, env.app_id)
    got = await env.http.get(f"/v1/schedules/{sid}", headers=env.auth())
    assert got.status_code == 200 and got.json()["schedule"]["schedule_id"] == sid
    listed = await env.http.get("/v1/schedules", params={"page_size": 10}, headers=env.auth())
    assert [x["schedule_id"] for x in listed.json()["schedules"]] == [sid]
    assert env.cron.calls[-1][1].request.page_size == 10
    paused = await env.http.post(f"/v1/schedules/{sid}/pause", headers=env.auth())
    assert paused.json()["schedule"]["state"] == "SCHEDULE_STATE_PAUSED"
    resumed = await env.http.post(f"/v1/schedules/{sid}/resume", headers=env.auth())
    assert resumed.json()["schedule"]["state"] == "SCHEDULE_STATE_ACTIVE"
    fired = await env.http.post(f"/v1/schedules/{sid}/trigger", headers=env.auth())
    assert fired.status_code == 200 and fired.json()["task_id"]
    gone = await env.http.delete(f"/v1/schedules/{sid}", headers=env.auth())
    assert gone.status_code == 200 and gone.json() == {}
    again = await env.http.get(f"/v1/schedules/{sid}", headers=env.auth())
    assert again.status_code == 404 and sid in again.json()["error"]["message"]


async def test_schedules_over_grpc_and_other_tenants_get_404(env):
    stub = schedules_pb2_grpc.ScheduleServiceStub(env.channel)
    req = spb.CreateScheduleRequest(cron="0 * * * *", task_template=json_format.ParseDict(TEMPLATE, spb.TaskTemplate()))
    s = (await stub.CreateSchedule(req, metadata=env.md(), timeout=5)).schedule
    other = await env.new_tenant("sched-other")
    with pytest.raises(grpc.aio.AioRpcError) as e:
        await stub.GetSchedule(spb.GetScheduleRequest(schedule_id=s.schedule_id), metadata=env.md(other.api_key),
                               timeout=5)
    assert e.value.code() == grpc.StatusCode.NOT_FOUND
    with pytest.raises(grpc.aio.AioRpcError) as e:
        await stub.ListSchedules(spb.ListSchedulesRequest(), timeout=5)
    assert e.value.code() == grpc.StatusCode.UNAUTHENTICATED
    assert (await env.http.post(f"/v1/schedules/{s.schedule_id}/pause")).status_code == 401


@pytest.mark.parametrize("template, status, needle", [
    ({"task_type": "nope"}, 400, "task_template.task_type 'nope' is not registered"),
    ({}, 400, "task_template.task_type is required"),
    ({"task_type": "send", "queue": "a b"}, 400, "task_template.queue"),
    ({"task_type": "send", "retry": {"max_attempts": 0}}, 400, "task_template.retry.max_attempts"),
    ({"task_type": "send", "retry": {"rules": {"E": {"factor": 50}}}}, 400, "task_template.retry.rules['E'].factor"),
    ({"task_type": "send", "timeouts": {"start_to_close": "0s"}}, 400, "task_template.timeouts.start_to_close"),
    ({"task_type": "send", "payload": "x" * 262144}, 413, "task_template.payload is 262146 bytes"),
])
async def test_bad_templates_are_refused_before_the_cron_service(env, template, status, needle):
    before = len(env.cron.calls)
    r = await env.http.post("/v1/schedules", json={"cron": "* * * * *", "task_template": template},
                            headers=env.auth())
    assert r.status_code == status, r.text
    assert needle in r.json()["error"]["message"]
    assert len(env.cron.calls) == before


async def test_missing_template_and_cron_refusals(env):
    r = await env.http.post("/v1/schedules", json={"cron": "* * * * *"}, headers=env.auth())
    assert r.status_code == 400 and "task_template is required" in r.json()["error"]["message"]
    r = await env.http.post("/v1/schedules", json={"cron": "bad", "task_template": TEMPLATE}, headers=env.auth())
    assert r.status_code == 400 and r.json()["error"]["message"] == "cron 'bad' is malformed: expected 5 or 6 fields"


async def test_without_cron_or_dispatcher_the_apis_are_503(env, tmp_path):
    port = int(env.gateway.config.history_target.split(":")[1])
    dead = f"127.0.0.1:{free_port()}"
    plain = await start_gateway(env.gateway.config.control_dsn, port, str(tmp_path / "a"))
    down = await start_gateway(env.gateway.config.control_dsn, port, str(tmp_path / "b"),
                               cron_target=dead, dispatcher_target=dead)
    try:
        for gw, needle in ((plain, "not configured"), (down, "is unavailable")):
            async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{gw.rest_port}") as http:
                s = await http.get("/v1/schedules", headers=env.auth())
                b = await http.get("/v1/breakers", headers=env.auth())
            assert s.status_code == 503 and needle in s.json()["error"]["message"], s.text
            assert b.status_code == 503 and needle in b.json()["error"]["message"], b.text
        assert "the cron service is not configured" in (await _get(plain, "/v1/schedules", env))["message"]
        assert "the dispatcher is not configured" in (await _get(plain, "/v1/breakers", env))["message"]
    finally:
        await plain.stop(grace=0)
        await down.stop(grace=0)


async def _get(gw, path: str, env) -> dict:
    async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{gw.rest_port}") as http:
        return (await http.get(path, headers=env.auth())).json()["error"]


# -- EnqueueScheduled ----------------------------------------------------------

def control(env) -> control_pb2_grpc.ControlServiceStub:
    return control_pb2_grpc.ControlServiceStub(env.channel)


def slot_request(env, slot: str, schedule_id: str = "3f1c2a8e-0d4b-4c1e-9a77-5b2f0e6d9c10", **task):
    return control_pb2.EnqueueScheduledRequest(
        tenant_id=env.tenant_id, app_id=env.app_id, schedule_id=schedule_id, scheduled_time=ts(slot),
        task=json_format.ParseDict({**TEMPLATE, **task}, tasks_pb2.EnqueueTaskRequest()))


async def test_one_task_per_slot_and_a_repeated_slot_is_deduplicated(env):
    first = await control(env).EnqueueScheduled(slot_request(env, "2026-11-30T02:00:00Z"), metadata=MESH_MD,
                                                timeout=5)
    again = await control(env).EnqueueScheduled(slot_request(env, "2026-11-30T02:00:00Z"), metadata=MESH_MD,
                                                timeout=5)
    later = await control(env).EnqueueScheduled(slot_request(env, "2026-11-30T02:05:00Z"), metadata=MESH_MD,
                                                timeout=5)
    assert not first.deduplicated and again.deduplicated and again.task_id == first.task_id
    assert later.task_id != first.task_id and not later.deduplicated
    sent = env.history.tasks[first.task_id]
    key = "sched:3f1c2a8e-0d4b-4c1e-9a77-5b2f0e6d9c10@2026-11-30T02:00:00Z"
    assert sent.idempotency_key == key and sent.schedule_id == "3f1c2a8e-0d4b-4c1e-9a77-5b2f0e6d9c10"
    assert sent.scheduled_time.ToJsonString() == "2026-11-30T02:00:00Z" and sent.tenant_id == env.tenant_id
    assert ShardMap.even(SHARDS).shard_for_task(first.task_id) == \
        ShardMap.even(SHARDS).shard_for_slot(slot_for_key(env.tenant_id, key))
    assert sent.retry.max_attempts == 5 and sent.payload_json == b'{"to":"ops"}' and not sent.HasField("run_at")
    # The task is the customer's like any other: readable with the app's key, with its slot.
    got = (await env.http.get(f"/v1/tasks/{first.task_id}", headers=env.auth())).json()["task"]
    assert got["schedule_id"] == sent.schedule_id and got["scheduled_time"] == "2026-11-30T02:00:00Z"


@pytest.mark.parametrize("md", [(), (("authorization", "Bearer rk_not_a_mesh_token"),),
                                (("authorization", f"Bearer {ADMIN_KEY}"),), "api_key"])
async def test_enqueue_scheduled_needs_a_mesh_token(env, md):
    md = env.md() if md == "api_key" else md
    before = len(env.history.calls)
    with pytest.raises(grpc.aio.AioRpcError) as e:
        await control(env).EnqueueScheduled(slot_request(env, "2026-11-30T03:00:00Z"), metadata=md, timeout=5)
    assert e.value.code() == grpc.StatusCode.UNAUTHENTICATED
    assert len(env.history.calls) == before


@pytest.mark.parametrize("change, needle", [
    ({"task": {"idempotency_key": "mine"}}, "task.idempotency_key must be empty"),
    ({"task": {"task_id": "0192f3a4-5b6c-8d7e-8f90-a1b2c3d4e5f6"}}, "task.task_id must be empty"),
    ({"task": {"delay": "5s"}}, "task.delay must be empty"),
    ({"task": {"run_at": "2030-01-01T00:00:00Z"}}, "task.run_at must be empty"),
    ({"task": {"task_type": "nope"}}, "task.task_type 'nope' is not registered"),
    ({"schedule_id": "has space"}, "schedule_id must be"),
    ({"scheduled_time": None}, "scheduled_time is required"),
    ({"tenant_id": "someone-else"}, "does not belong to tenant someone-else"),
])
async def test_bad_slots_are_refused_and_write_nothing(env, change, needle):
    req = slot_request(env, "2026-11-30T04:00:00Z", **change.get("task", {}))
    if "schedule_id" in change:
        req.schedule_id = change["schedule_id"]
    if "scheduled_time" in change:
        req.ClearField("scheduled_time")
    if "tenant_id" in change:
        req.tenant_id = change["tenant_id"]
    before = len(env.history.calls)
    with pytest.raises(grpc.aio.AioRpcError) as e:
        await control(env).EnqueueScheduled(req, metadata=MESH_MD, timeout=5)
    assert e.value.code() == grpc.StatusCode.INVALID_ARGUMENT and needle in e.value.details()
    assert len(env.history.calls) == before


# -- breakers ------------------------------------------------------------------

async def test_breakers_are_listed_and_reset_for_the_callers_app(env):
    opened = breakers_pb2.Breaker(task_type="send", state=breakers_pb2.BREAKER_STATE_OPEN, crashes=5,
                                  reason="5 sandbox crashes in 60s",
                                  last_crashes=[breakers_pb2.BreakerCrash(task_id="t1", error_class="SandboxCrashed")])
    env.dispatcher.breakers[(env.tenant_id, env.app_id, "send")] = opened
    env.dispatcher.breakers[("someone-else", "app", "send")] = breakers_pb2.Breaker(task_type="send")
    r = await env.http.get("/v1/breakers", headers=env.auth())
    assert r.status_code == 200, r.text
    (b,) = r.json()["breakers"]
    assert b["state"] == "BREAKER_STATE_OPEN" and b["last_crashes"][0]["error_class"] == "SandboxCrashed"
    reset = await env.http.post("/v1/breakers/send:reset", headers=env.auth())
    assert reset.status_code == 200 and reset.json()["breaker"]["state"] == "BREAKER_STATE_CLOSED"
    assert env.dispatcher.calls[-1][1].tenant_id == env.tenant_id
    stub = breakers_pb2_grpc.BreakerServiceStub(env.channel)
    listed = await stub.ListBreakers(breakers_pb2.ListBreakersRequest(), metadata=env.md(), timeout=5)
    assert [x.state for x in listed.breakers] == [breakers_pb2.BREAKER_STATE_CLOSED]
    with pytest.raises(grpc.aio.AioRpcError) as e:
        await stub.ResetBreaker(breakers_pb2.ResetBreakerRequest(task_type=""), metadata=env.md(), timeout=5)
    assert e.value.code() == grpc.StatusCode.INVALID_ARGUMENT and "task_type is required" in e.value.details()
    bad = await env.http.post("/v1/breakers/a%20b:reset", headers=env.auth())
    assert bad.status_code == 400 and "task_type must be" in bad.json()["error"]["message"]
    assert (await env.http.get("/v1/breakers")).status_code == 401


# -- retry rules on enqueue ------------------------------------------------------

async def test_retry_rules_resolve_against_the_handlers_and_reach_history(env):
    t = await env.new_tenant("rules-co")
    handler = json_format.ParseDict({"name": "sync", "non_retryable": ["KeyError"], "retry": {
        "max_attempts": 4, "non_retryable": ["KeyError"],
        "rules": {"TimeoutError": {"max_attempts": 10, "base": "5s"}, "ValueError": {"non_retryable": True}}}},
        apps_pb2.Handler())
    await env.deploy(t.api_key, handlers=[handler])
    r = await env.http.post("/v1/tasks", json={"task_type": "sync"}, headers=env.auth(t.api_key))
    sent = env.history.tasks[r.json()["task_id"]]
    assert sent.retry.max_attempts == 4 and list(sent.retry.non_retryable) == ["KeyError"]
    assert set(sent.retry.rules) == {"TimeoutError", "ValueError"}
    assert sent.retry.rules["TimeoutError"].base.seconds == 5
    over = await env.http.post("/v1/tasks", json={"task_type": "sync", "retry": {
        "rules": {"IOError": {"max_attempts": 2}}}}, headers=env.auth(t.api_key))
    sent = env.history.tasks[over.json()["task_id"]]
    assert set(sent.retry.rules) == {"IOError"} and list(sent.retry.non_retryable) == ["KeyError"]
    bad = await env.http.post("/v1/tasks", json={"task_type": "sync", "retry": {
        "rules": {"E": {"non_retryable": True, "base": "1s"}}}}, headers=env.auth(t.api_key))
    assert bad.status_code == 400 and "would never apply" in bad.json()["error"]["message"]
    dep = await env.http.post("/v1/apps/default/deployments", json={
        "bundle": "", "digest": "sha256:" + "0" * 64,
        "handlers": [{"name": "x", "retry": {"rules": {"E": {"max_attempts": 500}}}}]}, headers=env.auth(t.api_key))
    assert dep.status_code == 400 and "handlers[0].retry.rules['E'].max_attempts" in dep.json()["error"]["message"]
