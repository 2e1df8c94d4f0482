"""CreateTasks and GetTask on real shard databases over real gRPC."""

from __future__ import annotations

import asyncio
import json
import time

import grpc
import pytest
from google.protobuf import json_format, timestamp_pb2

from ratchet.api.tasks.v1 import tasks_pb2
from ratchet.libs.shardmap import new_task_id
from ratchet.services.history.policy import duration

from .helpers import eventually, unique


async def test_create_then_get_shows_the_task_and_its_first_transition(hist):
    tenant = unique("t")
    t = hist.task(tenant, "app", payload=b'{"w":640,"tags":["a"]}', idempotency_key="", queue="")
    t.non_retryable.append("ValueError")
    (res,) = (await hist.create(t)).results
    assert res.task_id == t.task_id and not res.deduplicated and not res.conflict
    got = await hist.get(t.task_id, tenant)
    assert got.state == tasks_pb2.TASK_STATE_ENQUEUED and got.version == 1 and got.attempt == 0
    assert json_format.MessageToDict(got.payload) == {"w": 640, "tags": ["a"]}
    assert got.queue == "default" and got.max_attempts == 5 and got.retry.factor == 2.0
    assert got.timeouts.start_to_close.seconds == 600 and not got.HasField("finished_at")
    assert got.run_at.ToDatetime() <= got.updated_at.ToDatetime()
    assert await hist.log(t.task_id) == [(1, None, "ENQUEUED", 0)]
    assert await hist.timers(t.task_id) == {}  # due now: no timer at all


async def test_get_is_not_found_for_unknown_and_foreign_ids_alike(hist):
    tenant = unique("t")
    task_id = await hist.create_one(tenant)
    for tid, who in ((task_id, unique("other")), (new_task_id(), tenant)):
        with pytest.raises(grpc.aio.AioRpcError) as e:
            await hist.get(tid, who)
        assert e.value.code() == grpc.StatusCode.NOT_FOUND
        assert e.value.details() == f"task {tid} not found"


async def test_a_batch_of_1000_commits_in_one_request_in_order(hist):
    tenant = unique("t")
    tasks = [hist.task(tenant, payload=json.dumps({"i": i}).encode()) for i in range(1000)]
    started = time.monotonic()
    r = await hist.create(*tasks)
    assert time.monotonic() - started < 5
    assert [x.task_id for x in r.results] == [t.task_id for t in tasks]
    (count,) = await hist.sql(1, "SELECT count(*) AS n FROM tasks WHERE tenant_id = $1", tenant)
    assert count["n"] == 1000
    got = await hist.get(tasks[777].task_id, tenant)
    assert json_format.MessageToDict(got.payload) == {"i": 777}


async def test_a_retried_create_with_the_same_ids_writes_nothing_new(hist):
    tenant = unique("t")
    tasks = [hist.task(tenant) for _ in range(3)]
    await hist.create(*tasks)
    before = [await hist.snapshot(t.task_id) for t in tasks]
    again = await hist.create(*tasks)
    assert all(r.deduplicated and r.task_id == t.task_id for r, t in zip(again.results, tasks, strict=True))
    assert [await hist.snapshot(t.task_id) for t in tasks] == before


async def test_delayed_tasks_wait_for_run_at_with_a_wake_up_timer(hist):
    tenant, app = unique("t"), unique("app")
    d = hist.task(tenant, app, delay=duration(0.4))
    future = hist.task(tenant, app)
    future.run_at.FromSeconds(int(time.time()) + 3600)
    past = hist.task(tenant, app)
    past.run_at.FromSeconds(int(time.time()) - 60)
    await hist.create(d, future, past)
    assert set(await hist.timers(d.task_id)) == {"delay"}
    fire_at = (await hist.timers(future.task_id))["delay"]["fire_at"]
    assert fire_at.timestamp() == pytest.approx(time.time() + 3600, abs=5)
    first = await hist.lease(app)
    assert [t.task_id for t in first.tasks] == [past.task_id]  # only the due one

    async def woken() -> bool:  # history's timer loop fired the wake-up at run_at
        return "delay" not in await hist.timers(d.task_id)
    await eventually(woken, 5)
    second = await hist.lease(app)
    assert [t.task_id for t in second.tasks] == [d.task_id]
    assert second.tasks[0].scheduled_at.ToDatetime() > first.tasks[0].scheduled_at.ToDatetime()
    assert await hist.timers(d.task_id) == {"lease": (await hist.timers(d.task_id))["lease"]}


async def test_a_key_reused_with_the_same_request_returns_the_original(hist):
    tenant = unique("t")
    a = hist.task(tenant, idempotency_key="k1", fingerprint="fp")
    b = hist.task(tenant, idempotency_key="k1", fingerprint="fp")
    (ra,) = (await hist.create(a)).results
    (rb,) = (await hist.create(b)).results
    assert (ra.task_id, ra.deduplicated) == (a.task_id, False)
    assert (rb.task_id, rb.deduplicated, rb.conflict) == (a.task_id, True, False)
    assert (await hist.get(a.task_id, tenant)).idempotency_key == "k1"
    with pytest.raises(grpc.aio.AioRpcError):
        await hist.get(b.task_id, tenant)


