"""The gateway against the real history service (a separate process) and
real shard databases: the enqueue path as customers use it, the search merged
across real shards, and scheduled slots deduplicated by the real key index."""

from __future__ import annotations

import asyncio
import datetime as dt
import json
import pathlib
import subprocess
import sys
import time
from itertools import pairwise

import asyncpg
import grpc
import httpx
import pytest
import pytest_asyncio
from google.protobuf import json_format
from grpc_health.v1 import health_pb2, health_pb2_grpc

from ratchet.api.tasks.v1 import tasks_pb2, tasks_pb2_grpc
from ratchet.api.tenants.v1 import tenants_pb2, tenants_pb2_grpc
from ratchet.internal.gateway.v1 import control_pb2, control_pb2_grpc
from ratchet.libs.pg.cluster import free_port
from ratchet.libs.shardmap import ShardMap, new_task_id

from .conftest import ADMIN_KEY, HOST_TOKEN, Env, make_bundle, start_gateway

pytestmark = pytest.mark.timeout(90)
HISTORY_MAIN = pathlib.Path(__file__).resolve().parents[3] / "services" / "history" / "__main__.py"
SHARDS = [0, 1]


def _wait_serving(port: int, proc: subprocess.Popen, log: pathlib.Path, timeout: float = 30) -> None:
    deadline = time.monotonic() + timeout
    with grpc.insecure_channel(f"127.0.0.1:{port}") as ch:
        stub = health_pb2_grpc.HealthStub(ch)
        while time.monotonic() < deadline:
            if proc.poll() is not None:
                raise RuntimeError(f"history exited with {proc.returncode}: {log.read_text()[-3000:]}")
            try:
                status = stub.Check(health_pb2.HealthCheckRequest(), timeout=1).status
                if status == health_pb2.HealthCheckResponse.SERVING:
                    return
            except grpc.RpcError:
                pass
            time.sleep(0.1)
    raise TimeoutError("history did not report SERVING within 30 s")


@pytest_asyncio.fixture(scope="module")
async def real(pg_cluster, tmp_path_factory):
    if not HISTORY_MAIN.exists():
        pytest.skip("services/history has no __main__.py yet")
    tag = free_port()
    shards = {}
    for s in SHARDS:
        pg_cluster.create_database(f"gwh_shard{s}_{tag}")
        shards[str(s)] = pg_cluster.dsn(f"gwh_shard{s}_{tag}")
    pg_cluster.create_database(f"gwh_control_{tag}")
    tmp = tmp_path_factory.mktemp("gw-history")
    hport = free_port()
    cfg = tmp / "history.json"
    cfg.write_text(json.dumps({"shards": shards, "grpc_port": hport}))
    # A log file, not a pipe: an unread pipe that fills up stalls the process.
    # The child keeps its own descriptor of the log: ours closes once it is started.
    with open(tmp / "history.log", "w") as log:
        proc = subprocess.Popen([sys.executable, "-m", "ratchet.services.history", "--config", str(cfg)],
                                stdout=log, stderr=subprocess.STDOUT, text=True)
    gw = None
    try:
        await asyncio.to_thread(_wait_serving, hport, proc, tmp / "history.log")
        gw = await start_gateway(pg_cluster.dsn(f"gwh_control_{tag}"), hport, str(tmp / "blobs"), shard_ids=SHARDS)
        channel = grpc.aio.insecure_channel(f"127.0.0.1:{gw.grpc_port}")
        http = httpx.AsyncClient(base_url=f"http://127.0.0.1:{gw.rest_port}", timeout=30)
        e = Env(gw, None, channel, http, "", "", "", pg_cluster, str(tmp / "blobs"))
        t = await tenants_pb2_grpc.TenantServiceStub(channel).CreateTenant(
            tenants_pb2.CreateTenantRequest(name="real-co"), metadata=e.md(ADMIN_KEY), timeout=10)
        e.api_key, e.tenant_id, e.app_id = t.api_key, t.tenant_id, t.app_id
        await e.deploy(t.api_key)
        yield e
        await http.aclose()
        await channel.close()
    finally:
        if gw is not None:
            await gw.stop(grace=1)
        proc.terminate()
        try:
            proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=10)


