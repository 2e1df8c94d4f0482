"""ListTasks (the dead-letter search) and bulk retry/cancel through the gateway,
over REST and gRPC, against the fake history's four shards."""

from __future__ import annotations

import datetime as dt

import grpc
import pytest
from google.protobuf import json_format

from ratchet.api.tasks.v1 import tasks_pb2
from ratchet.libs.shardmap import ShardMap

from .conftest import SHARDS

pytestmark = pytest.mark.timeout(60)
S = tasks_pb2
UTC = dt.UTC
T0 = dt.datetime(2026, 11, 30, 2, 0, tzinfo=UTC)


@pytest.fixture(scope="module")
def dead(env):
    """57 FAILED "send" tasks spread over every shard (many sharing a finish time),
    plus tasks the searches must not see."""
    ids = []
    for i in range(57):
        ids.append(env.history.add(env.tenant_id, env.app_id, "send", S.TASK_STATE_FAILED,
                                   created=T0, finished=T0 + dt.timedelta(seconds=i // 3),
                                   error_class="ValueError" if i % 2 else "KeyError"))
    env.history.add(env.tenant_id, env.app_id, "resize", S.TASK_STATE_FAILED, created=T0, finished=T0)
    env.history.add(env.tenant_id, env.app_id, "send", S.TASK_STATE_SUCCEEDED, created=T0, finished=T0)
    env.history.add("someone-else", env.app_id, "send", S.TASK_STATE_FAILED, created=T0, finished=T0)
    assert {ShardMap.even(SHARDS).shard_for_task(i) for i in ids} == set(SHARDS)
    newest_first = sorted(ids, key=lambda i: (env.history.rows[i].sort_at, i), reverse=True)
    return newest_first


async def page_all(env, params: dict, max_pages: int = 100) -> list[str]:
    got, token = [], ""
    for _ in range(max_pages):
        r = await env.http.get("/v1/tasks", params={**params, **({"page_token": token} if token else {})},
                               headers=env.auth())
        assert r.status_code == 200, r.text
        body = r.json()
        got += [t["task_id"] for t in body["tasks"]]
        token = body["next_page_token"]
        if not token:
            return got
    raise AssertionError("paging did not end")


async def test_dead_letters_page_across_shards_exactly_once_newest_first(env, dead):
    got = await page_all(env, {"state": "FAILED", "task_type": "send", "page_size": 7})
    assert got == dead
    one = await env.http.get("/v1/tasks", params={"state": "TASK_STATE_FAILED", "task_type": "send",
                                                  "error_class": "ValueError", "page_size": 100},
                             headers=env.auth())
    tasks = one.json()["tasks"]
    assert len(tasks) == 28 and {t["error"]["error_class"] for t in tasks} == {"ValueError"}
    assert tasks[0]["state"] == "TASK_STATE_FAILED" and tasks[0]["attempts"] == []


async def test_rest_and_grpc_give_the_same_page_and_filter_reaches_history(env, dead):
    params = {"state": "FAILED", "task_type": "send", "since": "2026-11-30T02:00:05Z", "page_size": 5}
    rest = (await env.http.get("/v1/tasks", params=params, headers=env.auth())).json()
    req = json_format.ParseDict({**params, "state": "TASK_STATE_FAILED"}, S.ListTasksRequest())
    g = await env.tasks.ListTasks(req, metadata=env.md(), timeout=5)
    assert [t.task_id for t in g.tasks] == [t["task_id"] for t in rest["tasks"]] == dead[:5]
    sent = [c for n, c in env.history.calls if n == "ListTasks"][-len(SHARDS):]
    assert {c.shard_id for c in sent} == set(SHARDS)
    f = sent[0].filter
    assert list(f.states) == [S.TASK_STATE_FAILED] and f.task_type == "send" and sent[0].page_size == 5
    assert f.since.ToJsonString() == "2026-11-30T02:00:05Z" and sent[0].tenant_id == env.tenant_id
    nxt = await env.tasks.ListTasks(S.ListTasksRequest(state=S.TASK_STATE_FAILED, task_type="send",
                                                       since=req.since, page_size=5, page_token=g.next_page_token),
                                    metadata=env.md(), timeout=5)
    assert [t.task_id for t in nxt.tasks] == dead[5:10]


async def test_a_changed_filter_or_a_bad_token_is_400(env, dead):
    first = (await env.http.get("/v1/tasks", params={"state": "FAILED", "page_size": 3},
                                headers=env.auth())).json()
    token = first["next_page_token"]
    changed = await env.http.get("/v1/tasks", params={"state": "FAILED", "task_type": "send", "page_token": token},
                                 headers=env.auth())
    assert changed.status_code == 400 and "page_token does not match the filter" in changed.json()["error"]["message"]
    # The page size may change between pages; the filter may not.
    ok = await env.http.get("/v1/tasks", params={"state": "FAILED", "page_size": 50, "page_token": token},
                            headers=env.auth())
    assert ok.status_code == 200
    bad = await env.http.get("/v1/tasks", params={"page_token": "garbage!"}, headers=env.auth())
    assert bad.status_code == 400 and "page_token is not valid" in bad.json()["error"]["message"]


@pytest.mark.parametrize("params, needle", [
    ({"state": "BROKEN"}, "query parameter state='BROKEN' is not one of"),
    ({"colour": "red"}, "unknown query parameter 'colour'"),
    ({"since": "last week"}, "query parameter since='last week' is not valid"),
    ({"page_size": "0x10"}, "must be an integer"),
    ({"page_size": "501"}, "page_size must be 1..500"),
    ({"task_type": "a b"}, "task_type must be"),
    ({"since": "2026-01-02T00:00:00Z", "until": "2026-01-01T00:00:00Z"}, "must be before until"),
])
async def test_bad_query_parameters_are_400_and_reach_no_shard(env, params, needle):
    before = len(env.history.calls)
    r = await env.http.get("/v1/tasks", params=params, headers=env.auth())
    assert r.status_code == 400, r.text
    assert needle in r.json()["error"]["message"]
    assert len(env.history.calls) == before


async def test_listing_needs_a_key_and_sees_only_the_callers_tasks(env, dead):
    assert (await env.http.get("/v1/tasks")).status_code == 401
    with pytest.raises(grpc.aio.AioRpcError) as e:
        await env.tasks.ListTasks(S.ListTasksRequest(), timeout=5)
    assert e.value.code() == grpc.StatusCode.UNAUTHENTICATED
    other = await env.new_tenant("search-other")
    r = await env.http.get("/v1/tasks", params={"state": "FAILED"}, headers=env.auth(other.api_key))
    assert r.json() == {"tasks": [], "next_page_token": ""}


async def test_a_shard_that_is_down_fails_the_page_with_503_naming_it(env, dead):
    env.history.down = {2}
    try:
        r = await env.http.get("/v1/tasks", params={"state": "FAILED"}, headers=env.auth())
        assert r.status_code == 503, r.text
        err = r.json()["error"]
        assert err["shard_id"] == "2" and "shard 2 did not answer" in err["message"] and "tasks" not in r.json()
        with pytest.raises(grpc.aio.AioRpcError) as e:
            await env.tasks.ListTasks(S.ListTasksRequest(), metadata=env.md(), timeout=5)
        assert e.value.code() == grpc.StatusCode.UNAVAILABLE
        op = await env.http.post("/v1/tasks:retry", json={"request_id": "during-outage"}, headers=env.auth())
        assert op.status_code == 503 and op.json()["error"]["operation_id"].startswith("op_")
    finally:
        env.history.down = set()


async def test_bulk_retry_dry_run_then_operation(env, dead):
    before = len(env.history.calls)
    dry = await env.http.post("/v1/tasks:retry", json={"filter": {"task_type": "send"}, "dry_run": True},
                              headers=env.auth())
    assert dry.status_code == 200 and dry.json() == {"matched": "57"}
    assert [n for n, _ in env.history.calls[before:]] == ["CountTasks"] * len(SHARDS)
    body = {"filter": {"states": ["TASK_STATE_FAILED"]}, "request_id": "retry-1"}
    r = await env.http.post("/v1/tasks:retry", json=body, headers=env.auth())
    assert r.status_code == 200, r.text
    op = r.json()["operation"]
    assert op["operation_id"].startswith("op_") and op["kind"] == "BULK_OPERATION_KIND_RETRY"
    assert op["matched"] == "58" and op["state"] == "BULK_OPERATION_STATE_SUCCEEDED" and r.json()["matched"] == "58"
    starts = [c for n, c in env.history.calls if n == "StartBulkOperation" and c.operation_id == op["operation_id"]]
    assert sorted(c.shard_id for c in starts) == SHARDS
    assert list(starts[0].registered_task_types) == ["resize", "send"]
    again = await env.http.post("/v1/tasks:retry", json=body, headers=env.auth())
    assert again.json()["operation"]["operation_id"] == op["operation_id"]
    got = await env.http.get(f"/v1/operations/{op['operation_id']}", headers=env.auth())
    assert got.status_code == 200 and got.json()["operation"] == op
    g = await env.tasks.GetBulkOperation(S.GetBulkOperationRequest(operation_id=op["operation_id"]),
                                         metadata=env.md(), timeout=5)
    assert g.operation.matched == 58


async def test_bulk_operation_items_that_fail_are_listed(env, pg_cluster):
    t = await env.new_tenant("bulk-fail")
    await env.deploy(t.api_key)
    for i in range(6):
        env.history.add(t.tenant_id, t.app_id, "gone" if i < 2 else "send", S.TASK_STATE_FAILED,
                        created=T0, finished=T0)
    r = await env.http.post("/v1/tasks:retry", json={}, headers=env.auth(t.api_key))
    op = r.json()["operation"]
    assert (op["matched"], op["succeeded"], op["failed"]) == ("6", "4", "2")
    assert {f["reason"] for f in op["failures"]} == {"handler removed by a deploy"}


async def test_bulk_cancel_runs_and_can_be_stopped(env):
    t = await env.new_tenant("bulk-cancel")
    await env.deploy(t.api_key)
    for _ in range(9):
        env.history.add(t.tenant_id, t.app_id, "send", S.TASK_STATE_ENQUEUED, created=T0)
    env.history.hold_bulk = True
    try:
        r = await env.tasks.CancelTasks(S.CancelTasksRequest(request_id="c-1"), metadata=env.md(t.api_key),
                                        timeout=5)
    finally:
        env.history.hold_bulk = False
    assert r.matched == 9 and r.operation.state == S.BULK_OPERATION_STATE_RUNNING
    starts = [c for n, c in env.history.calls
              if n == "StartBulkOperation" and c.operation_id == r.operation.operation_id]
    assert list(starts[0].filter.states) == [S.TASK_STATE_ENQUEUED, S.TASK_STATE_LEASED, S.TASK_STATE_RETRY_WAIT]
    assert list(starts[0].registered_task_types) == []
    c = await env.http.post(f"/v1/operations/{r.operation.operation_id}/cancel", headers=env.auth(t.api_key))
    assert c.status_code == 200 and c.json()["operation"]["state"] == "BULK_OPERATION_STATE_CANCELED"
    assert c.json()["operation"]["finished_at"]


@pytest.mark.parametrize("path, body, needle", [
    ("/v1/tasks:retry", {"filter": {"states": ["TASK_STATE_SUCCEEDED"]}}, "bulk retry applies only to FAILED"),
    ("/v1/tasks:retry", {"filter": {"states": ["TASK_STATE_ENQUEUED"]}}, "is ENQUEUED"),
    ("/v1/tasks:cancel", {"filter": {"states": ["TASK_STATE_FAILED"]}}, "bulk cancel applies only to ENQUEUED"),
    ("/v1/tasks:cancel", {"filter": {"queue": "no spaces"}}, "filter.queue must be"),
    ("/v1/tasks:retry", {"request_id": "\u00e9"}, "request_id must be"),
    ("/v1/tasks:retry", {"filter": {"bogus": 1}}, "bogus"),
])
async def test_bad_bulk_filters_are_400_and_start_nothing(env, path, body, needle):
    before = len(env.history.calls)
    r = await env.http.post(path, json=body, headers=env.auth())
    assert r.status_code == 400, r.text
    assert needle in r.json()["error"]["message"]
    assert len(env.history.calls) == before


async def test_a_reused_request_id_with_another_filter_is_409(env, dead):
    await env.http.post("/v1/tasks:retry", json={"request_id": "reuse"}, headers=env.auth())
    r = await env.http.post("/v1/tasks:retry", json={"request_id": "reuse", "filter": {"task_type": "send"}},
                            headers=env.auth())
    assert r.status_code == 409 and "already used for a different bulk operation" in r.json()["error"]["message"]
    c = await env.http.post("/v1/tasks:cancel", json={"request_id": "reuse"}, headers=env.auth())
    assert c.status_code == 409


async def test_unknown_and_foreign_operations_are_404(env, dead):
    mine = (await env.http.post("/v1/tasks:retry", json={"request_id": "mine"}, headers=env.auth())).json()
    op_id = mine["operation"]["operation_id"]
    other = await env.new_tenant("ops-other")
    for key, oid in ((other.api_key, op_id), (env.api_key, "op_" + "0" * 32), (env.api_key, "nope")):
        for r in (await env.http.get(f"/v1/operations/{oid}", headers=env.auth(key)),
                  await env.http.post(f"/v1/operations/{oid}/cancel", headers=env.auth(key))):
            assert r.status_code == 404, r.text
            assert r.json()["error"]["message"] == f"bulk operation {oid} not found"
    with pytest.raises(grpc.aio.AioRpcError) as e:
        await env.tasks.GetBulkOperation(S.GetBulkOperationRequest(operation_id=op_id),
                                         metadata=env.md(other.api_key), timeout=5)
    assert e.value.code() == grpc.StatusCode.NOT_FOUND
    assert (await env.http.get(f"/v1/operations/{op_id}")).status_code == 401
