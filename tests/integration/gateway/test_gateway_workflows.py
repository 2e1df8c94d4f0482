"""The workflow API end to end through the gateway (REST and gRPC), against a real control
database and the fake history (fakes.py): starts on the one enqueue path, the kind checks
both ways, reads of a run and its step log, lists, cancels, events, and handler kinds stored
with the deployment."""

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
from ratchet.libs.shardmap import ShardMap, new_task_id

from .conftest import HOST_TOKEN, SHARDS

pytestmark = pytest.mark.timeout(60)
S = tasks_pb2
WORKFLOW, TASK = apps_pb2.HANDLER_KIND_WORKFLOW, apps_pb2.HANDLER_KIND_TASK
LATEST = apps_pb2.WORKFLOW_RESUME_LATEST
UTC = dt.UTC


@dataclasses.dataclass
class App:
    """A tenant whose deployment has tasks and workflows."""

    key: str
    tenant_id: str
    app_id: str


HANDLERS = [apps_pb2.Handler(name="send"), apps_pb2.Handler(name="legacy", kind=TASK),
            apps_pb2.Handler(name="onboard", kind=WORKFLOW, resume=LATEST,
                             retry=tasks_pb2.RetryPolicy(max_attempts=7)),
            apps_pb2.Handler(name="approve", kind=WORKFLOW)]


@pytest_asyncio.fixture(scope="module")
async def app(env) -> App:
    t = await env.new_tenant("wf-co")
    await env.deploy(t.api_key, handlers=HANDLERS)
    return App(t.api_key, t.tenant_id, t.app_id)


def _auth(app: App) -> dict:
    return {"Authorization": f"Bearer {app.key}"}


def _md(app: App) -> tuple:
    return (("authorization", f"Bearer {app.key}"),)


def _creates(env, task_id: str) -> list:
    return [c for n, c in env.history.calls if n == "CreateTasks" and any(t.task_id == task_id for t in c.tasks)]


# -- start -------------------------------------------------------------------------
async def test_start_is_an_enqueue_of_the_workflow_type_with_its_policy_and_key(env, app):
    body = {"workflow_type": "onboard", "input": {"user": "ada", "n": 2.0}, "idempotency_key": "signup-ada",
            "queue": "flows", "delay": "30s"}
    r = await env.http.post("/v1/workflows", json=body, headers=_auth(app))
    assert r.status_code == 200, r.text
    wid = r.json()["workflow_id"]
    assert r.json()["deduplicated"] is False
    (req,) = _creates(env, wid)
    t = req.tasks[0]
    assert req.shard_id == ShardMap.even(SHARDS).shard_for_task(wid)
    assert (t.task_type, t.queue, t.payload_json, t.tenant_id, t.app_id) == \
        ("onboard", "flows", b'{"n":2,"user":"ada"}', app.tenant_id, app.app_id)
    assert t.retry.max_attempts == 7 and t.delay.seconds == 30 and t.fingerprint.startswith("sha256:")
    # A retry of the same start (over gRPC this time) is the same run; the key with another input is 409.
    stub = workflows_pb2_grpc.WorkflowServiceStub(env.channel)
    again = wpb.StartWorkflowRequest(workflow_type="onboard", idempotency_key="signup-ada", queue="flows")
    again.input.struct_value.update({"user": "ada", "n": 2})
    again.delay.FromSeconds(30)
    resp = await stub.StartWorkflow(again, metadata=_md(app), timeout=5)
    assert (resp.workflow_id, resp.deduplicated) == (wid, True)
    r = await env.http.post("/v1/workflows", json={**body, "input": {"user": "bob"}}, headers=_auth(app))
    assert r.status_code == 409 and r.json()["error"]["original_task_id"] == wid
    # Without input or key: a null payload, a fresh run each time.
    ids = {(await env.http.post("/v1/workflows", json={"workflow_type": "approve"}, headers=_auth(app)))
           .json()["workflow_id"] for _ in range(2)}
    assert len(ids) == 2
    assert _creates(env, ids.pop())[0].tasks[0].payload_json == b"null"


