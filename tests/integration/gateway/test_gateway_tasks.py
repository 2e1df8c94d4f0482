"""The task API end to end through the gateway (REST and gRPC), against a
real control database and a fake history service."""

from __future__ import annotations

import grpc
import httpx
import pytest
from google.protobuf import json_format

from ratchet.api.tasks.v1 import tasks_pb2
from ratchet.libs.pg.cluster import free_port
from ratchet.libs.shardmap import ShardMap, new_task_id, slot_for_key, slot_of
from ratchet.services.gateway import enqueue as gw_enqueue

from .conftest import SHARDS, start_gateway

pytestmark = pytest.mark.timeout(60)


async def test_missing_or_bad_key_is_401(env):
    for headers in ({}, {"Authorization": "Bearer rk_nope"}, {"Authorization": "Basic xyz"}):
        r = await env.http.post("/v1/tasks", json={"task_type": "send"}, headers=headers)
        assert r.status_code == 401, r.text
        assert r.json()["error"]["code"] == "UNAUTHENTICATED"
    with pytest.raises(grpc.aio.AioRpcError) as e:
        await env.tasks.EnqueueTask(tasks_pb2.EnqueueTaskRequest(task_type="send"), metadata=env.md("rk_bad"),
                                    timeout=5)
    assert e.value.code() == grpc.StatusCode.UNAUTHENTICATED and "unknown or revoked" in e.value.details()


@pytest.mark.parametrize("body, needle", [
    ({"task_type": "send", "bogus": 1}, "bogus"),
    ({"task_type": "nope"}, "registered types: resize, send"),
    ({"task_type": "send", "queue": "has space"}, "queue"),
    ({"task_type": "send", "delay": "1s", "run_at": "2030-01-01T00:00:00Z"}, "exclusive"),
    ({"task_type": "send", "delay": "-3s"}, "delay must be >= 0"),
    ({"task_type": "send", "idempotency_key": "k" * 201}, "idempotency_key"),
    ({"task_type": "send", "retry": {"max_attempts": 0}}, "max_attempts"),
    ({"task_type": "send", "retry": {"factor": 20}}, "factor"),
    ({"task_type": "send", "retry": {"base": "9s", "cap": "2s"}}, "cap"),
    ({"task_type": "send", "timeouts": {"start_to_close": "0s"}}, "start_to_close"),
    ({"task_type": "send", "delay": "soon"}, "delay"),
    (["not", "an", "object"], "JSON object"),
])
async def test_bad_input_is_400_and_sends_nothing(env, body, needle):
    before = len(env.history.calls)
    r = await env.http.post("/v1/tasks", json=body, headers=env.auth())
    assert r.status_code == 400, r.text
    err = r.json()["error"]
    assert err["code"] == "INVALID_ARGUMENT" and err["http_status"] == 400 and needle in err["message"]
    assert len(env.history.calls) == before


async def test_invalid_json_is_400(env):
    r = await env.http.post("/v1/tasks", content=b"{nope", headers={**env.auth(), "Content-Type": "application/json"})
    assert r.status_code == 400 and "not valid JSON" in r.json()["error"]["message"]


async def test_oversize_payload_is_413_and_writes_nothing(env):
    before = len(env.history.calls)
    big = "x" * (262144 - 1)  # + 2 quotes = 256 KiB + 1 as JSON
    r = await env.http.post("/v1/tasks", json={"task_type": "send", "payload": big}, headers=env.auth())
    assert r.status_code == 413, r.text
    assert "262145 bytes" in r.json()["error"]["message"]
    req = tasks_pb2.EnqueueTaskRequest(task_type="send")
    req.payload.string_value = big
    with pytest.raises(grpc.aio.AioRpcError) as e:
        await env.tasks.EnqueueTask(req, metadata=env.md(), timeout=5)
    assert e.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
    assert len(env.history.calls) == before
    ok = await env.http.post("/v1/tasks", json={"task_type": "send", "payload": big[:-1]}, headers=env.auth())
    assert ok.status_code == 200, ok.text


async def test_request_body_over_8_mib_is_413_before_parsing(env):
    r = await env.http.post("/v1/tasks", content=b"[" * (8 * 1024 * 1024 + 1), headers=env.auth())
    assert r.status_code == 413


