"""Fan-outs through the gateway (issue 24, second slice), against a real control database and
the fake history (fakes.py): ControlService.StartChildren (every check, the one enqueue path,
the parent link, resends), ListWorkflowChildren and the step counts, and the caller-minted
ids of StartWorkflow and SendWorkflowEvent."""

from __future__ import annotations

import dataclasses
import datetime as dt

import grpc
import pytest
import pytest_asyncio

from ratchet.api.apps.v1 import apps_pb2
from ratchet.api.tasks.v1 import tasks_pb2
from ratchet.api.workflows.v1 import workflows_pb2 as wpb
from ratchet.api.workflows.v1 import workflows_pb2_grpc
from ratchet.internal.gateway.v1 import control_pb2, control_pb2_grpc
from ratchet.internal.worker.v1 import worker_pb2
from ratchet.libs.shardmap import ShardMap, new_task_id
from ratchet.services.gateway.children import child_ids

from .conftest import HOST_TOKEN, SHARDS

pytestmark = pytest.mark.timeout(60)
S = tasks_pb2
WORKFLOW = apps_pb2.HANDLER_KIND_WORKFLOW
HOST_MD = (("authorization", f"Bearer {HOST_TOKEN}"),)
UTC = dt.UTC
HANDLERS = [apps_pb2.Handler(name="charge", retry=tasks_pb2.RetryPolicy(max_attempts=3),
                             non_retryable=["ValueError"]),
            apps_pb2.Handler(name="notify"),
            apps_pb2.Handler(name="order", kind=WORKFLOW),
            apps_pb2.Handler(name="ship", kind=WORKFLOW, retry=tasks_pb2.RetryPolicy(max_attempts=5))]


@dataclasses.dataclass
class App:
    key: str
    tenant_id: str
    app_id: str


@pytest_asyncio.fixture(scope="module")
async def app(env) -> App:
    t = await env.new_tenant("fanout-co")
    await env.deploy(t.api_key, handlers=HANDLERS, files={"app.py": b"# fan-outs\n"})
    return App(t.api_key, t.tenant_id, t.app_id)


def _parent(env, app: App, task_type: str = "order", state: int = S.TASK_STATE_LEASED) -> str:
    return env.history.add(app.tenant_id, app.app_id, task_type, state, dt.datetime.now(UTC))


def _req(app: App, parent: str, position: int, specs: list[tuple[str, bytes]],
         ids: list[str] | None = None) -> control_pb2.StartChildrenRequest:
    return control_pb2.StartChildrenRequest(
        tenant_id=app.tenant_id, app_id=app.app_id, parent_id=parent, position=position,
        child_ids=child_ids(parent, position, len(specs)) if ids is None else ids,
        children=[worker_pb2.ChildSpec(task_type=t, payload_json=p) for t, p in specs])


async def _start(env, req, md=HOST_MD) -> control_pb2.StartChildrenResponse:
    return await control_pb2_grpc.ControlServiceStub(env.channel).StartChildren(req, metadata=md, timeout=10)


def _creates(env, since: int) -> list:
    return [c for n, c in env.history.calls[since:] if n == "CreateTasks"]


# -- StartChildren -----------------------------------------------------------------
async def test_children_are_enqueues_of_their_types_with_their_parent_link(env, app):
    parent = _parent(env, app)
    specs = [("charge", b'{"cents":100}'), ("ship", b'{"to":"ada"}'), ("notify", b"")]
    before = len(env.history.calls)
    resp = await _start(env, _req(app, parent, 4, specs))
    assert resp.created == 3
    (call,) = _creates(env, before)  # (up to 1,000 children share the parent's slot: one shard, one call)
    shard_map = ShardMap.even(SHARDS)
    assert call.shard_id == shard_map.shard_for_task(parent)
    ids = child_ids(parent, 4, 3)
    assert [t.task_id for t in call.tasks] == ids
    by_id = {t.task_id: t for t in call.tasks}
    for i, (task_type, payload) in enumerate(specs):
        t = by_id[ids[i]]
        assert (t.task_type, t.payload_json, t.tenant_id, t.app_id, t.queue) == \
            (task_type, payload or b"null", app.tenant_id, app.app_id, "default")
        assert (t.parent.parent_id, t.parent.position, t.parent.index) == (parent, 4, i)
        assert not t.idempotency_key
    # Each child takes its handler's policy, as an enqueue of its type would.
    assert by_id[ids[0]].retry.max_attempts == 3 and list(by_id[ids[0]].non_retryable) == ["ValueError"]
    assert by_id[ids[1]].retry.max_attempts == 5
    # A resend (the agent's retry, or a repeated BEGIN) creates nothing new.
    again = await _start(env, _req(app, parent, 4, specs))
    assert again.created == 0
    assert len([i for i in env.history.tasks if i in ids]) == 3
    # A child's task read names its parent.
    r = await env.http.get(f"/v1/tasks/{ids[0]}", headers={"Authorization": f"Bearer {app.key}"})
    assert r.status_code == 200 and r.json()["task"]["parent_workflow_id"] == parent, r.text


