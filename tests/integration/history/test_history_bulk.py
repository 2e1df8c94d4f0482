"""Bulk operations: a durable retry of 1,000 dead letters with per-item
failures, progress, re-runs that skip, cancel mid-way, crash and resume;
bulk cancel; the RPC edges."""

from __future__ import annotations

import asyncio
import contextlib

import grpc
import pytest

from ratchet.api.tasks.v1 import tasks_pb2
from ratchet.internal.history.v1 import history_pb2 as h
from ratchet.internal.worker.v1 import worker_pb2 as wpb
from ratchet.libs.shardmap import slot_of
from tests.fault.mutants.mutations import installed

from .helpers import RPC_TIMEOUT, unique

FAILED = tasks_pb2.TASK_STATE_FAILED
RUNNING = tasks_pb2.BULK_OPERATION_STATE_RUNNING
DONE = tasks_pb2.BULK_OPERATION_STATE_SUCCEEDED
STOPPED = tasks_pb2.BULK_OPERATION_STATE_CANCELED


async def _dead_letters(hist, tenant: str, app: str, n: int, gone: int = 0) -> list[str]:
    """n FAILED tasks (the last `gone` of type "gone"), failed by one completion batch per 1,000."""
    tasks = [hist.task(tenant, app, max_attempts=1, task_type="gone" if i >= n - gone else "work",
                       payload=b'{"i":%d}' % i) for i in range(n)]
    ids = []
    for k in range(0, n, 1000):
        ids += [r.task_id for r in (await hist.create(*tasks[k:k + 1000])).results]
    while True:
        leased = (await hist.lease(app, max_tasks=1000)).tasks
        if not leased:
            return ids
        await hist.complete(*[wpb.Completion(task_id=t.task_id, lease_epoch=t.lease_epoch, fatal=True,
                                           outcome=wpb.COMPLETION_OUTCOME_FAILED,
                                           error=tasks_pb2.TaskError(error_class="BugError", message="x"))
                              for t in leased])


class Hold:
    """A Store hook that holds the k-th call of a query until released (or raises there)."""

    def __init__(self, at_call: int, raise_once: bool = False):
        self.at_call, self.raise_once = at_call, raise_once
        self.calls = 0
        self.reached = asyncio.Event()
        self.release = asyncio.Event()

    async def __call__(self, name: str) -> None:
        self.calls += 1
        if self.calls != self.at_call:
            return
        self.reached.set()
        if self.raise_once:
            raise RuntimeError("injected crash in the middle of a batch")
        await self.release.wait()


@contextlib.contextmanager
def hooked(hist, where: str, query: str, hook: Hold):
    hooks = getattr(hist.server.store, where)
    hooks[query] = hook
    try:
        yield hook
    finally:
        hooks.pop(query, None)
        hook.release.set()


async def _retries(hist, originals: list[str]) -> dict[str, list]:
    rows = await hist.sql(1, "SELECT retry_of, task_id, state, attempt, version, payload FROM tasks "
                             "WHERE retry_of = ANY($1::uuid[])", originals)
    out: dict[str, list] = {}
    for r in rows:
        out.setdefault(str(r["retry_of"]), []).append(r)
    return out


async def test_a_bulk_retry_of_1000_dead_letters(hist):
    tenant, app = unique("t"), unique("app")
    originals = await _dead_letters(hist, tenant, app, 1000, gone=7)
    before = await hist.snapshot(originals[0])
    with hooked(hist, "before", "task_retry_batch", Hold(at_call=4)) as hold:
        op = await hist.start_bulk("op-1k-" + tenant, tenant, app, registered=("work",), states=[FAILED])
        assert (op.state, op.matched, op.processed) == (RUNNING, 1000, 0)
        await asyncio.wait_for(hold.reached.wait(), 10)
        mid = await hist.get_bulk(op.operation_id, tenant)
        assert mid.state == RUNNING and mid.processed == 300 and mid.matched == 1000
        assert mid.succeeded + mid.failed == 300
        hold.release.set()
        op = await hist.bulk_done(op.operation_id, tenant)
    assert (op.state, op.matched, op.processed, op.succeeded, op.failed, op.skipped) == (DONE, 1000, 1000, 993, 7, 0)
    assert sorted(f.task_id for f in op.failures) == sorted(originals[-7:])
    assert {f.reason for f in op.failures} == {"task type gone is no longer registered by the active deployment"}
    assert op.HasField("finished_at")

    retries = await _retries(hist, originals)
    assert len(retries) == 993 and all(len(v) == 1 for v in retries.values())
    for orig, (new,) in retries.items():
        assert (new["state"], new["attempt"], new["version"]) == ("ENQUEUED", 0, 1)
        assert slot_of(str(new["task_id"])) == slot_of(orig)  # same slot, so the same shard
    o = await hist.get(originals[0], tenant)
    new_id = str(retries[originals[0]][0]["task_id"])
    assert o.state == FAILED and o.retried_as == new_id and o.version == 3
    n = await hist.get(new_id, tenant)
    assert n.retry_of == originals[0] and n.payload == o.payload and n.task_type == "work" and n.max_attempts == 1
    assert await hist.log(new_id) == [(1, None, "ENQUEUED", 0)]
    after = await hist.snapshot(originals[0])
    assert after[1:] == before[1:]  # attempts, log and timers of the original untouched
    assert (await hist.get(originals[-1], tenant)).retried_as == ""
    listed = (await hist.list_page(tenant, app, page_size=1000, states=[FAILED])).tasks
    assert sum(bool(t.retried_as) for t in listed) == 993

    # Re-running the same retry skips what was retried; the unregistered ones fail again.
    again = await hist.start_bulk("op-1k-again-" + tenant, tenant, app, registered=("work",), states=[FAILED])
    again = await hist.bulk_done(again.operation_id, tenant)
    assert (again.matched, again.processed, again.succeeded, again.failed, again.skipped) == (1000, 1000, 0, 7, 993)
    assert len(await _retries(hist, originals)) == 993
    # Start is idempotent per operation id.
    same = await hist.start_bulk(op.operation_id, tenant, app, registered=("work",), states=[FAILED])
    assert same == op
    # The new tasks are ordinary ready work.
    leased = await hist.lease(app, max_tasks=5)
    assert len(leased.tasks) == 5 and all(t.attempt == 1 for t in leased.tasks)