async def test_enqueue_get_cancel_round_trip(real):
    r = await real.http.post("/v1/tasks", json={"task_type": "resize", "payload": {"w": 640},
                                                "timeouts": {"schedule_to_close": "3600s"}}, headers=real.auth())
    assert r.status_code == 200, r.text
    task_id = r.json()["task_id"]
    task = (await real.http.get(f"/v1/tasks/{task_id}", headers=real.auth())).json()["task"]
    assert task["state"] == "TASK_STATE_ENQUEUED" and task["payload"] == {"w": 640}
    assert task["max_attempts"] == 3 and task["task_type"] == "resize"
    c = (await real.http.post(f"/v1/tasks/{task_id}/cancel", headers=real.auth())).json()
    assert c["state"] == "TASK_STATE_CANCELED"


async def test_fifty_concurrent_keyed_enqueues_make_one_task(real):
    body = {"task_type": "send", "payload": {"to": "a@b.c"}, "idempotency_key": "welcome-1"}
    answers = await asyncio.gather(*(real.http.post("/v1/tasks", json=body, headers=real.auth())
                                     for _ in range(50)))
    assert all(a.status_code == 200 for a in answers), [a.text for a in answers if a.status_code != 200][:3]
    ids = {a.json()["task_id"] for a in answers}
    assert len(ids) == 1
    assert sum(not a.json()["deduplicated"] for a in answers) == 1
    conflict = await real.http.post("/v1/tasks", json={**body, "payload": {"to": "x@y.z"}}, headers=real.auth())
    assert conflict.status_code == 409 and conflict.json()["error"]["original_task_id"] == ids.pop()


async def test_a_caller_minted_task_id_dedupes_its_resends_and_is_nobody_elses(real):
    """The SDK's plain enqueue: a task id minted per call makes every resend (single, stream,
    batch, REST) return the one task, with no idempotency key row; the id stays the task's."""
    from ratchet.aio import AsyncClient
    task_id = new_task_id()
    body = {"task_type": "send", "payload": {"n": 1}, "task_id": task_id}
    answers = await asyncio.gather(*(real.http.post("/v1/tasks", json=body, headers=real.auth())
                                     for _ in range(20)))
    assert all(a.status_code == 200 for a in answers), [a.text for a in answers if a.status_code != 200][:3]
    assert {a.json()["task_id"] for a in answers} == {task_id}
    assert sum(not a.json()["deduplicated"] for a in answers) == 1
    async with AsyncClient(f"127.0.0.1:{real.gateway.grpc_port}", real.api_key) as client:
        again = await client.send_enqueue(json_format.ParseDict(body, tasks_pb2.EnqueueTaskRequest()))
        assert again.task_id == task_id and again.deduplicated
        minted = await asyncio.gather(*(client.enqueue("send", {"i": i}) for i in range(10)))
        assert len(set(minted)) == 10
    batch = await real.http.post("/v1/tasks:batch", json={"tasks": [body, {"task_type": "send"}]},
                                 headers=real.auth())
    assert batch.status_code == 200 and batch.json()["task_ids"][0] == task_id
    task = (await real.http.get(f"/v1/tasks/{task_id}", headers=real.auth())).json()["task"]
    assert task["payload"] == {"n": 1} and not task.get("idempotency_key")
    # Not a key: no row in the key table for it (the shard's database, found by name).
    shard = ShardMap.even(SHARDS).shard_for_task(task_id)
    admin = await asyncpg.connect(real.cluster.dsn("postgres"))
    try:
        names = await admin.fetch("SELECT datname FROM pg_database WHERE datname LIKE $1", f"gwh_shard{shard}_%")
    finally:
        await admin.close()
    assert names
    for row in names:
        conn = await asyncpg.connect(real.cluster.dsn(row["datname"]))
        try:
            assert await conn.fetchval("SELECT count(*) FROM idempotency_keys WHERE task_id = $1::uuid",
                                       task_id) == 0
        finally:
            await conn.close()
    # The id is the task's: another type, or another tenant, may not take it (and learns nothing).
    other_type = await real.http.post("/v1/tasks", json={**body, "task_type": "resize"}, headers=real.auth())
    assert other_type.status_code == 400 and "already taken" in other_type.json()["error"]["message"]
    t = await real.new_tenant("id-squatter")
    await real.deploy(t.api_key)
    squat = await real.http.post("/v1/tasks", json=body, headers=real.auth(t.api_key))
    assert squat.status_code == 400 and "already taken" in squat.json()["error"]["message"]
    assert (await real.http.get(f"/v1/tasks/{task_id}", headers=real.auth(t.api_key))).status_code == 404


