"""The workflow API through the gateway against the real history service (a separate process)
and real shard databases. No worker runs here: the test leases the run and speaks the worker
plane's step protocol to history itself (as the dispatcher forwards it), then reads and wakes
the run through the public API, as a customer would."""

from __future__ import annotations

import asyncio
import json
import pathlib
import subprocess
import sys

import grpc
import httpx
import pytest
import pytest_asyncio
from google.protobuf import duration_pb2

from ratchet.api.apps.v1 import apps_pb2
from ratchet.api.tenants.v1 import tenants_pb2, tenants_pb2_grpc
from ratchet.internal.history.v1 import history_pb2 as h
from ratchet.internal.history.v1 import history_pb2_grpc
from ratchet.internal.worker.v1 import worker_pb2 as wk
from ratchet.libs.pg.cluster import free_port
from ratchet.libs.shardmap import ShardMap, new_task_id

from .conftest import ADMIN_KEY, Env, make_bundle, start_gateway
from .test_gateway_with_history import HISTORY_MAIN, _wait_serving

pytestmark = pytest.mark.timeout(120)
SHARDS = [0, 1]
HANDLERS = [apps_pb2.Handler(name="send"),
            apps_pb2.Handler(name="onboard", kind=apps_pb2.HANDLER_KIND_WORKFLOW,
                             resume=apps_pb2.WORKFLOW_RESUME_LATEST)]


@pytest_asyncio.fixture(scope="module")
async def real(pg_cluster, tmp_path_factory):
    """History (2 shards) in its own process, the gateway in this one, a tenant deploying a
    workflow; yields (env, a history stub for the worker plane's side)."""
    if not HISTORY_MAIN.exists():
        pytest.skip("services/history has no __main__.py yet")
    tag = free_port()
    shards = {}
    for s in SHARDS:
        pg_cluster.create_database(f"gwwf_shard{s}_{tag}")
        shards[str(s)] = pg_cluster.dsn(f"gwwf_shard{s}_{tag}")
    pg_cluster.create_database(f"gwwf_control_{tag}")
    tmp = tmp_path_factory.mktemp("gw-wf-history")
    hport = free_port()
    cfg = tmp / "history.json"
    cfg.write_text(json.dumps({"shards": shards, "grpc_port": hport}))
    with open(tmp / "history.log", "w") as log:
        proc = subprocess.Popen([sys.executable, "-m", "ratchet.services.history", "--config", str(cfg)],
                                stdout=log, stderr=subprocess.STDOUT, text=True)
    gw = None
    try:
        await asyncio.to_thread(_wait_serving, hport, proc, pathlib.Path(tmp / "history.log"))
        gw = await start_gateway(pg_cluster.dsn(f"gwwf_control_{tag}"), hport, str(tmp / "blobs"), shard_ids=SHARDS)
        channel = grpc.aio.insecure_channel(f"127.0.0.1:{gw.grpc_port}")
        hchannel = grpc.aio.insecure_channel(f"127.0.0.1:{hport}")
        http = httpx.AsyncClient(base_url=f"http://127.0.0.1:{gw.rest_port}", timeout=30)
        e = Env(gw, None, channel, http, "", "", "", pg_cluster, str(tmp / "blobs"))
        t = await tenants_pb2_grpc.TenantServiceStub(channel).CreateTenant(
            tenants_pb2.CreateTenantRequest(name="wf-real"), metadata=e.md(ADMIN_KEY), timeout=10)
        e.api_key, e.tenant_id, e.app_id = t.api_key, t.tenant_id, t.app_id
        await e.deploy(t.api_key, handlers=HANDLERS)
        yield e, history_pb2_grpc.HistoryServiceStub(hchannel)
        await http.aclose()
        await channel.close()
        await hchannel.close()
    finally:
        if gw is not None:
            await gw.stop(grace=1)
        proc.terminate()
        try:
            proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=10)


async def _lease(hist, e: Env, wid: str) -> wk.LeasedTask:
    """Lease the run as a host agent would (it is the only task of its app on its shard)."""
    shard = ShardMap.even(SHARDS).shard_for_task(wid)
    req = h.LeaseTasksRequest(shard_id=shard, worker_id="test-worker", max_tasks=1, app_ids=[e.app_id],
                              lease_duration=duration_pb2.Duration(seconds=30))
    for _ in range(50):
        got = await hist.LeaseTasks(req, timeout=5)
        if got.tasks:
            assert got.tasks[0].task_id == wid, got
            return got.tasks[0]
        await asyncio.sleep(0.1)
    raise AssertionError(f"run {wid} was never leased")


