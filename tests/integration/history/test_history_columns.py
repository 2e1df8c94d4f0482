"""CreateTasksRequest.columns: a batch call's uniform tasks as two columns, inserted by
one statement (or a COPY) and answered all_created; an id that exists sends it through
the general statement, which answers per task."""

from __future__ import annotations

import asyncio

import grpc
import pytest

from ratchet.internal.history.v1 import history_pb2 as h
from ratchet.libs.shardmap import new_task_id
from ratchet.services.history.enqueue import COPY_MIN_ROWS
from ratchet.services.history.policy import duration
from ratchet.services.history.store import Tx

from .helpers import RPC_TIMEOUT, unique
from .test_history_shared import _rows


def _shared(tenant: str) -> h.NewTask:
    shared = h.NewTask(tenant_id=tenant, app_id="app", task_type="work", queue="q1")
    shared.retry.max_attempts = 4
    shared.retry.base.CopyFrom(duration(2))
    shared.timeouts.schedule_to_start.CopyFrom(duration(600))
    shared.timeouts.schedule_to_close.CopyFrom(duration(3600))
    shared.non_retryable.append("ValueError")
    return shared


async def _columns(hist, shared: h.NewTask, ids: list[str], payloads: list[bytes], **kw) -> h.CreateTasksResponse:
    req = h.CreateTasksRequest(shard_id=1, shared=shared, columns=h.TaskColumns(task_ids=ids, payloads_json=payloads),
                               **kw)
    return await hist.stub.CreateTasks(req, timeout=RPC_TIMEOUT)


async def _written(hist, ids: list[str]) -> int:
    return len(await hist.sql(1, "SELECT 1 FROM tasks WHERE task_id = ANY($1::uuid[])", ids))


async def test_columns_make_the_rows_tasks_with_the_same_fields_make(hist):
    alone, uniform = unique("t"), unique("t")
    payloads = [b'{"i":%d}' % i for i in range(3)] + [b"null", '"\u00e9t\u00e9"'.encode(),
                                                      b'{ "b" : [1, 2.50] , "a":"\\u00e9\\n" }']
    spelled = [h.NewTask(task_id=new_task_id(), payload_json=p) for p in payloads]
    r = await hist.stub.CreateTasks(h.CreateTasksRequest(shard_id=1, tasks=spelled, shared=_shared(alone)),
                                    timeout=RPC_TIMEOUT)
    assert len(r.results) == 6 and not r.all_created
    ids = [new_task_id() for _ in payloads]
    r = await _columns(hist, _shared(uniform), ids, payloads)
    assert r.all_created and list(r.results) == []
    want = await _rows(hist, alone, [t.task_id for t in spelled])
    got = await _rows(hist, uniform, ids)
    assert got == want
    assert [g["payload"] for g in got] == payloads
    assert {(g["queue"], g["max_attempts"], tuple(g["non_retryable"])) for g in got} == {("q1", 4, ("ValueError",))}
    for i in (0, 4):  # the policy's two timeouts become the same timers
        assert set(await hist.timers(ids[i])) == set(await hist.timers(spelled[i].task_id)) == {
            "schedule_to_start", "schedule_to_close"}
    assert await hist.state(ids[0], uniform) == "ENQUEUED"