async def test_cancelling_a_bulk_operation_stops_it_at_the_next_batch(hist):
    tenant, app = unique("t"), unique("app")
    originals = await _dead_letters(hist, tenant, app, 250)
    with hooked(hist, "before", "task_retry_batch", Hold(at_call=2)) as hold:
        op = await hist.start_bulk("op-stop-" + tenant, tenant, app, states=[FAILED])
        await asyncio.wait_for(hold.reached.wait(), 10)
        cancel = asyncio.create_task(hist.cancel_bulk(op.operation_id, tenant))
        await asyncio.sleep(0.1)
        assert not cancel.done()  # waits for the batch in flight
        hold.release.set()
        stopped = await asyncio.wait_for(cancel, 10)
    assert stopped.state == STOPPED and stopped.processed == 200 and stopped.HasField("finished_at")
    await asyncio.sleep(0.5)  # several loop rounds: nothing more happens
    assert await hist.get_bulk(op.operation_id, tenant) == stopped
    assert len(await _retries(hist, originals)) == 200
    again = await hist.cancel_bulk(op.operation_id, tenant)  # a finished operation is returned as it is
    assert again == stopped


async def test_a_batch_that_dies_mid_way_commits_nothing_and_the_loop_resumes(hist):
    tenant, app = unique("t"), unique("app")
    originals = await _dead_letters(hist, tenant, app, 300)
    with hooked(hist, "after", "task_retry_batch", Hold(at_call=2, raise_once=True)) as hold:
        op = await hist.start_bulk("op-crash-" + tenant, tenant, app, states=[FAILED])
        await asyncio.wait_for(hold.reached.wait(), 10)
        op = await hist.bulk_done(op.operation_id, tenant, timeout=15)
    assert (op.state, op.matched, op.processed, op.succeeded, op.skipped) == (DONE, 300, 300, 300, 0)
    retries = await _retries(hist, originals)
    assert len(retries) == 300 and all(len(v) == 1 for v in retries.values())


async def test_a_bulk_cancel_applies_the_normal_cancel(hist):
    tenant, app = unique("t"), unique("app")
    backoff = [await hist.create_one(tenant, app, base_s=3600) for _ in range(2)]
    first = {t.task_id: t for t in (await hist.lease(app, max_tasks=2)).tasks}
    await hist.complete(*[wpb.Completion(task_id=t, lease_epoch=first[t].lease_epoch,
                                       outcome=wpb.COMPLETION_OUTCOME_FAILED) for t in backoff])
    waiting = [await hist.create_one(tenant, app) for _ in range(3)]
    other_type = await hist.create_one(tenant, app, task_type="mail")
    by_id = {t.task_id: t for t in (await hist.lease(app, max_tasks=10)).tasks}
    assert set(by_id) == set(waiting + [other_type])
    running = waiting[:2]
    for t in waiting[2:]:
        await hist.complete_one(by_id[t], "SUCCEEDED", result_json=b"1")
    mail_queued = await hist.create_one(tenant, app, task_type="mail")
    queued = [await hist.create_one(tenant, app) for _ in range(2)]
    op = await hist.start_bulk("op-cancel-" + tenant, tenant, app, kind="CANCEL", task_type="work")
    op = await hist.bulk_done(op.operation_id, tenant)
    assert (op.matched, op.processed, op.succeeded, op.failed, op.skipped) == (6, 6, 6, 0, 0)
    for t in backoff + queued:
        assert await hist.state(t, tenant) == "CANCELED"
        assert await hist.timers(t) == {}
    for t in running:
        got = await hist.get(t, tenant)
        assert got.state == tasks_pb2.TASK_STATE_LEASED and got.cancel_requested
        (hb,) = await hist.heartbeat((t, by_id[t].lease_epoch))
        assert hb.action == wpb.LEASE_ACTION_CANCEL
        r = await hist.complete_one(by_id[t], "CANCELED")
        assert r.state == tasks_pb2.TASK_STATE_CANCELED
    assert await hist.state(waiting[2], tenant) == "SUCCEEDED"
    assert await hist.state(mail_queued, tenant) == "ENQUEUED" and await hist.state(other_type, tenant) == "LEASED"