async def _step(hist, leased: wk.LeasedTask, op: str, position: int, name: str, kind: str = "STEP",
                **kw) -> wk.StepResponse:
    lease = wk.LeaseRef(shard_id=leased.shard_id, task_id=leased.task_id, lease_epoch=leased.lease_epoch)
    req = wk.StepRequest(lease=lease, op=wk.StepOp.Value(f"STEP_OP_{op}"), position=position, name=name,
                         kind=wk.StepKind.Value(f"STEP_KIND_{kind}"), **kw)
    return (await hist.WorkflowStep(h.WorkflowStepRequest(step=req), timeout=5)).step


async def _suspend(hist, leased: wk.LeasedTask, position: int) -> None:
    c = wk.Completion(shard_id=leased.shard_id, task_id=leased.task_id, lease_epoch=leased.lease_epoch,
                      outcome=wk.COMPLETION_OUTCOME_SUSPENDED, suspend_position=position)
    await hist.CompleteTasks(h.CompleteTasksRequest(shard_id=leased.shard_id, completions=[c]), timeout=5)


async def _get(e: Env, wid: str, **params) -> dict:
    r = await e.http.get(f"/v1/workflows/{wid}", params=params, headers=e.auth())
    assert r.status_code == 200, r.text
    return r.json()


async def test_a_run_started_suspended_at_a_wait_and_woken_by_an_event_through_the_real_history(real):
    e, hist = real
    body = {"workflow_type": "onboard", "input": {"user": "ada"}, "idempotency_key": "onboard-ada"}
    r = await e.http.post("/v1/workflows", json=body, headers=e.auth())
    assert r.status_code == 200, r.text
    wid = r.json()["workflow_id"]
    again = await e.http.post("/v1/workflows", json=body, headers=e.auth())
    assert again.json() == {"workflow_id": wid, "deduplicated": True}  # the real key index
    conflict = await e.http.post("/v1/workflows", json={**body, "input": {"user": "bob"}}, headers=e.auth())
    assert conflict.status_code == 409 and conflict.json()["error"]["original_task_id"] == wid
    fresh = await _get(e, wid)
    assert fresh["workflow"]["state"] == "TASK_STATE_ENQUEUED" and fresh["workflow"]["step_count"] == 0
    assert fresh["steps"] == [] and "pending" not in fresh["workflow"] and fresh["workflow"]["input"] == {"user": "ada"}

    # One activation: a step, then a wait for "approved" {"user": "ada"}, then it suspends.
    leased = await _lease(hist, e, wid)
    assert (await _step(hist, leased, "BEGIN", 0, "create_account")).status == wk.STEP_STATUS_RUN
    await _step(hist, leased, "COMMIT", 0, "create_account", result_json=b'{"id": 7}')
    wait = await _step(hist, leased, "BEGIN", 1, "approved", "WAIT", match_json=b'{"user": "ada"}')
    assert wait.status == wk.STEP_STATUS_SUSPEND
    await _suspend(hist, leased, 1)

    got = await _get(e, wid, step_page_size=1)
    w = got["workflow"]
    assert (w["state"], w["step_count"], w["activations"]) == ("TASK_STATE_WAITING", 2, 1)
    assert w["pending"]["kind"] == "STEP_KIND_WAIT" and w["pending"]["name"] == "approved"
    assert w["pending"]["match"] == {"user": "ada"} and w["pending"]["position"] == 1
    assert [(s["name"], s["state"], s.get("result")) for s in got["steps"]] == \
        [("create_account", "STEP_STATE_COMPLETED", {"id": 7})]
    rest = await _get(e, wid, step_page_size=1, step_page_token=got["next_step_page_token"])
    assert [(s["name"], s["kind"], s["state"]) for s in rest["steps"]] == \
        [("approved", "STEP_KIND_WAIT", "STEP_STATE_RUNNING")] and not rest["next_step_page_token"]

    # Another run's event, or one that does not match, leaves it waiting; the matching broadcast wakes it.
    r = await e.http.post(f"/v1/workflows/{wid}/events", json={"name": "approved", "data": {"user": "bob"}},
                          headers=e.auth())
    assert r.status_code == 200 and r.json() == {"delivered": False}, r.text  # kept in its inbox
    r = await e.http.post("/v1/events", json={"name": "approved", "data": {"user": "ada", "by": "ops"}},
                          headers=e.auth())
    assert r.status_code == 200 and r.json() == {"delivered": 1}, r.text
    woke = await _get(e, wid)
    assert woke["workflow"]["state"] == "TASK_STATE_ENQUEUED" and "pending" not in woke["workflow"]
    assert woke["steps"][1]["state"] == "STEP_STATE_COMPLETED" and woke["steps"][1]["result"] == \
        {"user": "ada", "by": "ops"}
    r = await e.http.post("/v1/events", json={"name": "approved", "data": {"user": "ada"}}, headers=e.auth())
    assert r.json() == {"delivered": 0}  # the wait took one event

    listed = await e.http.get("/v1/workflows", headers=e.auth())
    assert wid in [x["workflow_id"] for x in listed.json()["workflows"]]