@pytest.mark.parametrize("body, status, needle", [
    ({"workflow_type": "send"}, 400, "'send' is a task handler; enqueue it with POST /v1/tasks"),
    ({"workflow_type": "legacy"}, 400, "'legacy' is a task handler"),
    ({"workflow_type": "nope"}, 400, "workflow_type 'nope' is not registered by the app's active deployment; "
                                     "registered types: approve, legacy, onboard, send"),
    ({}, 400, "workflow_type is required"),
    ({"workflow_type": "onboard", "queue": "has space"}, 400, "queue must be 1..64 characters"),
    ({"workflow_type": "onboard", "delay": "-5s"}, 400, "delay must be >= 0"),
    ({"workflow_type": "onboard", "delay": f"{400 * 86400}s"}, 400, "delay must be at most 365 days"),
    ({"workflow_type": "onboard", "idempotency_key": "k" * 201}, 400, "idempotency_key must be 1..200"),
    ({"workflow_type": "onboard", "input": "x" * 262144}, 413, "input is 262146 bytes as compact JSON"),
    ({"workflow_type": "onboard", "bogus": 1}, 400, "bogus"),
])
async def test_bad_starts_are_refused_naming_the_field_and_send_nothing(env, app, body, status, needle):
    before = len(env.history.calls)
    r = await env.http.post("/v1/workflows", json=body, headers=_auth(app))
    assert r.status_code == status and needle in r.json()["error"]["message"], r.text
    assert len(env.history.calls) == before


async def test_every_form_of_enqueue_refuses_a_workflow_type_and_sends_nothing(env, app):
    before = len(env.history.calls)
    needle = "is a workflow; start it with POST /v1/workflows"
    r = await env.http.post("/v1/tasks", json={"task_type": "onboard"}, headers=_auth(app))
    assert r.status_code == 400 and f"task_type 'onboard' {needle}" in r.json()["error"]["message"], r.text
    items = [{"task_type": "send"}, {"task_type": "onboard", "payload": 1}]
    r = await env.http.post("/v1/tasks:batch", json={"tasks": items}, headers=_auth(app))
    assert r.status_code == 400 and f"tasks[1].task_type 'onboard' {needle}" in r.json()["error"]["message"]
    plain = [{"task_type": "onboard", "task_id": new_task_id(), "payload_json": "1"} for _ in range(3)]
    r = await env.http.post("/v1/tasks:batch", json={"tasks": plain}, headers=_auth(app))  # the column-checked form
    assert r.status_code == 400 and f"tasks[0].task_type 'onboard' {needle}" in r.json()["error"]["message"]
    r = await env.http.post("/v1/tasks:batch", json={"columns": {"task_type": "approve", "payloads_json": ["1"]}},
                            headers=_auth(app))
    assert r.status_code == 400 and f"columns.task_type 'approve' {needle}" in r.json()["error"]["message"]
    assert len(env.history.calls) == before
    ok = await env.http.post("/v1/tasks:batch", json={"tasks": [{"task_type": "send"}, {"task_type": "legacy"}]},
                             headers=_auth(app))
    assert ok.status_code == 200, ok.text  # task handlers, with or without an explicit kind


# -- one run -----------------------------------------------------------------------
async def _start(env, app: App, kind: str = "onboard", payload=None) -> str:
    r = await env.http.post("/v1/workflows", json={"workflow_type": kind, "input": payload or {"u": 1}},
                            headers=_auth(app))
    assert r.status_code == 200, r.text
    return r.json()["workflow_id"]


def _steps(n: int) -> list[wpb.Step]:
    out = []
    for i in range(n):
        st = wpb.Step(name=f"s{i}", kind=wpb.STEP_KIND_STEP, state=wpb.STEP_STATE_COMPLETED, attempt=1)
        st.result.number_value = i
        out.append(st)
    return out