async def test_a_fan_out_of_more_than_1000_spreads_over_the_shards_in_calls_of_at_most_1000(env, app):
    parent = _parent(env, app)
    n = 5000  # (1,250 for each of 4 shards: more than history takes in one request)
    before = len(env.history.calls)
    resp = await _start(env, _req(app, parent, 0, [("notify", b"%d" % i) for i in range(n)]))
    assert resp.created == n
    calls = _creates(env, before)
    shard_map = ShardMap.even(SHARDS)
    assert {c.shard_id for c in calls} == set(SHARDS)  # (every shard gets some)
    assert all(len(c.tasks) <= 1000 for c in calls)  # (history's per-request limit)
    sent = {t.task_id: t for c in calls for t in c.tasks}
    assert set(sent) == set(child_ids(parent, 0, n))
    for c in calls:
        assert all(shard_map.shard_for_task(t.task_id) == c.shard_id for t in c.tasks)
    assert sorted(t.parent.index for t in sent.values()) == list(range(n))
    # A resend after a partial failure: the children there count as existing, the rest are new.
    for i in child_ids(parent, 0, n)[:500]:
        env.history.tasks.pop(i)
    assert (await _start(env, _req(app, parent, 0, [("notify", b"%d" % i) for i in range(n)]))).created == 500


async def test_a_shard_down_fails_the_call_and_a_resend_creates_only_the_rest(env, app):
    """Above 1,000 the children spread over the shards: a shard that fails leaves the others'
    children created; the resend (the agent retries UNAVAILABLE) creates the rest, once."""
    parent = _parent(env, app)
    n = 1200
    specs = [("notify", b"%d" % i) for i in range(n)]
    ids = child_ids(parent, 0, n)
    on_down = [i for i in ids if ShardMap.even(SHARDS).shard_for_task(i) == 3]
    env.history.creates_down.add(3)
    try:
        with pytest.raises(grpc.aio.AioRpcError) as e:
            await _start(env, _req(app, parent, 0, specs))
    finally:
        env.history.creates_down.discard(3)
    assert e.value.code() == grpc.StatusCode.UNAVAILABLE and "shard 3" in e.value.details(), e.value.details()
    assert 0 < len(on_down) < n and not any(i in env.history.tasks for i in on_down)
    assert sum(i in env.history.tasks for i in ids) == n - len(on_down)
    assert (await _start(env, _req(app, parent, 0, specs))).created == len(on_down)
    assert all(i in env.history.tasks for i in ids)