async def test_a_malformed_or_doubled_task_id_is_refused_and_writes_nothing(real):
    r = await real.http.post("/v1/tasks", json={"task_type": "send", "task_id": "not-a-uuid"}, headers=real.auth())
    assert r.status_code == 400 and "not a Ratchet task id" in r.json()["error"]["message"]
    v4 = "6f1c1f1e-8a43-4a8e-9a51-5b7f3f9d2c10"
    r = await real.http.post("/v1/tasks", json={"task_type": "send", "task_id": v4}, headers=real.auth())
    assert r.status_code == 400 and "UUIDv8" in r.json()["error"]["message"]
    both = {"task_type": "send", "task_id": new_task_id(), "idempotency_key": "k-both"}
    r = await real.http.post("/v1/tasks", json=both, headers=real.auth())
    assert r.status_code == 400 and "exclusive" in r.json()["error"]["message"]
    twice = new_task_id()
    r = await real.http.post("/v1/tasks:batch", json={"tasks": [{"task_type": "send", "task_id": twice}] * 2},
                             headers=real.auth())
    assert r.status_code == 400 and "share task_id" in r.json()["error"]["message"]
    for tid in (both["task_id"], twice):
        assert (await real.http.get(f"/v1/tasks/{tid}", headers=real.auth())).status_code == 404


async def test_batch_of_1000_lands_in_order_a_shard_per_hundred_and_calls_spread(real):
    items = [{"task_type": "send", "payload": i} for i in range(1000)]
    r = await real.http.post("/v1/tasks:batch", json={"tasks": items}, headers=real.auth())
    assert r.status_code == 200, r.text
    ids = r.json()["task_ids"]
    shard_of = ShardMap.even(SHARDS).shard_for_task
    assert all(len({shard_of(i) for i in ids[k:k + 100]}) == 1 for k in range(0, 1000, 100))  # a slot per 100
    for i in (0, 499, 999):
        got = (await real.http.get(f"/v1/tasks/{ids[i]}", headers=real.auth())).json()["task"]
        assert got["payload"] == i
    shards = set()
    for _ in range(40):
        r = await real.http.post("/v1/tasks:batch", json={"tasks": items[:2]}, headers=real.auth())
        shards |= {ShardMap.even(SHARDS).shard_for_task(i) for i in r.json()["task_ids"]}
    assert shards == set(SHARDS)


async def test_a_batch_that_differs_per_item_keeps_each_items_own_fields(real):
    """A batch call sends what its items share once (CreateTasksRequest.shared) and the rest
    per item: types with different handler policies, a queue, an override, a delay and a key
    each land on their own task through the real history."""
    items = [{"task_type": "send", "payload": 0}, {"task_type": "resize", "payload": 1},
             {"task_type": "send", "payload": 2, "queue": "q2"},
             {"task_type": "send", "payload": 3, "retry": {"max_attempts": 9}},
             {"task_type": "send", "payload": 4, "delay": "60s"},
             {"task_type": "send", "payload": 5, "idempotency_key": f"mixed-{time.time_ns()}"}]
    r = await real.http.post("/v1/tasks:batch", json={"tasks": items}, headers=real.auth())
    assert r.status_code == 200, r.text
    got = [(await real.http.get(f"/v1/tasks/{i}", headers=real.auth())).json()["task"]
           for i in r.json()["task_ids"]]
    assert [g["payload"] for g in got] == [0, 1, 2, 3, 4, 5]
    assert [g["task_type"] for g in got] == ["send", "resize", "send", "send", "send", "send"]
    assert [g["queue"] for g in got] == ["default", "default", "q2", "default", "default", "default"]
    assert [g["max_attempts"] for g in got] == [5, 3, 5, 9, 5, 5]
    runs = [dt.datetime.fromisoformat(g["run_at"].replace("Z", "+00:00")) for g in got]
    made = [dt.datetime.fromisoformat(g["created_at"].replace("Z", "+00:00")) for g in got]
    assert [(a - b).total_seconds() > 30 for a, b in zip(runs, made, strict=True)] == [False] * 4 + [True, False]