async def test_get_workflow_reads_the_run_its_pending_wait_and_pages_its_log(env, app):
    wid = await _start(env, app, payload={"user": "ada"})
    env.history.log(wid, *_steps(4), wait=("approved", {"user": "ada"}))
    env.history.set_state(wid, S.TASK_STATE_WAITING, attempt=3)
    r = await env.http.get(f"/v1/workflows/{wid}", params={"step_page_size": 2}, headers=_auth(app))
    assert r.status_code == 200, r.text
    body = r.json()
    w = body["workflow"]
    assert (w["workflow_id"], w["workflow_type"], w["state"], w["input"], w["activations"], w["step_count"]) == \
        (wid, "onboard", "TASK_STATE_WAITING", {"user": "ada"}, 3, 5)
    assert w["pending"] == {"position": 4, "kind": "STEP_KIND_WAIT", "name": "approved", "match": {"user": "ada"}}
    assert [s["name"] for s in body["steps"]] == ["s0", "s1"] and body["next_step_page_token"]
    seen, token = [s["position"] for s in body["steps"]], body["next_step_page_token"]
    while token:
        r = await env.http.get(f"/v1/workflows/{wid}", params={"step_page_size": 2, "step_page_token": token},
                               headers=_auth(app))
        assert r.status_code == 200, r.text
        seen += [s["position"] for s in r.json()["steps"]]
        token = r.json()["next_step_page_token"]
    assert seen == [0, 1, 2, 3, 4]
    (steps_call,) = [c for n, c in env.history.calls if n == "GetWorkflowSteps" and c.workflow_id == wid
                     and c.from_position == 4]
    assert steps_call.tenant_id == app.tenant_id and steps_call.shard_id == ShardMap.even(SHARDS).shard_for_task(wid)
    # Once it runs again, the open wait is no longer what it waits on.
    env.history.set_state(wid, S.TASK_STATE_LEASED)
    stub = workflows_pb2_grpc.WorkflowServiceStub(env.channel)
    got = await stub.GetWorkflow(wpb.GetWorkflowRequest(workflow_id=wid), metadata=_md(app), timeout=5)
    assert not got.workflow.HasField("pending") and len(got.steps) == 5 and not got.next_step_page_token


async def test_get_workflow_is_404_for_unknown_ids_other_tenants_and_plain_tasks(env, app):
    wid = await _start(env, app)
    task = await env.http.post("/v1/tasks", json={"task_type": "send"}, headers=_auth(app))
    task_id = task.json()["task_id"]
    other = await env.new_tenant("wf-other")
    await env.deploy(other.api_key, handlers=HANDLERS)
    cases = [(new_task_id(), _auth(app), "not found"),
             ("6f1c1f1e-8a43-4a8e-9a51-5b7f3f9d2c10", _auth(app), "not found"),  # a UUID no run has
             (wid, {"Authorization": f"Bearer {other.api_key}"}, f"workflow {wid} not found"),
             (task_id, _auth(app), "it is a task of type 'send'")]
    for run_id, headers, needle in cases:
        for method, path in (("GET", f"/v1/workflows/{run_id}"), ("POST", f"/v1/workflows/{run_id}/cancel"),
                             ("POST", f"/v1/workflows/{run_id}/events")):
            body = {"name": "go"} if path.endswith("events") else {} if method == "POST" else None
            r = await env.http.request(method, path, json=body, headers=headers)
            assert r.status_code == 404 and needle in r.json()["error"]["message"], (path, r.text)
    assert env.history.states[task_id] == S.TASK_STATE_ENQUEUED  # the plain task was not cancelled
    assert not [c for n, c in env.history.calls if n in ("CancelTask", "DeliverEvent") and
                getattr(c, "task_id", getattr(c, "workflow_id", "")) == task_id]