async def test_enqueue_resolves_policy_and_canonical_payload(env):
    r = await env.http.post("/v1/tasks", json={"task_type": "resize", "payload": {"b": 2, "a": 1.0},
                                               "retry": {"factor": 3}}, headers=env.auth())
    assert r.status_code == 200, r.text
    task_id = r.json()["task_id"]
    (req,) = [c for n, c in env.history.calls if n == "CreateTasks" and c.tasks[0].task_id == task_id]
    t = req.tasks[0]
    assert req.shard_id == ShardMap.even(SHARDS).shard_for_task(task_id)
    assert t.payload_json == b'{"a":1,"b":2}' and t.queue == "default" and t.tenant_id == env.tenant_id
    assert t.retry.max_attempts == 3 and t.retry.factor == 3.0 and t.retry.cap.seconds == 3600
    assert t.timeouts.start_to_close.seconds == 600
    assert t.fingerprint == ""  # only a keyed request carries one (it is compared with the key's owner)
    r = await env.http.post("/v1/tasks", json={"task_type": "resize", "payload": {"b": 2, "a": 1.0},
                                               "idempotency_key": "fp-1"}, headers=env.auth())
    assert r.status_code == 200, r.text
    (req,) = [c for n, c in env.history.calls if n == "CreateTasks" and c.tasks[0].task_id == r.json()["task_id"]]
    assert req.tasks[0].fingerprint.startswith("sha256:")


async def test_batch_of_1000_ok_in_request_order_each_hundred_on_one_shard(env):
    """The ids the gateway mints for one call share a slot per run of 100: a call of 100 is one
    CreateTasks to one shard, a call of 1,000 is ten runs spread over the shards."""
    before = len(env.history.calls)
    items = [{"task_type": "send", "payload": {"i": i}} for i in range(1000)]
    r = await env.http.post("/v1/tasks:batch", json={"tasks": items[:100]}, headers=env.auth())
    assert r.status_code == 200, r.text
    assert [n for n, _ in env.history.calls[before:]] == ["CreateTasks"]
    r = await env.http.post("/v1/tasks:batch", json={"tasks": items}, headers=env.auth())
    assert r.status_code == 200, r.text
    ids = r.json()["task_ids"]
    assert len(ids) == 1000 and len(set(ids)) == 1000
    shard_map = ShardMap.even(SHARDS)
    runs = [{slot_of(i) for i in ids[k:k + 100]} for k in range(0, 1000, 100)]
    assert all(len(run) == 1 for run in runs) and len(set().union(*runs)) >= 8  # random slots
    assert len({shard_map.shard_for_task(i) for i in ids}) > 1
    for i, task_id in enumerate(ids):
        assert env.history.tasks[task_id].payload_json == f'{{"i":{i}}}'.encode()
    # Another call's ids take another random slot: over calls the shards all get work.
    shards = set()
    for _ in range(40):
        r = await env.http.post("/v1/tasks:batch", json={"tasks": items[:2]}, headers=env.auth())
        shards |= {shard_map.shard_for_task(i) for i in r.json()["task_ids"]}
    assert shards == set(SHARDS)


async def test_a_large_batch_goes_to_its_shard_in_calls_of_bounded_size_in_request_order(env, monkeypatch):
    """One shard's part of a call is cut so no internal message nears the 64 MiB limit."""
    monkeypatch.setattr(gw_enqueue, "CREATE_CHUNK_BYTES", 40_000)
    before = len(env.history.calls)
    items = [{"task_type": "send", "payload": {"i": i, "pad": "x" * 9_000}} for i in range(12)]
    r = await env.http.post("/v1/tasks:batch", json={"tasks": items}, headers=env.auth())
    assert r.status_code == 200, r.text
    ids = r.json()["task_ids"]
    calls = [c for n, c in env.history.calls[before:] if n == "CreateTasks"]
    assert len({c.shard_id for c in calls}) == 1 and [len(c.tasks) for c in calls] == [4, 4, 4]
    assert [t.task_id for c in calls for t in c.tasks] == ids
    for i, task_id in enumerate(ids):
        assert f'"i":{i},'.encode() in env.history.tasks[task_id].payload_json


async def test_a_plain_batch_goes_per_shard_in_bounded_calls_and_answers_in_request_order(env, monkeypatch):
    """A plain batch (ids and payload_json only: the columns path) with ids on every shard and
    payloads big enough to cut one shard's part: one call per chunk, every task as sent, the
    ids back in request order (the fake records the columns as tasks)."""
    monkeypatch.setattr(gw_enqueue, "CREATE_CHUNK_BYTES", 40_000)
    shard_map = ShardMap.even(SHARDS)
    slots = {}
    for slot in range(0, 65536, 97):
        slots.setdefault(shard_map.shard_for_slot(slot), slot)
    order = sorted(slots) * 6  # six tasks per shard, interleaved
    pad = "x" * 9_000
    items = [{"task_type": "send", "task_id": new_task_id(slots[s]), "payload_json": f'{{"i": {i}, "pad": "{pad}"}}'}
             for i, s in enumerate(order)]
    before = len(env.history.calls)
    r = await env.http.post("/v1/tasks:batch", json={"tasks": items}, headers=env.auth())
    assert r.status_code == 200, r.text
    assert r.json()["task_ids"] == [it["task_id"] for it in items]
    calls = [c for n, c in env.history.calls[before:] if n == "CreateTasks"]
    per_shard = {}
    for c in calls:
        per_shard.setdefault(c.shard_id, []).append([t.task_id for t in c.tasks])
    assert sorted(per_shard) == sorted(SHARDS)
    for s, chunks in per_shard.items():
        assert [len(c) for c in chunks] == [4, 2]  # (40 kB: four 9 kB payloads and their overhead)
        assert [i for c in chunks for i in c] == [it["task_id"] for it, o in zip(items, order, strict=True) if o == s]
    for it in items:
        stored = env.history.tasks[it["task_id"]]
        assert stored.payload_json == it["payload_json"].encode() and stored.task_type == "send"
        assert stored.retry.max_attempts == 5 and stored.queue == "default"