async def test_a_bulk_retry_wakes_the_dispatcher(hist):
    tenant, app = unique("t"), unique("app")
    await _dead_letters(hist, tenant, app, 1)

    async def wanted():
        yield h.WatchReadyRequest(shard_ids=[1], wanted=True)
        await asyncio.sleep(60)  # (the stream lasts while its requests do)

    stream = hist.stub.WatchReady(wanted(), timeout=30)
    assert (await asyncio.wait_for(stream.read(), 5)).shard_id == 1  # wanted from the start: every shard once
    op = await hist.start_bulk("op-wake-" + tenant, tenant, app, states=[FAILED])
    event = await asyncio.wait_for(stream.read(), 5)
    assert event.shard_id == 1
    stream.cancel()
    assert (await hist.bulk_done(op.operation_id, tenant)).succeeded == 1


async def test_bulk_operation_requests_are_checked(hist):
    tenant, app = unique("t"), unique("app")
    op = await hist.start_bulk("op-edge-" + tenant, tenant, app, states=[FAILED])
    for call in (hist.get_bulk(op.operation_id, "someone-else"), hist.cancel_bulk(op.operation_id, "someone-else"),
                 hist.get_bulk("op-missing-" + tenant, tenant)):
        with pytest.raises(grpc.aio.AioRpcError) as e:
            await call
        assert e.value.code() == grpc.StatusCode.NOT_FOUND
    with pytest.raises(grpc.aio.AioRpcError) as e:
        await hist.start_bulk(op.operation_id, "someone-else", app, states=[FAILED])
    assert e.value.code() == grpc.StatusCode.ALREADY_EXISTS
    bad = [(dict(kind="RETRY", states=[tasks_pb2.TASK_STATE_ENQUEUED]), "terminal"),
           (dict(kind="CANCEL", states=[FAILED]), "CANCEL")]
    for kw, needle in bad:
        with pytest.raises(grpc.aio.AioRpcError) as e:
            await hist.start_bulk("op-bad-" + tenant, tenant, app, **kw)
        assert e.value.code() == grpc.StatusCode.INVALID_ARGUMENT and needle in e.value.details()
    with pytest.raises(grpc.aio.AioRpcError) as e:
        await hist.stub.StartBulkOperation(h.StartBulkOperationRequest(shard_id=1, operation_id="x", tenant_id=tenant,
                                                                       app_id=app), timeout=RPC_TIMEOUT)
    assert e.value.code() == grpc.StatusCode.INVALID_ARGUMENT and "kind" in e.value.details()
    done = await hist.bulk_done(op.operation_id, tenant)
    assert (done.state, done.matched, done.processed) == (DONE, 0, 0)


async def test_a_restarted_history_resumes_a_running_operation(pg_cluster):
    """Stop the process in the middle of a batch: that batch rolls back, the
    committed ones stay, and the next process carries on from the cursor."""
    from .conftest import _new_dbs, start_hist, stop_hist
    hist = await start_hist(_new_dbs(pg_cluster))
    tenant, app = "t", "app"
    originals = await _dead_letters(hist, tenant, app, 300)
    with hooked(hist, "before", "task_retry_batch", Hold(at_call=2)) as hold:
        op = await hist.start_bulk("op-restart", tenant, app, states=[FAILED])
        await asyncio.wait_for(hold.reached.wait(), 10)
        await hist.close()
        await hist.server.stop(grace=1)
    (row,) = await hist.sql(1, "SELECT state, processed, cursor_task_id IS NOT NULL AS has_cursor "
                               "FROM bulk_operations")
    assert (row["state"], row["processed"], row["has_cursor"]) == ("RUNNING", 100, True)
    assert len(await _retries(hist, originals)) == 100
    again = await start_hist(hist.dsns)
    try:
        done = await again.bulk_done(op.operation_id, tenant)
        assert (done.state, done.matched, done.processed, done.succeeded) == (DONE, 300, 300, 300)
        retries = await _retries(again, originals)
        assert len(retries) == 300 and all(len(v) == 1 for v in retries.values())
    finally:
        await stop_hist(again)


async def test_the_retry_link_guard_is_what_keeps_a_rerun_from_retrying_twice(make_hist):
    """The mutant without the guard (tests/fault/mutants: no skip of retried originals, no
    retried_as IS NULL compare-and-set) retries every dead letter again on a re-run."""
    with installed("retry_link_once"):
        hist = await make_hist()
        originals = await _dead_letters(hist, "t", "app", 5)
        for run in ("a", "b"):
            await hist.bulk_done((await hist.start_bulk("op-" + run, "t", "app", states=[FAILED])).operation_id, "t")
        retries = await _retries(hist, originals)
    assert sorted(len(v) for v in retries.values()) == [2] * 5  # what the guard prevents
