"""ListTasks and CountTasks: filters, newest-first keyset paging (every match
exactly once), and the dead-letter search as an index scan."""

from __future__ import annotations

import datetime as dt
import json
import uuid

import grpc
import pytest

from ratchet.api.tasks.v1 import tasks_pb2
from ratchet.internal.worker.v1 import worker_pb2 as wpb
from ratchet.services.history.model import DAWN, MAX_ID, NEVER
from ratchet.services.history.store import QUERIES

from .helpers import unique

FAILED, SUCCEEDED = tasks_pb2.TASK_STATE_FAILED, tasks_pb2.TASK_STATE_SUCCEEDED
ENQUEUED, CANCELED = tasks_pb2.TASK_STATE_ENQUEUED, tasks_pb2.TASK_STATE_CANCELED


async def _finish(hist, app: str, outcome: str, errors: list[str] | None = None) -> None:
    """Lease every ready task of the app and complete them all in one batch."""
    leased = (await hist.lease(app, max_tasks=100)).tasks
    comps = []
    for i, t in enumerate(leased):
        c = wpb.Completion(task_id=t.task_id, lease_epoch=t.lease_epoch,
                         outcome=wpb.CompletionOutcome.Value(f"COMPLETION_OUTCOME_{outcome}"), result_json=b"1")
        if errors:
            c.error.error_class = errors[i % len(errors)]
        comps.append(c)
    await hist.complete(*comps)


@pytest.fixture(scope="module")
async def mix(hist):
    """A tenant's app with FAILED, SUCCEEDED, CANCELED and ENQUEUED tasks (and a neighbour app)."""
    tenant, app = unique("t"), unique("app")
    await hist.create(*[hist.task(tenant, app, max_attempts=1, task_type="mail" if i % 3 == 0 else "work",
                                  queue="q1" if i % 2 else "default") for i in range(12)])
    await _finish(hist, app, "FAILED", ["IOError", "ValueError"])
    await hist.create(*[hist.task(tenant, app) for _ in range(5)])
    await _finish(hist, app, "SUCCEEDED")
    cancelled = [await hist.create_one(tenant, app) for _ in range(3)]
    for task_id in cancelled:
        await hist.cancel(task_id, tenant)
    await hist.create(*[hist.task(tenant, app, task_type="mail") for _ in range(4)])
    await hist.create(hist.task(tenant, unique("other-app")), hist.task(unique("other-tenant"), app))
    return tenant, app


async def _all_pages(hist, tenant, app, page_size: int, **filter_kw) -> list[tasks_pb2.Task]:
    out, cursor, pages = [], "", 0
    while True:
        r = await hist.list_page(tenant, app, cursor=cursor, page_size=page_size, **filter_kw)
        assert len(r.tasks) <= page_size
        out.extend(r.tasks)
        pages += 1
        assert pages < 100
        if not r.next_cursor:
            return out
        cursor = r.next_cursor


async def _expected(hist, tenant, app, where: str = "true", *args) -> list[str]:
    rows = await hist.sql(1, f"""SELECT task_id FROM tasks WHERE tenant_id = $1 AND app_id = $2 AND {where}
                                  ORDER BY coalesce(finished_at, created_at) DESC, task_id DESC""",
                          tenant, app, *args)
    return [str(r["task_id"]) for r in rows]


@pytest.mark.parametrize("page_size", [1, 5, 24, 100])
async def test_paging_returns_every_task_exactly_once_newest_first(hist, mix, page_size):
    tenant, app = mix
    got = await _all_pages(hist, tenant, app, page_size)
    want = await _expected(hist, tenant, app)
    assert len(want) == 24 and [t.task_id for t in got] == want
    assert all(len(t.attempts) == 0 for t in got)
    assert await hist.count(tenant, app) == 24


async def test_filters_match_what_they_say(hist, mix):
    tenant, app = mix
    cases = [
        (dict(states=[FAILED]), "state = 'FAILED'"),
        (dict(states=[FAILED, ENQUEUED]), "state IN ('FAILED', 'ENQUEUED')"),
        (dict(states=[FAILED], task_type="mail"), "state = 'FAILED' AND task_type = 'mail'"),
        (dict(task_type="mail"), "task_type = 'mail'"),
        (dict(error_class="IOError"), "error_class = 'IOError'"),
        (dict(queue="q1"), "queue = 'q1'"),
        # The default queue is stored as NULL (migration 0013); the filter still names it.
        (dict(queue="default"), "COALESCE(queue, 'default') = 'default' AND queue IS NULL"),
        (dict(states=[CANCELED, SUCCEEDED]), "state IN ('CANCELED', 'SUCCEEDED')"),
    ]
    for kw, where in cases:
        want = await _expected(hist, tenant, app, where)
        assert want, where
        assert [t.task_id for t in await _all_pages(hist, tenant, app, 4, **kw)] == want, where
        assert await hist.count(tenant, app, **kw) == len(want), where