async def test_bad_reads_of_a_run_are_400_naming_what_to_fix(env, app):
    wid, other = await _start(env, app), await _start(env, app)
    env.history.log(wid, *_steps(3))
    r = await env.http.get(f"/v1/workflows/{wid}", params={"step_page_size": 1}, headers=_auth(app))
    token = r.json()["next_step_page_token"]
    before = len(env.history.calls)
    for path, params, needle in (
            ("/v1/workflows/not-an-id", {}, "workflow_id 'not-an-id' is not a workflow id"),
            (f"/v1/workflows/{wid}", {"step_page_size": 1001}, "step_page_size must be 1..1000"),
            (f"/v1/workflows/{wid}", {"step_page_token": "garbage"}, "step_page_token is not valid"),
            (f"/v1/workflows/{other}", {"step_page_token": token}, f"step_page_token belongs to workflow {wid}")):
        r = await env.http.get(path, params=params, headers=_auth(app))
        assert r.status_code == 400 and needle in r.json()["error"]["message"], r.text
    assert len(env.history.calls) == before


async def test_cancel_workflow_cancels_the_run(env, app):
    wid = await _start(env, app)
    env.history.set_state(wid, S.TASK_STATE_WAITING)
    r = await env.http.post(f"/v1/workflows/{wid}/cancel", json={}, headers=_auth(app))
    assert r.status_code == 200 and r.json()["state"] == "TASK_STATE_CANCELED", r.text
    assert env.history.states[wid] == S.TASK_STATE_CANCELED


# -- many runs ---------------------------------------------------------------------
async def test_list_workflows_pages_every_run_once_newest_first_and_no_task(env):
    t = await env.new_tenant("wf-list")
    await env.deploy(t.api_key, handlers=HANDLERS)
    a = App(t.api_key, t.tenant_id, t.app_id)
    base = dt.datetime(2026, 1, 1, tzinfo=UTC)
    runs = {}
    for i in range(14):  # 14 runs over two workflow types and every shard, between 7 plain tasks
        kind = ("onboard", "approve")[i % 2]
        runs[env.history.add(a.tenant_id, a.app_id, kind, S.TASK_STATE_ENQUEUED, base + dt.timedelta(seconds=i))] = i
        if i % 2:
            env.history.add(a.tenant_id, a.app_id, "send", S.TASK_STATE_ENQUEUED, base + dt.timedelta(seconds=i))
    got, token, pages = [], "", 0
    while True:
        r = await env.http.get("/v1/workflows", params={"page_size": 4, **({"page_token": token} if token else {})},
                               headers=_auth(a))
        assert r.status_code == 200, r.text
        assert len(r.json()["workflows"]) == 4 or not r.json()["next_page_token"]  # exact pages
        got += r.json()["workflows"]
        token, pages = r.json()["next_page_token"], pages + 1
        if not token:
            break
    assert [w["workflow_id"] for w in got] == sorted(runs, key=runs.__getitem__, reverse=True) and pages == 4
    only = await env.http.get("/v1/workflows", params={"workflow_type": "approve"}, headers=_auth(a))
    assert {w["workflow_type"] for w in only.json()["workflows"]} == {"approve"} and len(only.json()["workflows"]) == 7
    some = next(iter(runs))
    env.history.set_state(some, S.TASK_STATE_WAITING)
    waiting = await env.http.get("/v1/workflows", params={"state": "WAITING"}, headers=_auth(a))
    assert [w["workflow_id"] for w in waiting.json()["workflows"]] == [some]
    for params, needle in (({"workflow_type": "send"}, "'send' is a task handler, not a workflow"),
                           ({"workflow_type": "nope"}, "workflow_type 'nope' is not registered"),
                           ({"page_size": 0, "page_token": "x"}, "page_token is not valid"),
                           ({"page_size": 5000}, "page_size must be 1..1000")):
        r = await env.http.get("/v1/workflows", params=params, headers=_auth(a))
        assert r.status_code == 400 and needle in r.json()["error"]["message"], r.text
    first = await env.http.get("/v1/workflows", params={"page_size": 1}, headers=_auth(a))
    r = await env.http.get("/v1/workflows", params={"state": "FAILED", "page_token": first.json()["next_page_token"]},
                           headers=_auth(a))
    assert r.status_code == 400 and "page_token does not match" in r.json()["error"]["message"]