def _bad_cases(parent: str):
    ids = child_ids(parent, 1, 3)
    ok = [("notify", b"1")] * 3
    return [
        (dict(parent_id="nope"), ok, None, "INVALID_ARGUMENT", "parent_id 'nope' is not a Ratchet task id"),
        (dict(parent_id=""), ok, None, "INVALID_ARGUMENT", "parent_id is required"),
        (dict(tenant_id=""), ok, None, "INVALID_ARGUMENT", "tenant_id is required"),
        (dict(position=-1), ok, None, "INVALID_ARGUMENT", "position must be >= 0"),
        ({}, [], [], "INVALID_ARGUMENT", "children holds 0 specs; a fan-out has 1..10000 children"),
        ({}, ok, ids[:2], "INVALID_ARGUMENT", "child_ids holds 2 ids for 3 children"),
        ({}, ok, [ids[0], ids[1], new_task_id()], "INVALID_ARGUMENT", "child_ids[2]"),
        ({}, ok, [ids[0], ids[2], ids[1]], "INVALID_ARGUMENT", "is not the id of child 1 of the fan-out at position 1"),
        ({}, [("notify", b"1"), ("nope", b"1"), ("notify", b"1")], None, "INVALID_ARGUMENT",
         "children[1].task_type 'nope' is not registered by the app's active deployment; registered types: "
         "charge, notify, order, ship"),
        ({}, [("notify", b"1"), ("", b"1"), ("notify", b"1")], None, "INVALID_ARGUMENT",
         "children[1].task_type is required"),
        ({}, [("notify", b"1"), ("notify", b"1"), ("notify", b"{bad")], None, "INVALID_ARGUMENT",
         "children[2].payload_json must be one JSON value"),
        ({}, [("notify", b"NaN"), ("notify", b"1"), ("notify", b"1")], None, "INVALID_ARGUMENT",
         "children[0].payload_json must be one JSON value"),
        ({}, [("notify", b"1"), ("notify", b'"\xff"'), ("notify", b"1")], None, "INVALID_ARGUMENT",
         "children[1].payload_json is not UTF-8 text"),
        ({}, [("notify", b"1"), ("notify", b'"' + b"x" * 262144 + b'"'), ("notify", b"1")], None,
         "RESOURCE_EXHAUSTED", "children[1].payload_json is 262146 bytes; the limit is 262144 bytes"),
    ]


@pytest.mark.parametrize("case", range(14))
async def test_bad_start_children_are_refused_naming_what_to_fix_and_create_nothing(env, app, case):
    parent = _parent(env, app)
    change, specs, ids, code, needle = _bad_cases(parent)[case]
    req = _req(app, parent, 1, specs, ids)
    for name, value in change.items():
        setattr(req, name, value)
    before = len(env.history.calls)
    with pytest.raises(grpc.aio.AioRpcError) as e:
        await _start(env, req)
    assert e.value.code().name == code and needle in e.value.details(), e.value.details()
    assert _creates(env, before) == []


async def test_the_largest_fan_out_is_created_in_calls_history_takes(env, app):
    parent = _parent(env, app)
    before = len(env.history.calls)
    resp = await _start(env, _req(app, parent, 7, [("charge", b"{}")] * 10_000))
    assert resp.created == 10_000
    calls = _creates(env, before)
    assert all(len(c.tasks) <= 1000 for c in calls) and sum(len(c.tasks) for c in calls) == 10_000
    assert sorted(t.parent.index for c in calls for t in c.tasks) == list(range(10_000))


async def test_too_many_children_are_refused(env, app):
    parent = _parent(env, app)
    req = _req(app, parent, 0, [("notify", b"1")] * 10_001, ids=[])
    with pytest.raises(grpc.aio.AioRpcError) as e:
        await _start(env, req)
    assert e.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert "children holds 10001 specs; a fan-out has 1..10000 children" in e.value.details()


async def test_start_children_checks_the_caller_the_app_and_the_parent(env, app):
    specs = [("notify", b"1")]
    before = len(env.history.calls)
    parent = _parent(env, app)
    for md in ((), (("authorization", f"Bearer {app.key}"),)):  # (an app's key is no mesh token)
        with pytest.raises(grpc.aio.AioRpcError) as e:
            await _start(env, _req(app, parent, 0, specs), md=md)
        assert e.value.code() == grpc.StatusCode.UNAUTHENTICATED
    other = await env.new_tenant("fanout-other")
    req = _req(app, parent, 0, specs)
    req.tenant_id = other.tenant_id
    with pytest.raises(grpc.aio.AioRpcError) as e:  # (the parent is not the other tenant's either)
        await _start(env, req)
    assert e.value.code() in (grpc.StatusCode.INVALID_ARGUMENT, grpc.StatusCode.NOT_FOUND)
    cases = [(new_task_id(), grpc.StatusCode.NOT_FOUND, "not found for tenant"),
             (_parent(env, app, "notify"), grpc.StatusCode.INVALID_ARGUMENT,
              "is a task of type 'notify', not a workflow run"),
             (_parent(env, app, "order", S.TASK_STATE_CANCELED), grpc.StatusCode.FAILED_PRECONDITION,
              "has ended (TASK_STATE_CANCELED)")]
    for pid, code, needle in cases:
        with pytest.raises(grpc.aio.AioRpcError) as e:
            await _start(env, _req(app, pid, 0, specs))
        assert e.value.code() == code and needle in e.value.details(), e.value.details()
    assert _creates(env, before) == []