async def test_a_key_conflict_writes_nothing_in_the_whole_request(hist):
    tenant = unique("t")
    orig = hist.task(tenant, idempotency_key="k", fingerprint="one")
    await hist.create(orig)
    fresh = hist.task(tenant)
    fresh_keyed = hist.task(tenant, idempotency_key="k-new", fingerprint="x")
    clash = hist.task(tenant, idempotency_key="k", fingerprint="two")
    r = await hist.create(fresh, fresh_keyed, clash)
    assert [(x.conflict, x.deduplicated) for x in r.results] == [(False, False), (False, False), (True, False)]
    assert r.results[2].task_id == orig.task_id
    rows = await hist.sql(1, "SELECT count(*) AS n FROM tasks WHERE tenant_id = $1", tenant)
    assert rows[0]["n"] == 1
    keys = await hist.sql(1, "SELECT key FROM idempotency_keys WHERE tenant_id = $1", tenant)
    assert [k["key"] for k in keys] == ["k"]


async def test_one_key_twice_in_one_request_resolves_to_one_task(hist):
    tenant = unique("t")
    a = hist.task(tenant, idempotency_key="dup", fingerprint="f")
    b = hist.task(tenant, idempotency_key="dup", fingerprint="f")
    r = await hist.create(a, b)
    assert [x.task_id for x in r.results] == [a.task_id, a.task_id]
    assert [x.deduplicated for x in r.results] == [False, True]
    c = hist.task(tenant, idempotency_key="dup2", fingerprint="f")
    d = hist.task(tenant, idempotency_key="dup2", fingerprint="g")
    with pytest.raises(grpc.aio.AioRpcError) as e:
        await hist.create(c, d)
    assert e.value.code() == grpc.StatusCode.INVALID_ARGUMENT and "tasks[0] and tasks[1]" in e.value.details()


async def test_fifty_concurrent_creates_with_one_key_make_one_task(hist):
    tenant = unique("t")
    tasks = [hist.task(tenant, "app", idempotency_key="welcome", fingerprint="same") for _ in range(50)]
    results = await asyncio.gather(*(hist.create(t) for t in tasks))
    ids = {r.results[0].task_id for r in results}
    assert len(ids) == 1
    assert sum(not r.results[0].deduplicated for r in results) == 1
    rows = await hist.sql(1, "SELECT count(*) AS n FROM tasks WHERE tenant_id = $1", tenant)
    assert rows[0]["n"] == 1


async def test_an_expired_key_may_name_a_new_task(hist):
    tenant = unique("t")
    first = hist.task(tenant, idempotency_key="daily", fingerprint="a")
    await hist.create(first)
    await hist.sql(1, "UPDATE idempotency_keys SET expires_at = clock_timestamp() - interval '1 second' "
                      "WHERE tenant_id = $1", tenant)
    second = hist.task(tenant, idempotency_key="daily", fingerprint="b")
    (r,) = (await hist.create(second)).results
    assert (r.task_id, r.deduplicated, r.conflict) == (second.task_id, False, False)
    (row,) = await hist.sql(1, "SELECT task_id::text AS id, "
                               "expires_at > clock_timestamp() + interval '23 hours' AS live "
                               "FROM idempotency_keys WHERE tenant_id = $1", tenant)
    assert row["id"] == second.task_id and row["live"]


@pytest.mark.parametrize("mutate, code, needle", [
    (lambda t: setattr(t, "task_id", "not-a-uuid"), grpc.StatusCode.INVALID_ARGUMENT, "tasks[1].task_id"),
    (lambda t: setattr(t, "payload_json", b"{oops"), grpc.StatusCode.INVALID_ARGUMENT, "must be JSON"),
    (lambda t: setattr(t, "payload_json", b'"' + b"x" * 300_000 + b'"'), grpc.StatusCode.RESOURCE_EXHAUSTED,
     "inline limit"),
    (lambda t: (t.delay.CopyFrom(duration(1)), t.run_at.CopyFrom(timestamp_pb2.Timestamp(seconds=1))),
     grpc.StatusCode.INVALID_ARGUMENT, "not both"),
    (lambda t: setattr(t, "tenant_id", ""), grpc.StatusCode.INVALID_ARGUMENT, "tenant_id is required"),
    (lambda t: setattr(t, "idempotency_key", "k"), grpc.StatusCode.INVALID_ARGUMENT, "fingerprint is required"),
    (lambda t: t.retry.__setattr__("max_attempts", 0), grpc.StatusCode.INVALID_ARGUMENT, "max_attempts"),
])
async def test_bad_input_is_refused_whole_and_writes_nothing(hist, mutate, code, needle):
    tenant = unique("t")
    good, bad = hist.task(tenant), hist.task(tenant)
    mutate(bad)
    with pytest.raises(grpc.aio.AioRpcError) as e:
        await hist.create(good, bad)
    assert e.value.code() == code and needle in e.value.details()
    rows = await hist.sql(1, "SELECT count(*) AS n FROM tasks WHERE task_id = $1::uuid", good.task_id)
    assert rows[0]["n"] == 0


async def test_over_1000_tasks_is_refused(hist):
    tenant = unique("t")
    with pytest.raises(grpc.aio.AioRpcError) as e:
        await hist.create(*[hist.task(tenant) for _ in range(1001)])
    assert e.value.code() == grpc.StatusCode.INVALID_ARGUMENT and "at most 1000" in e.value.details()