async def test_time_bounds_are_on_the_sort_time(hist, mix):
    tenant, app = mix
    (row,) = await hist.sql(1, "SELECT min(finished_at) AS f FROM tasks WHERE tenant_id = $1 AND app_id = $2 "
                               "AND state = 'SUCCEEDED'", tenant, app)
    at = row["f"]
    since, until = tasks_pb2.TaskFilter(), tasks_pb2.TaskFilter()
    since.since.FromDatetime(at)
    until.until.FromDatetime(at)
    from_at = await _expected(hist, tenant, app, "coalesce(finished_at, created_at) >= $3", at)
    before = await _expected(hist, tenant, app, "coalesce(finished_at, created_at) < $3", at)
    assert from_at and before and len(from_at) + len(before) == 24
    assert [t.task_id for t in await _all_pages(hist, tenant, app, 7, since=since.since)] == from_at
    assert [t.task_id for t in await _all_pages(hist, tenant, app, 7, until=until.until)] == before
    assert await hist.count(tenant, app, since=since.since) == len(from_at)


async def test_listed_tasks_carry_their_fields(hist, mix):
    tenant, app = mix
    (first,) = (await hist.list_page(tenant, app, page_size=1, states=[FAILED])).tasks
    full = await hist.get(first.task_id, tenant)
    assert first.state == FAILED and first.error.error_class in ("IOError", "ValueError")
    full.ClearField("attempts")
    assert first == full


async def test_bad_list_requests_are_refused(hist):
    tenant, app = unique("t"), unique("app")
    for kw, needle in ((dict(cursor="yesterday|x"), "cursor"), (dict(page_size=5000), "page_size")):
        with pytest.raises(grpc.aio.AioRpcError) as e:
            await hist.list_page(tenant, app, **kw)
        assert e.value.code() == grpc.StatusCode.INVALID_ARGUMENT and needle in e.value.details()
    with pytest.raises(grpc.aio.AioRpcError) as e:
        await hist.list_page(tenant, "")
    assert e.value.code() == grpc.StatusCode.INVALID_ARGUMENT and "app_id" in e.value.details()


async def test_the_dead_letter_search_is_an_index_scan(make_hist):
    hist = await make_hist(check_logs=False)  # rows loaded by SQL, without transition logs
    # 20k finished tasks of one app, a few of them FAILED: the page must not read the rest.
    await hist.sql(1, """
        INSERT INTO tasks (task_id, tenant_id, app_id, queue, task_type, state, max_attempts, payload,
                           retry_policy, timeouts, run_at, created_at, updated_at, finished_at, error_class)
        SELECT gen_random_uuid(), 'big', 'app', 'default', 'work', CASE WHEN g % 1000 = 0 THEN 'FAILED'
               ELSE 'SUCCEEDED' END, 5, '1'::bytea, '{}', '{}', now(), now(), now(),
               now() - make_interval(secs => g), CASE WHEN g % 1000 = 0 THEN 'IOError' END
          FROM generate_series(1, 20000) g""")
    await hist.sql(1, "ANALYZE tasks")
    args = ["big", "app", ["FAILED"], [], None, None, None, DAWN, NEVER, NEVER, uuid.UUID(MAX_ID), 11]
    plan = await hist.sql(1, "EXPLAIN (ANALYZE, BUFFERS, FORMAT JSON) " + QUERIES["task_list_page"], *args)
    text = json.dumps(plan[0][0] if isinstance(plan[0][0], list) else json.loads(plan[0][0]))
    assert "tasks_finished" in text and "Seq Scan" not in text, text
    root = json.loads(plan[0][0])[0]["Plan"]
    touched = root["Shared Hit Blocks"] + root["Shared Read Blocks"]
    assert touched < 60, f"the dead-letter page touched {touched} blocks"
    page = await hist.list_page("big", "app", page_size=10, states=[FAILED])
    assert len(page.tasks) == 10 and page.next_cursor
    assert await hist.count("big", "app", states=[FAILED]) == 20
    # The cursor is "<sort time RFC 3339>|<task_id>" of the last task.
    at, tid = page.next_cursor.split("|")
    assert tid == page.tasks[-1].task_id
    assert dt.datetime.fromisoformat(at.replace("Z", "+00:00")) == page.tasks[-1].finished_at.ToDatetime(
        tzinfo=dt.UTC)