@pytest.mark.parametrize("queue,non_retryable", [("q1", ["ValueError"]), ("", [])])
async def test_uniform_tasks_without_timeouts_are_copied_in_as_the_tasks_path_writes_them(hist, monkeypatch, queue,
                                                                                        non_retryable):
    # No schedule-to-start or schedule-to-close timeout: no timer rows, so the rows go in by
    # COPY (Tx.task_copy_uniform), their times from the column defaults (migration 0015).
    alone, uniform = unique("t"), unique("t")
    payloads = [b'{"i":%d}' % i for i in range(COPY_MIN_ROWS)] + [b"null", '"\u00e9t\u00e9"'.encode(),
                                                                  b'[1, {"a" : 2.50}]']

    def shared(tenant):
        sh = h.NewTask(tenant_id=tenant, app_id="app", task_type="work", queue=queue, non_retryable=non_retryable)
        sh.retry.max_attempts = 4
        return sh
    spelled = [h.NewTask(task_id=new_task_id(), payload_json=p) for p in payloads]
    r = await hist.stub.CreateTasks(h.CreateTasksRequest(shard_id=1, tasks=spelled, shared=shared(alone)),
                                    timeout=RPC_TIMEOUT)
    assert len(r.results) == len(payloads)
    copies = []
    store, real_copy = hist.server.servicer.store, Tx.task_copy_uniform

    class Spy:  # the connection, with its COPY counted
        def __init__(self, conn):
            self._conn = conn

        def __getattr__(self, name):
            return getattr(self._conn, name)

        async def copy_to_table(self, *a, **kw):
            copies.append(kw["format"])
            return await self._conn.copy_to_table(*a, **kw)

    async def counted(self, *args):
        return await real_copy(store.on(Spy(self.conn)), *args)
    monkeypatch.setattr(Tx, "task_copy_uniform", counted)
    ids = [new_task_id() for _ in payloads]
    assert (await _columns(hist, shared(uniform), ids, payloads)).all_created
    assert copies == ["binary"]
    assert await _rows(hist, uniform, ids) == await _rows(hist, alone, [t.task_id for t in spelled])
    times = await hist.sql(1, "SELECT created_at, run_at, updated_at, version, attempt, lease_epoch, "
                              "cancel_requested, state FROM tasks WHERE task_id = ANY($1::uuid[])", ids)
    assert len({tuple(t.values()) for t in times}) == 1  # one instant for all three, every row
    t = times[0]
    assert t["created_at"] == t["run_at"] == t["updated_at"]
    assert (t["version"], t["attempt"], t["lease_epoch"], t["cancel_requested"], t["state"]) == (
        1, 0, 0, False, "ENQUEUED")
    assert await hist.timers(ids[0]) == {}
    # a resent call: the COPY's unique violation writes nothing and the general statement answers it
    r = await _columns(hist, shared(uniform), ids, payloads)
    assert not r.all_created and [x.deduplicated for x in r.results] == [True] * len(ids)
    assert await _written(hist, ids) == len(ids)
    # fewer rows than COPY_MIN_ROWS: the statement, the same rows
    few = [new_task_id() for _ in range(COPY_MIN_ROWS - 1)]
    assert (await _columns(hist, shared(uniform), few, payloads[:len(few)])).all_created
    assert copies == ["binary", "binary"]  # (the resent call's COPY, which wrote nothing; none since)
    assert await _rows(hist, uniform, few) == (await _rows(hist, alone, [t.task_id for t in spelled]))[:len(few)]


async def test_the_default_policy_and_queue_are_stored_as_null_and_set_no_timers(hist):
    tenant = unique("t")
    ids = [new_task_id(), new_task_id()]
    r = await _columns(hist, h.NewTask(tenant_id=tenant, app_id="app", task_type="work"), ids, [b"1", b"2"])
    assert r.all_created
    rows = await _rows(hist, tenant, ids)
    assert {(x["queue"], x["retry_policy"], x["timeouts"], x["non_retryable"], x["retry_rules"]) for x in rows} == {
        (None, None, None, None, None)}
    assert await hist.timers(ids[0]) == {}


async def test_a_resent_columns_request_is_answered_per_task_and_writes_nothing_twice(hist):
    """The lost-answer retry: every id exists, so the uniform statement's unique violation sends
    the request through the general statement, which answers each task deduplicated."""
    tenant = unique("t")
    ids = [new_task_id() for _ in range(4)]
    assert (await _columns(hist, _shared(tenant), ids, [b"1"] * 4)).all_created
    again = await _columns(hist, _shared(tenant), ids, [b"1"] * 4)
    assert not again.all_created
    assert [(x.task_id, x.deduplicated) for x in again.results] == [(i, True) for i in ids]
    # Half old, half new: the new ones are created, the old ones deduplicated, in request order.
    mixed = [ids[0], new_task_id(), ids[1], new_task_id()]
    r = await _columns(hist, _shared(tenant), mixed, [b"2"] * 4)
    assert [(x.task_id, x.deduplicated) for x in r.results] == [(mixed[0], True), (mixed[1], False),
                                                               (mixed[2], True), (mixed[3], False)]
    assert await _written(hist, ids + mixed) == 6


