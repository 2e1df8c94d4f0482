"""Group commit of CreateTasks (commit.py): concurrent calls share one
statement, and every caller still gets exactly its own answer."""

from __future__ import annotations

import asyncio

import grpc
import pytest

from ratchet.internal.history.v1 import history_pb2 as h
from ratchet.services.history.store import Tx

from .helpers import unique


async def _count(hist, tenant: str) -> int:
    (row,) = await hist.sql(1, "SELECT count(*) AS n FROM tasks WHERE tenant_id = $1", tenant)
    return row["n"]


async def test_concurrent_single_creates_share_transactions(make_hist):
    hist = await make_hist()
    tenant = unique("t")
    creates = hist.server.servicer.creates
    before = creates.statements
    tasks = [hist.task(tenant, idempotency_key=f"k{i}" if i % 2 else "", fingerprint="f") for i in range(200)]
    results = await asyncio.gather(*(hist.create(t) for t in tasks))
    assert [r.results[0].task_id for r in results] == [t.task_id for t in tasks]
    assert not any(r.results[0].deduplicated or r.results[0].conflict for r in results)
    assert await _count(hist, tenant) == 200
    assert creates.statements - before < 200  # coalesced: fewer statements than calls
    for t in tasks[:3]:
        assert await hist.log(t.task_id) == [(1, None, "ENQUEUED", 0)]


async def test_a_conflict_in_a_group_answers_only_its_caller(hist):
    tenant = unique("t")
    orig = hist.task(tenant, idempotency_key="k", fingerprint="one")
    await hist.create(orig)
    same = [hist.task(tenant, idempotency_key="k", fingerprint="one") for _ in range(5)]
    clash = [hist.task(tenant, idempotency_key="k", fingerprint="two") for _ in range(5)]
    fresh = [hist.task(tenant, idempotency_key=f"new{i}", fingerprint="x") for i in range(5)]
    bare = [hist.task(tenant) for _ in range(5)]
    mixed = [x for group in zip(same, clash, fresh, bare, strict=True) for x in group]
    results = [r.results[0] for r in await asyncio.gather(*(hist.create(t) for t in mixed))]
    for t, r in zip(mixed, results, strict=True):
        if t in same:
            assert (r.task_id, r.deduplicated, r.conflict) == (orig.task_id, True, False)
        elif t in clash:
            assert (r.task_id, r.deduplicated, r.conflict) == (orig.task_id, False, True)
        else:
            assert (r.task_id, r.deduplicated, r.conflict) == (t.task_id, False, False)
    assert await _count(hist, tenant) == 11


async def test_one_new_key_from_many_callers_at_once_is_one_task(hist):
    tenant = unique("t")
    same = [hist.task(tenant, idempotency_key="once", fingerprint="a") for _ in range(20)]
    other = [hist.task(tenant, idempotency_key="once", fingerprint="b") for _ in range(5)]
    results = [r.results[0] for r in await asyncio.gather(*(hist.create(t) for t in same + other))]
    owners = {r.task_id for r in results}
    assert len(owners) == 1 and await _count(hist, tenant) == 1
    (owner,) = owners
    winner_fp = "a" if owner in {t.task_id for t in same} else "b"
    for t, r in zip(same + other, results, strict=True):
        if t.task_id == owner:
            assert not r.deduplicated and not r.conflict
        elif t.fingerprint == winner_fp:
            assert r.deduplicated and not r.conflict
        else:
            assert r.conflict and not r.deduplicated


async def test_the_same_task_id_twice_at_once_is_one_task(hist):
    tenant = unique("t")
    t = hist.task(tenant)
    results = [r.results[0] for r in await asyncio.gather(*(hist.create(t) for _ in range(6)))]
    assert {r.task_id for r in results} == {t.task_id}
    assert sum(not r.deduplicated for r in results) == 1
    assert await _count(hist, tenant) == 1


async def test_a_new_key_sent_with_an_existing_id_is_that_tasks_create_resent(hist):
    """The statement finds the id taken by the same tenant, app and type: it writes nothing (no
    key row for a task it did not insert) and answers the task deduplicated."""
    tenant = unique("t")
    first = hist.task(tenant)
    await hist.create(first)
    keyed = hist.task(tenant, idempotency_key="late-key", fingerprint="f")
    keyed.task_id = first.task_id
    (r,) = (await hist.create(keyed)).results
    assert (r.task_id, r.deduplicated) == (first.task_id, True)
    assert await _count(hist, tenant) == 1
    assert await hist.sql(1, "SELECT key FROM idempotency_keys WHERE tenant_id = $1", tenant) == []


async def test_a_foreign_task_id_fails_only_its_own_caller(hist):
    mine, theirs = unique("t"), unique("t")
    taken = hist.task(theirs)
    await hist.create(taken)
    thief = hist.task(mine)
    thief.task_id = taken.task_id
    good = [hist.task(mine) for _ in range(10)]
    outcomes = await asyncio.gather(*(hist.create(t) for t in [thief, *good]), return_exceptions=True)
    assert isinstance(outcomes[0], grpc.aio.AioRpcError)
    assert outcomes[0].code() == grpc.StatusCode.INVALID_ARGUMENT and "already taken" in outcomes[0].details()
    assert all(not isinstance(o, BaseException) for o in outcomes[1:])
    assert await _count(hist, mine) == 10


@pytest.mark.parametrize("keyed", [False, True])
async def test_a_shard_down_fails_the_group_unavailable(make_hist, pg_cluster, keyed):
    hist = await make_hist(extra_shards={"7": pg_cluster.dsn("no_such_database_here")})
    t = hist.task(unique("t"), idempotency_key="k" if keyed else "", fingerprint="f")
    with pytest.raises(grpc.aio.AioRpcError) as e:
        await hist.create(t, shard=7)
    assert e.value.code() == grpc.StatusCode.UNAVAILABLE