async def test_send_event_reaches_every_shard_and_sums_the_waits_it_woke(env):
    t = await env.new_tenant("wf-events")
    await env.deploy(t.api_key, handlers=HANDLERS)
    a = App(t.api_key, t.tenant_id, t.app_id)
    ids = [await _start(env, a) for _ in range(12)]
    for i, wid in enumerate(ids):
        env.history.log(wid, wait=("paid", {"order": i % 3}))
        env.history.set_state(wid, S.TASK_STATE_WAITING)
    assert len({ShardMap.even(SHARDS).shard_for_task(w) for w in ids}) > 1
    before = len(env.history.calls)
    r = await env.http.post("/v1/events", json={"name": "paid", "data": {"order": 1, "amount": 5}}, headers=_auth(a))
    assert r.status_code == 200 and r.json() == {"delivered": 4}, r.text
    calls = [c for n, c in env.history.calls[before:] if n == "DeliverEvent"]
    assert sorted(c.shard_id for c in calls) == SHARDS and {c.workflow_id for c in calls} == {""}
    assert [env.history.states[w] for w in ids[1::3]] == [S.TASK_STATE_ENQUEUED] * 4
    assert env.history.states[ids[0]] == S.TASK_STATE_WAITING
    r = await env.http.post("/v1/events", json={"name": "paid", "data": {"order": 1}}, headers=_auth(a))
    assert r.json() == {"delivered": 0}  # each wait took one event
    # Another tenant's event of that name wakes none of these.
    r = await env.http.post("/v1/events", json={"name": "paid", "data": {"order": 0}}, headers=_auth(App(
        env.api_key, env.tenant_id, env.app_id)))
    assert r.json() == {"delivered": 0} and env.history.states[ids[0]] == S.TASK_STATE_WAITING


@pytest.mark.parametrize("body, status, needle", [
    ({"name": "bad name!", "data": {}}, 400, "name must be 1..200 characters of [A-Za-z0-9_.:-]"),
    ({"data": {}}, 400, "name must be"),
    ({"name": "x" * 201}, 400, "name must be"),
    ({"name": "ok", "data": [1, 2]}, 400, "invalid request"),
    ({"name": "ok", "data": {"big": "x" * 262144}}, 413, "data is 262154 bytes as compact JSON"),
])
async def test_bad_events_are_refused_and_reach_no_shard(env, app, body, status, needle):
    wid = await _start(env, app)
    before = len(env.history.calls)
    for path in ("/v1/events", f"/v1/workflows/{wid}/events"):
        r = await env.http.post(path, json=body, headers=_auth(app))
        assert r.status_code == status and needle in r.json()["error"]["message"], (path, r.text)
    assert len(env.history.calls) == before


async def test_a_broadcast_with_a_shard_down_says_which_and_what_the_others_woke(env, app):
    wid = await _start(env, app)
    env.history.log(wid, wait=("ping", {}))
    down = next(s for s in SHARDS if s != ShardMap.even(SHARDS).shard_for_task(wid))
    env.history.down.add(down)
    try:
        r = await env.http.post("/v1/events", json={"name": "ping"}, headers=_auth(app))
    finally:
        env.history.down.discard(down)
    assert r.status_code == 503, r.text
    assert f"shard(s) {down} did not answer; the event woke 1 wait(s) on the others" in r.json()["error"]["message"]