async def test_an_sdk_batch_goes_as_columns_and_its_resend_returns_the_same_tasks(real):
    """The SDK's enqueue_batch (payload_json, minted ids: CreateTasksRequest.columns through the
    real history): payloads land as sent; sent again (a lost answer) the same ids come back,
    each deduplicated by history's per-task path; half old, half new keeps the request order."""
    from ratchet.client import batch_request
    reqs = list(batch_request([{"task_type": "send", "payload": {"i": i, "big": 2 ** 60 + i}}
                                for i in range(150)]).tasks)
    assert all(r.payload_json and not r.HasField("payload") for r in reqs)
    stub = tasks_pb2_grpc.TaskServiceStub(real.channel)
    first = await stub.EnqueueTasks(tasks_pb2.EnqueueTasksRequest(tasks=reqs), metadata=real.md(real.api_key),
                                    timeout=30)
    ids = list(first.task_ids)
    assert ids == [r.task_id for r in reqs]
    for i in (0, 99, 100, 149):
        got = (await real.http.get(f"/v1/tasks/{ids[i]}", headers=real.auth())).json()["task"]
        assert got["payload"] == {"i": i, "big": float(2 ** 60 + i)} and got["state"] == "TASK_STATE_ENQUEUED"
        assert got["queue"] == "default" and got["max_attempts"] == 5
    again = await stub.EnqueueTasks(tasks_pb2.EnqueueTasksRequest(tasks=reqs), metadata=real.md(real.api_key),
                                    timeout=30)
    assert list(again.task_ids) == ids
    fresh = list(batch_request([{"task_type": "send", "payload": "new"}] * 2).tasks)
    mixed = [reqs[0], fresh[0], reqs[1], fresh[1]]
    r = await stub.EnqueueTasks(tasks_pb2.EnqueueTasksRequest(tasks=mixed), metadata=real.md(real.api_key),
                                timeout=30)
    assert list(r.task_ids) == [t.task_id for t in mixed]
    assert (await real.http.get(f"/v1/tasks/{fresh[1].task_id}", headers=real.auth())).json()["task"]["payload"] \
        == "new"


async def test_payload_json_over_rest_and_its_errors(real):
    ok = await real.http.post("/v1/tasks:batch", headers=real.auth(), json={"tasks": [
        {"task_type": "send", "payload_json": '{"a": [1, 2]}'}, {"task_type": "send", "payload_json": "7"}]})
    assert ok.status_code == 200, ok.text
    got = (await real.http.get(f"/v1/tasks/{ok.json()['task_ids'][0]}", headers=real.auth())).json()["task"]
    assert got["payload"] == {"a": [1, 2]}
    for body, needle in (({"task_type": "send", "payload_json": "{nope"}, "tasks[1].payload_json must be one JSON"),
                         ({"task_type": "send", "payload_json": "NaN"}, "NaN is not JSON"),
                         ({"task_type": "send", "payload_json": "1", "payload": 1}, "are exclusive")):
        tid = new_task_id()
        r = await real.http.post("/v1/tasks:batch", headers=real.auth(), json={"tasks": [
            {"task_type": "send", "task_id": tid, "payload_json": "1"}, {**body, "task_id": new_task_id()}]})
        assert r.status_code == 400 and needle in r.json()["error"]["message"], r.text
        assert (await real.http.get(f"/v1/tasks/{tid}", headers=real.auth())).status_code == 404


async def test_unknown_id_is_404(real):
    r = await real.http.get(f"/v1/tasks/{new_task_id()}", headers=real.auth())
    assert r.status_code == 404


