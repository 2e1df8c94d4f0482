"""A fan-out through the gateway and the real history process (2 real shards): the test leases
the run and speaks the step protocol itself (as the dispatcher forwards it), starts the
children through ControlService.StartChildren as a host agent would, completes them, and
reads the run, its fan-out step's counts and ListWorkflowChildren through the public API; and
an event resent with its event id, kept once in the real inbox."""

from __future__ import annotations

import asyncio
import json

import pytest

from ratchet.api.apps.v1 import apps_pb2
from ratchet.internal.gateway.v1 import control_pb2, control_pb2_grpc
from ratchet.internal.history.v1 import history_pb2 as h
from ratchet.internal.worker.v1 import worker_pb2 as wk
from ratchet.libs.shardmap import ShardMap, new_task_id

from .conftest import HOST_TOKEN
from .test_gateway_workflows_with_history import SHARDS, _step, _suspend, real  # noqa: F401 - the fixture

pytestmark = pytest.mark.timeout(120)
HOST_MD = (("authorization", f"Bearer {HOST_TOKEN}"),)
HANDLERS = [apps_pb2.Handler(name="charge"), apps_pb2.Handler(name="order", kind=apps_pb2.HANDLER_KIND_WORKFLOW)]


async def _lease(hist, shard: int, app_id: str, want: int) -> list[wk.LeasedTask]:
    """`want` leases of the app's ready tasks on the shard, within a bounded wait."""
    got: list[wk.LeasedTask] = []
    for _ in range(100):
        resp = await hist.LeaseTasks(h.LeaseTasksRequest(shard_id=shard, worker_id="test-worker", max_tasks=want,
                                                         app_ids=[app_id], lease_duration={"seconds": 30}), timeout=5)
        got += resp.tasks
        if len(got) >= want:
            return got
        await asyncio.sleep(0.05)
    raise AssertionError(f"leased {len(got)} of {want} tasks")


async def _until(check, what: str, timeout: float = 20.0):
    """check()'s value once it is truthy, polled within timeout seconds."""
    deadline = asyncio.get_running_loop().time() + timeout
    while True:
        value = await check()
        if value:
            return value
        if asyncio.get_running_loop().time() > deadline:
            raise AssertionError(f"{what} did not happen within {timeout:g}s")
        await asyncio.sleep(0.1)