async def test_batch_with_ids_and_keys_of_every_shard_is_one_call_per_shard_in_request_order(env):
    shard_map = ShardMap.even(SHARDS)
    slots = {}
    for slot in range(0, 65536, 97):  # a caller-minted id on each shard
        slots.setdefault(shard_map.shard_for_slot(slot), slot)
    items = [{"task_type": "send", "task_id": new_task_id(slots[s]), "payload": {"i": i}}
             for i, s in enumerate(sorted(slots))]
    items += [{"task_type": "send", "idempotency_key": f"k-{i}", "payload": {"i": 100 + i}} for i in range(20)]
    before = len(env.history.calls)
    r = await env.http.post("/v1/tasks:batch", json={"tasks": items}, headers=env.auth())
    assert r.status_code == 200, r.text
    ids = r.json()["task_ids"]
    assert ids[:len(slots)] == [it["task_id"] for it in items[:len(slots)]]
    calls = [c for n, c in env.history.calls[before:] if n == "CreateTasks"]
    assert sorted(c.shard_id for c in calls) == sorted(SHARDS)
    for task_id, item in zip(ids, items, strict=True):
        assert env.history.tasks[task_id].payload_json == f'{{"i":{item["payload"]["i"]}}}'.encode()


async def test_batch_of_1001_is_refused_whole(env):
    before = len(env.history.calls)
    items = [{"task_type": "send"} for _ in range(1001)]
    r = await env.http.post("/v1/tasks:batch", json={"tasks": items}, headers=env.auth())
    assert r.status_code == 400 and "at most 1000" in r.json()["error"]["message"]
    bad = [{"task_type": "send"}] * 5 + [{"task_type": "send", "queue": "!"}]
    r = await env.http.post("/v1/tasks:batch", json={"tasks": bad}, headers=env.auth())
    assert r.status_code == 400 and "tasks[5].queue" in r.json()["error"]["message"]
    assert len(env.history.calls) == before


async def test_keyed_enqueue_routes_stably_and_deduplicates(env):
    shard_map = ShardMap.even(SHARDS)
    body = {"task_type": "send", "payload": {"n": 1}, "idempotency_key": "order-42"}
    first = (await env.http.post("/v1/tasks", json=body, headers=env.auth())).json()
    again = (await env.http.post("/v1/tasks", json=body, headers=env.auth())).json()
    assert first == {"task_id": first["task_id"], "deduplicated": False}
    assert again == {"task_id": first["task_id"], "deduplicated": True}
    expected = shard_map.shard_for_slot(slot_for_key(env.tenant_id, "order-42"))
    sent = [c for n, c in env.history.calls if n == "CreateTasks" and c.tasks[0].idempotency_key == "order-42"]
    assert len(sent) == 2 and {c.shard_id for c in sent} == {expected}


async def test_conflicting_reuse_of_a_key_is_409_with_the_original_id(env):
    body = {"task_type": "send", "payload": {"v": 1}, "idempotency_key": "conflict-key"}
    original = (await env.http.post("/v1/tasks", json=body, headers=env.auth())).json()["task_id"]
    r = await env.http.post("/v1/tasks", json={**body, "payload": {"v": 2}}, headers=env.auth())
    assert r.status_code == 409
    err = r.json()["error"]
    assert err["original_task_id"] == original and original in err["message"]
    req = json_format.ParseDict({**body, "payload": {"v": 3}}, tasks_pb2.EnqueueTaskRequest())
    with pytest.raises(grpc.aio.AioRpcError) as e:
        await env.tasks.EnqueueTask(req, metadata=env.md(), timeout=5)
    assert e.value.code() == grpc.StatusCode.ALREADY_EXISTS
    assert ("ratchet-original-task-id", original) in tuple(e.value.trailing_metadata())
    batch = {"tasks": [{"task_type": "send"}, {**body, "payload": {"v": 4}}]}
    r = await env.http.post("/v1/tasks:batch", json=batch, headers=env.auth())
    assert r.status_code == 409 and r.json()["error"]["original_task_id"] == original
    assert "tasks[1]" in r.json()["error"]["message"]