async def test_a_request_of_several_new_tasks_is_one_statement_and_a_held_key_one_more(make_hist):
    """All new: one task_create and nothing else; a key held by another task: that statement
    writes nothing of the request and answers that task (dedup here), and the rest of the
    request, planned again, is created by the next (uniform here: the uniform statement)."""
    hist = await make_hist()
    ran: list[str] = []

    async def seen(name: str) -> None:
        ran.append(name)
    for name in ("task_create", "task_create_uniform", "idempotency_key_expire_batch"):
        hist.server.store.before[name] = seen
    tenant = unique("t")
    tasks = [hist.task(tenant, idempotency_key=f"k{i}" if i % 2 else "", fingerprint="f") for i in range(10)]
    r = await hist.create(*tasks)
    assert [x.task_id for x in r.results] == [t.task_id for t in tasks] and ran == ["task_create"]
    ran.clear()
    again = hist.task(tenant, idempotency_key="k1", fingerprint="f")
    fresh = hist.task(tenant)
    r = await hist.create(fresh, again)
    assert (r.results[1].task_id, r.results[1].deduplicated) == (tasks[1].task_id, True)
    assert ran == ["task_create", "task_create_uniform"]
    assert await _count(hist, tenant) == 11


def _count_calls(monkeypatch, store, *names: str) -> dict[str, int]:
    """Calls of these statements that `store` runs from now on."""
    counts = dict.fromkeys(names, 0)
    for name in names:
        real = getattr(Tx, name)

        async def counted(self, *a, _real=real, _name=name, **kw):
            if self._store is store:
                counts[_name] += 1
            return await _real(self, *a, **kw)
        monkeypatch.setattr(Tx, name, counted)
    return counts


async def test_uniform_singles_take_the_uniform_statement_and_write_the_same_rows(make_hist, monkeypatch):
    # A group of unkeyed tasks sharing every value but id and payload is task_create_uniform's
    # (a fraction of task_create's cost); its rows are those the general statement writes.
    from .test_history_shared import _rows
    hist = await make_hist()
    counts = _count_calls(monkeypatch, hist.server.servicer.store, "task_create_uniform", "task_create")
    via_uniform, via_batch = unique("t"), unique("t")

    def shaped(tenant: str, i: int) -> h.NewTask:
        t = hist.task(tenant, payload=b'{"i":%d}' % i, max_attempts=4, base_s=2, queue="q1")
        t.timeouts.schedule_to_start.seconds = 600
        t.non_retryable.append("ValueError")
        return t
    alike = [shaped(via_uniform, i) for i in range(40)]
    results = await asyncio.gather(*(hist.create(t) for t in alike))
    assert all(r.results[0].task_id == t.task_id and not r.results[0].deduplicated
               for r, t in zip(results, alike, strict=True))
    assert counts["task_create_uniform"] >= 1 and counts["task_create"] == 0
    # The same tasks one request each with a key (never alike): the general statement.
    keyed = [shaped(via_batch, i) for i in range(40)]
    for i, t in enumerate(keyed):
        t.idempotency_key, t.fingerprint = f"k{i}", "f"
    await asyncio.gather(*(hist.create(t) for t in keyed))
    assert counts["task_create"] >= 1
    strip = ("idempotency_key",)
    got = [{k: v for k, v in r.items() if k not in strip}
           for r in await _rows(hist, via_uniform, [t.task_id for t in alike])]
    want = [{k: v for k, v in r.items() if k not in strip}
            for r in await _rows(hist, via_batch, [t.task_id for t in keyed])]
    assert got == want
    assert set(await hist.timers(alike[0].task_id)) == {"schedule_to_start"}


async def test_a_retried_id_in_a_uniform_group_is_deduplicated_and_the_others_created(make_hist):
    hist = await make_hist()
    tenant = unique("t")
    first = hist.task(tenant)
    await hist.create(first)
    again = h_copy(first)
    fresh = [hist.task(tenant) for _ in range(10)]
    results = await asyncio.gather(*(hist.create(t) for t in [*fresh[:5], again, *fresh[5:]]))
    assert results[5].results[0].task_id == first.task_id and results[5].results[0].deduplicated
    assert [r.results[0].deduplicated for i, r in enumerate(results) if i != 5] == [False] * 10
    assert await _count(hist, tenant) == 11


def h_copy(task):
    out = type(task)()
    out.CopyFrom(task)
    return out


async def test_a_request_of_several_uniform_tasks_is_one_uniform_statement_and_a_resent_one_is_answered_per_task(
        make_hist, monkeypatch):
    # What the gateway's coalesced single enqueues are: one CreateTasks of several uniform tasks.
    hist = await make_hist()
    counts = _count_calls(monkeypatch, hist.server.servicer.store, "task_create_uniform", "task_create")
    tenant = unique("t")
    tasks = [hist.task(tenant, payload=b'{"i":%d}' % i) for i in range(6)]
    r = await hist.create(*tasks)
    assert [(x.task_id, x.deduplicated) for x in r.results] == [(t.task_id, False) for t in tasks]
    assert counts == {"task_create_uniform": 1, "task_create": 0}
    # The same request again (its answer lost) plus one new task: nothing written twice.
    new = hist.task(tenant)
    r = await hist.create(*tasks[:3], new)
    assert [(x.task_id, x.deduplicated) for x in r.results] == [(t.task_id, True) for t in tasks[:3]] + [
        (new.task_id, False)]
    assert await _count(hist, tenant) == 7