async def test_list_tasks_pages_the_real_shards_exactly_once_in_order(real):
    t = await real.new_tenant("real-search")
    await real.deploy(t.api_key)
    items = [{"task_type": "send" if i % 3 else "resize", "payload": i} for i in range(30)]
    ids = (await real.http.post("/v1/tasks:batch", json={"tasks": items}, headers=real.auth(t.api_key))).json()
    ids = ids["task_ids"]
    for task_id in ids[:7]:
        await real.http.post(f"/v1/tasks/{task_id}/cancel", headers=real.auth(t.api_key))
    got, token, pages = [], "", 0
    while True:
        r = await real.http.get("/v1/tasks", params={"page_size": 4, **({"page_token": token} if token else {})},
                                headers=real.auth(t.api_key))
        assert r.status_code == 200, r.text
        got += r.json()["tasks"]
        token, pages = r.json()["next_page_token"], pages + 1
        if not token:
            break
    assert sorted(x["task_id"] for x in got) == sorted(ids) and pages >= 8
    keys = [(x.get("finished_at") if x["state"] == "TASK_STATE_CANCELED" else x["created_at"], x["task_id"])
            for x in got]
    assert all(_instant(a[0]) > _instant(b[0]) or (a[0] == b[0] and a[1] > b[1]) for a, b in pairwise(keys))
    canceled = await real.http.get("/v1/tasks", params={"state": "CANCELED"}, headers=real.auth(t.api_key))
    assert sorted(x["task_id"] for x in canceled.json()["tasks"]) == sorted(ids[:7])
    dry = await real.http.post("/v1/tasks:cancel", json={"dry_run": True, "filter": {"task_type": "send"}},
                               headers=real.auth(t.api_key))
    assert dry.status_code == 200 and dry.json()["matched"] == str(sum(1 for i in range(7, 30) if i % 3))


def _instant(text: str) -> dt.datetime:
    return dt.datetime.fromisoformat(text.replace("Z", "+00:00"))


async def test_enqueue_scheduled_is_one_task_per_slot_on_the_real_shards(real):
    req = control_pb2.EnqueueScheduledRequest(tenant_id=real.tenant_id, app_id=real.app_id, schedule_id="sched-1",
                                              task=json_format.ParseDict({"task_type": "send", "payload": 1},
                                                                         tasks_pb2.EnqueueTaskRequest()))
    req.scheduled_time.FromJsonString("2026-11-30T02:00:00Z")
    stub = control_pb2_grpc.ControlServiceStub(real.channel)
    md = (("authorization", f"Bearer {HOST_TOKEN}"),)
    a, b = await asyncio.gather(*(stub.EnqueueScheduled(req, metadata=md, timeout=10) for _ in range(2)))
    assert a.task_id == b.task_id and sorted([a.deduplicated, b.deduplicated]) == [False, True]
    task = (await real.http.get(f"/v1/tasks/{a.task_id}", headers=real.auth())).json()["task"]
    assert task["schedule_id"] == "sched-1" and task["scheduled_time"] == "2026-11-30T02:00:00Z"
    assert task["idempotency_key"] == "sched:sched-1@2026-11-30T02:00:00Z"


async def test_columns_land_as_sent_resend_the_same_tasks_and_the_gateway_mints_missing_ids(real):
    """EnqueueTasksRequest.columns through the real history: payloads and queue as sent, ids
    as the caller minted them (a resend answers the same tasks), or minted by the gateway."""
    from ratchet.client import batch_request
    req = batch_request([{"task_type": "send", "payload": {"i": i}, "queue": "cols"} for i in range(150)],
                        columns=True)
    assert req.HasField("columns") and not req.tasks and len(req.columns.task_ids) == 150
    stub = tasks_pb2_grpc.TaskServiceStub(real.channel)
    first = await stub.EnqueueTasks(req, metadata=real.md(real.api_key), timeout=30)
    ids = list(first.task_ids)
    assert ids == list(req.columns.task_ids)
    for i in (0, 100, 149):
        got = (await real.http.get(f"/v1/tasks/{ids[i]}", headers=real.auth())).json()["task"]
        assert got["payload"] == {"i": i} and got["queue"] == "cols" and got["state"] == "TASK_STATE_ENQUEUED"
    again = await stub.EnqueueTasks(req, metadata=real.md(real.api_key), timeout=30)
    assert list(again.task_ids) == ids
    # Over REST, without ids: one task per payload, ids minted by the gateway; "" is null.
    r = await real.http.post("/v1/tasks:batch", headers=real.auth(), json={
        "columns": {"task_type": "send", "payloads_json": ['{"a": 1}', "", "[2]"]}})
    assert r.status_code == 200, r.text
    minted = r.json()["task_ids"]
    assert len(set(minted)) == 3
    payloads = [(await real.http.get(f"/v1/tasks/{t}", headers=real.auth())).json()["task"].get("payload")
                for t in minted]
    assert payloads == [{"a": 1}, None, [2]]