async def test_unknown_and_foreign_ids_are_the_same_404(env):
    other = await env.new_tenant("other-co")
    await env.deploy(other.api_key)
    theirs = (await env.http.post("/v1/tasks", json={"task_type": "send"}, headers=env.auth(other.api_key))).json()
    unknown = new_task_id()
    answers = []
    for task_id in (theirs["task_id"], unknown):
        r = await env.http.get(f"/v1/tasks/{task_id}", headers=env.auth())
        c = await env.http.post(f"/v1/tasks/{task_id}/cancel", headers=env.auth())
        assert r.status_code == 404 and c.status_code == 404
        answers.append(r.json()["error"]["message"].replace(task_id, "ID"))
    assert answers[0] == answers[1] == "task ID not found"
    mine = await env.http.get(f"/v1/tasks/{theirs['task_id']}", headers=env.auth(other.api_key))
    assert mine.status_code == 200


async def test_malformed_task_id_is_400(env):
    for bad in ("not-a-uuid", "123e4567-e89b-12d3-a456-426614174000"):  # the second is a v1 UUID
        r = await env.http.get(f"/v1/tasks/{bad}", headers=env.auth())
        assert r.status_code == 400 and "not a Ratchet task id" in r.json()["error"]["message"]


async def test_get_and_cancel_give_the_same_answer_over_rest_and_grpc(env):
    task_id = (await env.http.post("/v1/tasks", json={"task_type": "send", "payload": [1, "two"]},
                                   headers=env.auth())).json()["task_id"]
    rest = (await env.http.get(f"/v1/tasks/{task_id}", headers=env.auth())).json()
    grpc_resp = await env.tasks.GetTask(tasks_pb2.GetTaskRequest(task_id=task_id), metadata=env.md(), timeout=5)
    assert rest == json_format.MessageToDict(grpc_resp, preserving_proto_field_name=True,
                                             always_print_fields_with_no_presence=True)
    assert rest["task"]["payload"] == [1, "two"] and rest["task"]["state"] == "TASK_STATE_ENQUEUED"
    c = await env.http.post(f"/v1/tasks/{task_id}/cancel", headers=env.auth())
    assert c.json() == {"state": "TASK_STATE_CANCELED", "cancel_requested": False}
    g = await env.tasks.CancelTask(tasks_pb2.CancelTaskRequest(task_id=task_id), metadata=env.md(), timeout=5)
    assert g.state == tasks_pb2.TASK_STATE_CANCELED
    bad_rest = await env.http.post("/v1/tasks", json={"task_type": "nope"}, headers=env.auth())
    with pytest.raises(grpc.aio.AioRpcError) as e:
        await env.tasks.EnqueueTask(tasks_pb2.EnqueueTaskRequest(task_type="nope"), metadata=env.md(), timeout=5)
    assert bad_rest.json()["error"]["message"] == e.value.details()
    assert bad_rest.json()["error"]["code"] == e.value.code().name


async def test_app_without_deployment_is_told_to_deploy(env):
    t = await env.new_tenant("fresh-co")
    r = await env.http.post("/v1/tasks", json={"task_type": "send"}, headers=env.auth(t.api_key))
    assert r.status_code == 400 and "deploy the app first" in r.json()["error"]["message"]


async def test_history_down_is_503_naming_the_shard(env, tmp_path):
    gw = await start_gateway(env.gateway.config.control_dsn, free_port(), str(tmp_path))
    try:
        async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{gw.rest_port}") as http:
            r = await http.post("/v1/tasks", json={"task_type": "send", "idempotency_key": "k1"},
                                headers=env.auth())
            assert r.status_code == 503, r.text
            shard = ShardMap.even(SHARDS).shard_for_slot(slot_for_key(env.tenant_id, "k1"))
            assert f"shard {shard} is unavailable" in r.json()["error"]["message"]
            g = await http.get(f"/v1/tasks/{new_task_id()}", headers=env.auth())
            assert g.status_code == 503
    finally:
        await gw.stop(grace=0)


async def test_slow_history_is_504_and_says_the_outcome_is_unknown(env, tmp_path):
    gw = await start_gateway(env.gateway.config.control_dsn, int(env.gateway.config.history_target.split(":")[1]),
                             str(tmp_path), rpc_timeout_s=0.3)
    env.history.delay_s = 1.0
    try:
        async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{gw.rest_port}") as http:
            r = await http.post("/v1/tasks", json={"task_type": "send"}, headers=env.auth())
        assert r.status_code == 504 and "may have taken effect" in r.json()["error"]["message"]
    finally:
        env.history.delay_s = 0.0
        await gw.stop(grace=0)