async def test_children_started_through_the_gateway_end_and_the_real_barrier_wakes_the_run(real):  # noqa: F811 - real is the imported fixture
    e, hist = real
    t = await e.new_tenant("fanout-real")
    await e.deploy(t.api_key, handlers=HANDLERS, files={"app.py": b"# fan-out\n"})
    auth = {"Authorization": f"Bearer {t.api_key}"}
    wid = new_task_id()  # (a caller-minted id: a resend is the same run on the real shard)
    for dedup in (False, True):
        r = await e.http.post("/v1/workflows", json={"workflow_type": "order", "workflow_id": wid}, headers=auth)
        assert r.status_code == 200 and r.json()["workflow_id"] == wid, r.text
        assert r.json().get("deduplicated", False) is dedup
    shard = ShardMap.even(SHARDS).shard_for_task(wid)
    (leased,) = await _lease(hist, shard, t.app_id, 1)
    assert leased.task_id == wid

    # BEGIN PARALLEL mints the ids; the agent's StartChildren creates them (twice: a resend).
    specs = [wk.ChildSpec(task_type="charge", payload_json=b'{"cents":%d}' % i) for i in range(3)]
    run = await _step(hist, leased, "BEGIN", 0, "charges", "PARALLEL", children=specs,
                      on_failure=wk.PARALLEL_FAILURE_COLLECT)
    assert run.status == wk.STEP_STATUS_RUN and len(run.child_ids) == 3
    control = control_pb2_grpc.ControlServiceStub(e.channel)
    start = control_pb2.StartChildrenRequest(tenant_id=t.tenant_id, app_id=t.app_id, parent_id=wid, position=0,
                                             child_ids=run.child_ids, children=specs)
    assert (await control.StartChildren(start, metadata=HOST_MD, timeout=10)).created == 3
    assert (await control.StartChildren(start, metadata=HOST_MD, timeout=10)).created == 0
    await _suspend(hist, leased, 0)

    got = await _get_as(e, wid, auth)
    assert got["workflow"]["state"] == "TASK_STATE_WAITING"
    fan = got["steps"][0]
    assert (fan["kind"], fan["state"], fan["child_count"], fan.get("children_done", 0)) == \
        ("STEP_KIND_PARALLEL", "STEP_STATE_RUNNING", 3, 0)
    kids = await _children(e, wid, auth)
    # (ChildRun.task_type is not asserted: history's page leaves it empty so far, gateway2.md)
    assert [(c.get("index", 0), c["child_id"], c["state"]) for c in kids] == \
        [(i, run.child_ids[i], "TASK_STATE_ENQUEUED") for i in range(3)]
    r = await e.http.get(f"/v1/tasks/{run.child_ids[1]}", headers=auth)
    # (the gateway passes Task.parent_workflow_id through; history's GetTask does not fill it yet)
    assert r.status_code == 200 and r.json()["task"].get("parent_workflow_id", "") in ("", wid), r.text

    # The children run (on the parent's shard: a fan-out of up to 1,000 shares its slot) and end.
    children = await _lease(hist, shard, t.app_id, 3)
    assert sorted(c.task_id for c in children) == sorted(run.child_ids)
    done = [wk.Completion(shard_id=c.shard_id, task_id=c.task_id, lease_epoch=c.lease_epoch,
                          outcome=wk.COMPLETION_OUTCOME_SUCCEEDED,
                          result_json=b'{"paid":%d}' % list(run.child_ids).index(c.task_id)) for c in children]
    resp = await hist.CompleteTasks(h.CompleteTasksRequest(shard_id=shard, completions=done), timeout=5)
    assert all(r.accepted for r in resp.results), resp

    async def woken():
        # (GetWorkflow reads the run and its log in two calls at once: one may be a moment ahead)
        g = await _get_as(e, wid, auth)
        ok = g["steps"][0]["state"] == "STEP_STATE_COMPLETED" and g["workflow"]["state"] == "TASK_STATE_ENQUEUED"
        return g if ok else None

    after = await _until(woken, "the barrier completing the fan-out and waking the run")
    assert after["steps"][0]["children_done"] == 3
    kids = await _children(e, wid, auth)
    assert [(c["state"], c.get("result")) for c in kids] == [("TASK_STATE_SUCCEEDED", {"paid": i}) for i in range(3)]
    # The position of an ordinary step, or none, is no fan-out.
    r = await e.http.get(f"/v1/workflows/{wid}/steps/5/children", headers=auth)
    assert r.status_code == 404 and "has no fan-out" in r.json()["error"]["message"], r.text


async def _get_as(e, wid: str, auth: dict) -> dict:
    r = await e.http.get(f"/v1/workflows/{wid}", headers=auth)
    assert r.status_code == 200, r.text
    return r.json()


async def _children(e, wid: str, auth: dict) -> list[dict]:
    """Every child of the fan-out at position 0, one per page (the token followed)."""
    out, token = [], ""
    for _ in range(10):
        params = {"page_size": 1, **({"page_token": token} if token else {})}
        r = await e.http.get(f"/v1/workflows/{wid}/steps/0/children", params=params, headers=auth)
        assert r.status_code == 200, r.text
        out += r.json()["children"]
        token = r.json().get("next_page_token")
        if not token:
            return out
    raise AssertionError("more pages than children")


async def test_an_event_resent_with_its_id_is_kept_once_in_the_real_inbox(real):  # noqa: F811 - real is the imported fixture
    e, hist = real
    t = await e.new_tenant("events-real")
    await e.deploy(t.api_key, handlers=HANDLERS, files={"app.py": b"# events\n"})
    auth = {"Authorization": f"Bearer {t.api_key}"}
    wid = (await e.http.post("/v1/workflows", json={"workflow_type": "order"}, headers=auth)).json()["workflow_id"]
    (leased,) = await _lease(hist, ShardMap.even(SHARDS).shard_for_task(wid), t.app_id, 1)
    with_id, without = {"name": "paid", "data": {"n": 1}, "event_id": "ev-1"}, {"name": "paid", "data": {"n": 2}}
    for body in (with_id, with_id, without, without):  # (each sent twice, as a client's resend would)
        r = await e.http.post(f"/v1/workflows/{wid}/events", json=body, headers=auth)
        assert r.status_code == 200 and r.json() == {"delivered": False}, r.text
    # The inbox holds ev-1 once and the two events without an id: three waits take them, a fourth waits.
    taken = []
    for position in range(4):
        got = await _step(hist, leased, "BEGIN", position, "paid", "WAIT", match_json=b"{}")
        taken.append(json.loads(got.result_json) if got.status == wk.STEP_STATUS_DONE else got.status)
    assert taken == [{"n": 1}, {"n": 2}, {"n": 2}, wk.STEP_STATUS_SUSPEND]