async def test_one_child_shares_coalesced_calls_and_keeps_its_link(env, app):
    """A fan-out of one (ctx.child) is a single enqueue on the coalescing path: its parent link
    survives the merge with other callers' enqueues."""
    parent = _parent(env, app)
    before = len(env.history.calls)
    assert (await _start(env, _req(app, parent, 2, [("ship", b'{"n":1}')]))).created == 1
    (cid,) = child_ids(parent, 2, 1)
    t = env.history.tasks[cid]
    assert (t.parent.parent_id, t.parent.index, t.task_type, t.retry.max_attempts) == (parent, 0, "ship", 5)
    assert len(_creates(env, before)) == 1


# -- ListWorkflowChildren and the step's counts -------------------------------------
async def test_children_are_listed_by_index_in_pages_and_the_step_counts_them(env, app):
    parent = _parent(env, app, state=S.TASK_STATE_WAITING)
    env.history.log(parent, wpb.Step(name="prep", kind=wpb.STEP_KIND_STEP, state=wpb.STEP_STATE_COMPLETED),
                    wpb.Step(name="fan", kind=wpb.STEP_KIND_PARALLEL, state=wpb.STEP_STATE_RUNNING,
                             child_count=3, children_done=1))
    await _start(env, _req(app, parent, 1, [("charge", b"1"), ("ship", b"2"), ("notify", b"3")]))
    ids = child_ids(parent, 1, 3)
    env.history.set_state(ids[0], S.TASK_STATE_SUCCEEDED)
    auth = {"Authorization": f"Bearer {app.key}"}
    r = await env.http.get(f"/v1/workflows/{parent}", headers=auth)
    assert r.status_code == 200, r.text
    fan = r.json()["steps"][1]
    assert (fan["kind"], fan["child_count"], fan["children_done"]) == ("STEP_KIND_PARALLEL", 3, 1)
    r = await env.http.get(f"/v1/workflows/{parent}/steps/1/children?page_size=2", headers=auth)
    assert r.status_code == 200, r.text
    page = r.json()
    assert [(c.get("index", 0), c["child_id"], c["task_type"], c["state"]) for c in page["children"]] == \
        [(0, ids[0], "charge", "TASK_STATE_SUCCEEDED"), (1, ids[1], "ship", "TASK_STATE_ENQUEUED")]
    r = await env.http.get(f"/v1/workflows/{parent}/steps/1/children?page_size=2&page_token={page['next_page_token']}",
                           headers=auth)
    rest = r.json()
    assert [c["child_id"] for c in rest["children"]] == [ids[2]] and not rest.get("next_page_token"), rest
    stub = workflows_pb2_grpc.WorkflowServiceStub(env.channel)  # (gRPC: the same handler)
    got = await stub.ListWorkflowChildren(wpb.ListWorkflowChildrenRequest(workflow_id=parent, position=1),
                                          metadata=(("authorization", f"Bearer {app.key}"),), timeout=5)
    assert [c.child_id for c in got.children] == ids and not got.next_page_token
    assert got.children[0].state == S.TASK_STATE_SUCCEEDED
    # A token of this fan-out is refused for another position; a position that is no fan-out is 404.
    r = await env.http.get(f"/v1/workflows/{parent}/steps/0/children?page_token={page['next_page_token']}",
                           headers=auth)
    assert r.status_code == 400 and "belongs to the fan-out at position 1" in r.json()["error"]["message"], r.text
    r = await env.http.get(f"/v1/workflows/{parent}/steps/0/children", headers=auth)
    assert r.status_code == 404 and "has no fan-out (ctx.parallel or ctx.child) at position 0" in \
        r.json()["error"]["message"], r.text