async def test_an_id_another_tenant_holds_is_refused_and_nothing_is_written(hist):
    taken = new_task_id()
    assert (await _columns(hist, _shared(unique("t")), [taken], [b"1"])).all_created
    fresh = new_task_id()
    with pytest.raises(grpc.aio.AioRpcError) as e:
        await _columns(hist, _shared(unique("t")), [fresh, taken], [b"1", b"2"])
    assert e.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert f"columns.task_ids[1] {taken} is already taken" in e.value.details()
    assert await _written(hist, [fresh]) == 0


@pytest.mark.parametrize("case, message", [
    ("both", "columns and tasks are exclusive"),
    ("counts", "columns holds 2 task_ids and 1 payloads_json"),
    ("no_type", "shared.task_type is required with columns"),
    ("no_tenant", "shared.tenant_id is required with columns"),
    ("bad_id", "columns.task_ids[1] must be a Ratchet task id"),
    ("same_id", "columns.task_ids[0] and columns.task_ids[1] are the same task id"),
    ("bad_json", "columns.payloads_json[1] must be JSON"),
    ("empty_json", "columns.payloads_json[0] is required"),
    ("too_big", "columns.payloads_json[1] is 262145 bytes"),
    ("empty", "columns.task_ids holds 0 ids; send 1..1000"),
])
async def test_bad_columns_requests_name_what_to_fix_and_write_nothing(hist, case, message):
    shared = h.NewTask(tenant_id=unique("t"), app_id="app", task_type="work")
    ids, payloads, kw = [new_task_id(), new_task_id()], [b"1", b"2"], {}
    if case == "both":
        kw["tasks"] = [h.NewTask(task_id=new_task_id(), payload_json=b"1")]
    elif case == "counts":
        payloads = [b"1"]
    elif case == "no_type":
        shared.ClearField("task_type")
    elif case == "no_tenant":
        shared.ClearField("tenant_id")
    elif case == "bad_id":
        ids[1] = "not-an-id"
    elif case == "same_id":
        ids[1] = ids[0]
    elif case == "bad_json":
        payloads[1] = b"{1"
    elif case == "empty_json":
        payloads[0] = b""
    elif case == "too_big":
        payloads[1] = b'"' + b"x" * (256 * 1024 - 1) + b'"'
    elif case == "empty":
        ids, payloads = [], []
    with pytest.raises(grpc.aio.AioRpcError) as e:
        await _columns(hist, shared, ids, payloads, **kw)
    assert e.value.code() in (grpc.StatusCode.INVALID_ARGUMENT, grpc.StatusCode.RESOURCE_EXHAUSTED)
    assert message in e.value.details(), e.value.details()
    assert await _written(hist, [i for i in ids if i != "not-an-id"]) == 0


async def test_upper_case_ids_are_stored_canonical(hist):
    tenant = unique("t")
    ids = [new_task_id(), new_task_id()]
    r = await _columns(hist, h.NewTask(tenant_id=tenant, app_id="app", task_type="work"), [ids[0].upper(), ids[1]],
                     [b"1", b"2"])
    assert r.all_created
    assert await _written(hist, ids) == 2


# Group commit of concurrent uniform calls (commit.py): calls for one shard that arrive while one
# is in flight share one statement; every caller still gets exactly its own answer.