async def test_bad_columns_are_refused_whole_naming_the_field(real):
    tid = new_task_id()
    good = {"task_type": "send", "task_ids": [tid, new_task_id()], "payloads_json": ["1", "2"]}
    cases = [
        ({**good, "task_type": "nope"}, 400, "columns.task_type 'nope' is not registered"),
        ({**good, "task_type": ""}, 400, "columns.task_type is required"),
        ({**good, "queue": "bad queue!"}, 400, "columns.queue must be"),
        ({**good, "payloads_json": ["1"]}, 400, "2 task_ids and 1 payloads_json"),
        ({**good, "task_ids": [tid, "not-an-id"]}, 400, "columns.task_ids[1] 'not-an-id' is not a Ratchet task id"),
        ({**good, "task_ids": [tid, tid]}, 400, "columns.task_ids[0] and columns.task_ids[1] are the same"),
        ({**good, "payloads_json": ["1", "{nope"]}, 400, "columns.payloads_json[1] must be one JSON value"),
        ({**good, "payloads_json": ["1", "x" * (300 * 1024)]}, 413, "columns.payloads_json[1] is 307200 bytes"),
        ({"task_type": "send"}, 400, "columns is empty"),
        ({"task_type": "send", "payloads_json": ["1"] * 1001}, 400, "at most 1000 tasks, got 1001"),
    ]
    for cols, status, needle in cases:
        r = await real.http.post("/v1/tasks:batch", headers=real.auth(), json={"columns": cols})
        assert r.status_code == status and needle in r.json()["error"]["message"], (cols.get("task_type"), r.text)
    r = await real.http.post("/v1/tasks:batch", headers=real.auth(), json={
        "columns": good, "tasks": [{"task_type": "send"}]})
    assert r.status_code == 400 and "tasks and columns are exclusive" in r.json()["error"]["message"]
    assert (await real.http.get(f"/v1/tasks/{tid}", headers=real.auth())).status_code == 404  # nothing written
    ok = await real.http.post("/v1/tasks:batch", headers=real.auth(), json={"columns": good})
    assert ok.status_code == 200 and ok.json()["task_ids"] == good["task_ids"]


async def test_the_deploy_preflight_counts_the_real_shards_live_tasks_of_a_dropped_handler(real):
    """Three live `sweep` tasks (one delayed an hour) and one canceled, spread over the real
    shards: a deploy without `sweep` is refused naming it with 3, and leaves the active
    deployment as it was; with allow_dropping_live_handlers it deploys."""
    from ratchet.api.apps.v1 import apps_pb2
    t = await real.new_tenant("preflight-real-co")
    first = [apps_pb2.Handler(name="send"), apps_pb2.Handler(name="sweep")]
    await real.deploy(t.api_key, handlers=first, files={"app.py": b"# preflight v1\n"})
    ids = []
    for body in ({}, {}, {"delay": "3600s"}, {}):
        r = await real.http.post("/v1/tasks", json={"task_type": "sweep", **body}, headers=real.auth(t.api_key))
        assert r.status_code == 200, r.text
        ids.append(r.json()["task_id"])
    assert (await real.http.post(f"/v1/tasks/{ids[-1]}/cancel", headers=real.auth(t.api_key))).status_code == 200
    assert {ShardMap.even(SHARDS).shard_for_task(i) for i in ids} == set(SHARDS)
    with pytest.raises(grpc.aio.AioRpcError) as e:
        await real.deploy(t.api_key, handlers=[apps_pb2.Handler(name="send")], files={"app.py": b"# v2\n"})
    assert e.value.code() == grpc.StatusCode.FAILED_PRECONDITION and "'sweep' (3 live)" in e.value.details()
    r = await real.http.post("/v1/tasks", json={"task_type": "sweep"}, headers=real.auth(t.api_key))
    assert r.status_code == 200, r.text  # (still the first deployment: nothing was activated)
    dep = await real.apps.CreateDeployment(apps_pb2.CreateDeploymentRequest(
        app="default", bundle=make_bundle({"app.py": b"# v2\n"})[0], digest=make_bundle({"app.py": b"# v2\n"})[1],
        handlers=[apps_pb2.Handler(name="send")], allow_dropping_live_handlers=True),
        metadata=real.md(t.api_key), timeout=10)
    assert dep.deployment.created and [h.name for h in dep.deployment.handlers] == ["send"]