@pytest.mark.parametrize("path, status, needle", [
    ("/steps/-1/children", 400, "position must be >= 0"),
    ("/steps/1/children?page_size=1001", 400, "page_size must be 1..1000"),
    ("/steps/1/children?page_token=xyz", 400, "page_token is not valid"),
    ("/steps/x/children", 400, "position"),
])
async def test_bad_children_reads_are_400_and_reach_no_shard(env, app, path, status, needle):
    parent = _parent(env, app)
    before = len(env.history.calls)
    r = await env.http.get(f"/v1/workflows/{parent}{path}", headers={"Authorization": f"Bearer {app.key}"})
    assert r.status_code == status and needle in r.json()["error"]["message"], r.text
    assert len(env.history.calls) == before


async def test_children_of_unknown_runs_other_tenants_and_tasks_are_404(env, app):
    task = _parent(env, app, "notify")
    other = await env.new_tenant("fanout-reader")
    for wid, key, needle in ((new_task_id(), app.key, "not found"), (task, app.key, "it is a task of type 'notify'"),
                             (_parent(env, app), other.api_key, "not found")):
        r = await env.http.get(f"/v1/workflows/{wid}/steps/0/children", headers={"Authorization": f"Bearer {key}"})
        assert r.status_code == 404 and needle in r.json()["error"]["message"], r.text


# -- caller-minted ids --------------------------------------------------------------
async def test_a_start_with_its_own_id_is_deduplicated_by_it(env, app):
    auth = {"Authorization": f"Bearer {app.key}"}
    wid = new_task_id()
    body = {"workflow_type": "order", "workflow_id": wid, "input": {"n": 1}}
    first = (await env.http.post("/v1/workflows", json=body, headers=auth)).json()
    assert first == {"workflow_id": wid, "deduplicated": False} or first == {"workflow_id": wid}, first
    assert env.history.tasks[wid].task_type == "order" and not env.history.tasks[wid].idempotency_key
    again = (await env.http.post("/v1/workflows", json=body, headers=auth)).json()
    assert again == {"workflow_id": wid, "deduplicated": True}
    assert [t for t in env.history.tasks if t == wid] == [wid]


@pytest.mark.parametrize("body, needle", [
    ({"workflow_id": "abc"}, "workflow_id 'abc' is not a Ratchet id"),
    ({"workflow_id": "WID", "idempotency_key": "k"}, "workflow_id and idempotency_key are exclusive"),
])
async def test_bad_workflow_ids_are_refused(env, app, body, needle):
    body = {"workflow_type": "order", **{k: (new_task_id() if v == "WID" else v) for k, v in body.items()}}
    before = len(env.history.calls)
    r = await env.http.post("/v1/workflows", json=body, headers={"Authorization": f"Bearer {app.key}"})
    assert r.status_code == 400 and needle in r.json()["error"]["message"], r.text
    assert len(env.history.calls) == before


async def test_an_event_resent_with_its_id_is_kept_once(env, app):
    run = _parent(env, app, state=S.TASK_STATE_WAITING)
    auth = {"Authorization": f"Bearer {app.key}"}
    body = {"name": "paid", "data": {"n": 1}, "event_id": "ev-1"}
    for _ in range(2):
        r = await env.http.post(f"/v1/workflows/{run}/events", json=body, headers=auth)
        assert r.status_code == 200 and r.json() == {"delivered": False}, r.text
    assert env.history.inbox[run] == [("paid", {"n": 1})]
    sent = [c for n, c in env.history.calls if n == "DeliverEvent" and c.workflow_id == run]
    assert [c.event_id for c in sent] == ["ev-1", "ev-1"]
    r = await env.http.post(f"/v1/workflows/{run}/events", json={**body, "event_id": "x" * 201}, headers=auth)
    assert r.status_code == 400 and "event_id must be 1..200 printable ASCII characters" in \
        r.json()["error"]["message"], r.text