async def test_send_workflow_event_wakes_a_matching_wait_or_keeps_it_in_the_inbox(env, app):
    wid = await _start(env, app)
    env.history.log(wid, wait=("approved", {"user": "ada"}))
    env.history.set_state(wid, S.TASK_STATE_WAITING)
    stub = workflows_pb2_grpc.WorkflowServiceStub(env.channel)
    other = wpb.SendWorkflowEventRequest(workflow_id=wid, name="approved")
    other.data.update({"user": "bob"})
    resp = await stub.SendWorkflowEvent(other, metadata=_md(app), timeout=5)
    assert resp.delivered is False and env.history.inbox[wid] == [("approved", {"user": "bob"})]
    r = await env.http.post(f"/v1/workflows/{wid}/events", json={"name": "approved", "data": {"user": "ada", "ok": 1}},
                            headers=_auth(app))
    assert r.status_code == 200 and r.json() == {"delivered": True}, r.text
    assert env.history.states[wid] == S.TASK_STATE_ENQUEUED
    env.history.set_state(wid, S.TASK_STATE_SUCCEEDED)
    r = await env.http.post(f"/v1/workflows/{wid}/events", json={"name": "approved"}, headers=_auth(app))
    assert r.status_code == 400 and "the run has ended" in r.json()["error"]["message"], r.text


# -- deployments -------------------------------------------------------------------
async def test_handler_kinds_are_stored_with_the_deployment_and_returned(env):
    t = await env.new_tenant("wf-kinds")
    dep = (await env.deploy(t.api_key, handlers=HANDLERS, files={"app.py": b"# kinds\n"})).deployment
    kinds = {h.name: (h.kind, h.resume) for h in dep.handlers}
    assert kinds == {"send": (0, 0), "legacy": (TASK, 0), "onboard": (WORKFLOW, LATEST),
                     "approve": (WORKFLOW, 0)}
    stub = control_pb2_grpc.ControlServiceStub(env.channel)
    active = await stub.GetActiveDeployment(control_pb2.GetActiveDeploymentRequest(app_id=t.app_id),
                                            metadata=(("authorization", f"Bearer {HOST_TOKEN}"),), timeout=5)
    assert {h.name: (h.kind, h.resume) for h in active.deployment.handlers} == kinds


@pytest.mark.parametrize("handler, needle", [
    (apps_pb2.Handler(name="t", resume=LATEST), "handlers[0].resume is set on 't', a task handler"),
    (apps_pb2.Handler(name="w", kind=7), "handlers[0].kind must be HANDLER_KIND_TASK or HANDLER_KIND_WORKFLOW"),
    (apps_pb2.Handler(name="w", kind=WORKFLOW, resume=9), "handlers[0].resume must be WORKFLOW_RESUME_LATEST"),
    # (stored as latest it would silently change meaning: refused until pinned resume exists)
    (apps_pb2.Handler(name="w", kind=WORKFLOW, resume=apps_pb2.WORKFLOW_RESUME_PINNED),
     "handlers[0].resume: resume='pinned' is not available yet: a resumed run executes the active deployment; "
     "use resume='latest' and ctx.version() to change code under live runs"),
])
async def test_bad_kinds_are_refused_at_deploy(env, handler, needle):
    t = await env.new_tenant(f"wf-bad-{handler.kind}-{handler.resume}")
    with pytest.raises(grpc.aio.AioRpcError) as e:
        await env.deploy(t.api_key, handlers=[handler])
    assert e.value.code() == grpc.StatusCode.INVALID_ARGUMENT and needle in e.value.details()


async def test_a_schedule_of_a_workflow_is_refused_for_now(env, app):
    """Schedules enqueue tasks (EnqueueScheduled): a workflow's name in a template is refused at
    create, naming the field, and reaches neither cron nor history."""
    before = (len(env.history.calls), len(env.cron.calls))
    r = await env.http.post("/v1/schedules", json={"cron": "*/5 * * * *", "task_template": {"task_type": "onboard"}},
                            headers=_auth(app))
    assert r.status_code == 400, r.text
    assert "task_template.task_type 'onboard' is a workflow" in r.json()["error"]["message"]
    assert (len(env.history.calls), len(env.cron.calls)) == before