async def test_concurrent_columns_calls_share_statements(make_hist):
    hist = await make_hist()
    creates = hist.server.servicer.creates
    before = creates.statements
    tenant = unique("t")
    calls = [[new_task_id() for _ in range(50)] for _ in range(20)]
    answers = await asyncio.gather(*(_columns(hist, _shared(tenant), ids, [b'{"c":%d}' % c] * 50)
                                     for c, ids in enumerate(calls)))
    assert all(a.all_created and not a.results for a in answers)
    assert await _written(hist, [t for ids in calls for t in ids]) == 1000
    assert 0 < creates.statements - before < 20  # some calls shared one
    rows = await hist.sql(1, "SELECT task_id::text AS id, payload FROM tasks WHERE tenant_id = $1", tenant)
    by_id = {r["id"]: bytes(r["payload"]) for r in rows}
    assert all(by_id[t] == b'{"c":%d}' % c for c, ids in enumerate(calls) for t in ids)  # each row its own call's


async def test_a_resent_call_in_a_group_is_answered_per_task_and_the_others_all_created(make_hist):
    hist = await make_hist()
    creates = hist.server.servicer.creates
    tenant = unique("t")
    old = [new_task_id() for _ in range(5)]
    assert (await _columns(hist, _shared(tenant), old, [b"1"] * 5)).all_created
    fresh = [[new_task_id() for _ in range(5)] for _ in range(8)]
    before = creates.statements
    answers = await asyncio.gather(*(_columns(hist, _shared(tenant), ids, [b"2"] * 5) for ids in [*fresh[:4], old,
                                                                                                 *fresh[4:]]))
    resent = answers[4]
    assert not resent.all_created and [(x.task_id, x.deduplicated) for x in resent.results] == [(i, True) for i in old]
    others = answers[:4] + answers[5:]
    for ids, a in zip(fresh, others, strict=True):  # all_created, or answered per task as new when it went again
        assert a.all_created or [(x.task_id, x.deduplicated) for x in a.results] == [(i, False) for i in ids]
    assert creates.statements > before
    assert await _written(hist, old + [t for ids in fresh for t in ids]) == 45


async def test_a_foreign_id_in_a_group_fails_only_its_own_caller(make_hist):
    hist = await make_hist()
    taken = new_task_id()
    assert (await _columns(hist, _shared(unique("t")), [taken], [b"1"])).all_created
    tenant = unique("t")
    fresh = [[new_task_id() for _ in range(3)] for _ in range(6)]
    bad = [new_task_id(), taken]
    outcomes = await asyncio.gather(*(_columns(hist, _shared(tenant), ids, [b"1"] * len(ids))
                                      for ids in [*fresh[:3], bad, *fresh[3:]]), return_exceptions=True)
    err = outcomes[3]
    assert isinstance(err, grpc.aio.AioRpcError) and err.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert f"columns.task_ids[1] {taken} is already taken" in err.details()
    assert all(not isinstance(o, BaseException) for i, o in enumerate(outcomes) if i != 3)
    assert await _written(hist, [t for ids in fresh for t in ids]) == 18
    assert await _written(hist, [bad[0]]) == 0


async def test_calls_that_differ_in_shared_values_never_share_a_statement(make_hist):
    hist = await make_hist()
    tenant = unique("t")
    kinds = []
    for i in range(12):
        shared = _shared(tenant)
        shared.task_type = f"type{i % 3}"
        if i % 2:
            shared.retry.max_attempts = 7  # another policy
        kinds.append(shared)
    calls = [[new_task_id() for _ in range(4)] for _ in kinds]
    answers = await asyncio.gather(*(_columns(hist, sh, ids, [b"0"] * 4) for sh, ids in zip(kinds, calls, strict=True)))
    assert all(a.all_created for a in answers)
    rows = await hist.sql(1, "SELECT task_id::text AS id, task_type, max_attempts FROM tasks WHERE tenant_id = $1",
                          tenant)
    got = {r["id"]: (r["task_type"], r["max_attempts"]) for r in rows}
    assert len(got) == 48
    for i, ids in enumerate(calls):
        assert {got[t] for t in ids} == {(f"type{i % 3}", 7 if i % 2 else 4)}