async def test_cancel_lists_and_refusals_on_the_real_shards(real):
    e, _ = real
    runs = []
    for i in range(6):
        r = await e.http.post("/v1/workflows", json={"workflow_type": "onboard", "input": i}, headers=e.auth())
        runs.append(r.json()["workflow_id"])
    task = (await e.http.post("/v1/tasks", json={"task_type": "send"}, headers=e.auth())).json()["task_id"]
    assert (await e.http.post("/v1/tasks", json={"task_type": "onboard"}, headers=e.auth())).status_code == 400
    assert (await e.http.get(f"/v1/workflows/{task}", headers=e.auth())).status_code == 404
    assert (await e.http.get(f"/v1/workflows/{new_task_id()}", headers=e.auth())).status_code == 404
    c = await e.http.post(f"/v1/workflows/{runs[0]}/cancel", json={}, headers=e.auth())
    assert c.status_code == 200 and c.json()["state"] == "TASK_STATE_CANCELED", c.text
    r = await e.http.post(f"/v1/workflows/{runs[0]}/events", json={"name": "approved"}, headers=e.auth())
    assert r.status_code == 400 and "ended" in r.json()["error"]["message"], r.text
    canceled = await e.http.get("/v1/workflows", params={"state": "CANCELED"}, headers=e.auth())
    assert [x["workflow_id"] for x in canceled.json()["workflows"]] == [runs[0]]
    got, token = [], ""
    while True:
        r = await e.http.get("/v1/workflows", params={"page_size": 2, **({"page_token": token} if token else {})},
                             headers=e.auth())
        assert r.status_code == 200, r.text
        got += [x["workflow_id"] for x in r.json()["workflows"]]
        token = r.json()["next_page_token"]
        if not token:
            break
    assert set(runs) <= set(got) and task not in got and len(got) == len(set(got))
    assert {x["workflow_type"] for x in canceled.json()["workflows"]} == {"onboard"}


async def test_a_deploy_dropping_a_workflow_with_a_waiting_run_is_refused_by_the_preflight(real):
    """A run suspended at a wait (WAITING on the real shard) is live: a deploy without its
    workflow is refused naming it with 1, nothing activated; the flag deploys it."""
    import dataclasses
    base, hist = real
    t = await base.new_tenant("wf-preflight")
    e = dataclasses.replace(base, api_key=t.api_key, tenant_id=t.tenant_id, app_id=t.app_id)
    await e.deploy(t.api_key, handlers=HANDLERS, files={"app.py": b"# wf v1\n"})
    r = await e.http.post("/v1/workflows", json={"workflow_type": "onboard"}, headers=e.auth())
    assert r.status_code == 200, r.text
    wid = r.json()["workflow_id"]
    leased = await _lease(hist, e, wid)
    assert (await _step(hist, leased, "BEGIN", 0, "approved", "WAIT")).status == wk.STEP_STATUS_SUSPEND
    await _suspend(hist, leased, 0)
    assert (await _get(e, wid))["workflow"]["state"] == "TASK_STATE_WAITING"
    with pytest.raises(grpc.aio.AioRpcError) as err:
        await e.deploy(t.api_key, handlers=[apps_pb2.Handler(name="send")], files={"app.py": b"# wf v2\n"})
    assert err.value.code() == grpc.StatusCode.FAILED_PRECONDITION
    assert "'onboard' (1 live)" in err.value.details() and "UnknownTaskType" in err.value.details()
    r = await e.http.post("/v1/workflows", json={"workflow_type": "onboard"}, headers=e.auth())
    assert r.status_code == 200, r.text  # (the first deployment is still the active one)
    bundle, digest = make_bundle({"app.py": b"# wf v2\n"})
    dep = await e.apps.CreateDeployment(apps_pb2.CreateDeploymentRequest(
        app="default", bundle=bundle, digest=digest, handlers=[apps_pb2.Handler(name="send")],
        allow_dropping_live_handlers=True), metadata=e.md(t.api_key), timeout=10)
    assert dep.deployment.created and [h.name for h in dep.deployment.handlers] == ["send"]
