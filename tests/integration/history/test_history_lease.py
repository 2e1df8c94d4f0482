"""LeaseTasks: charging, fencing, round-robin fairness, SKIP LOCKED."""

from __future__ import annotations

import asyncio
import json
import time

import grpc
import pytest

from ratchet.api.tasks.v1 import tasks_pb2
from ratchet.services.history.policy import duration

from .helpers import unique


async def test_a_lease_charges_an_attempt_bumps_the_epoch_and_sets_one_lease_timer(hist):
    tenant, app = unique("t"), unique("app")
    task_id = await hist.create_one(tenant, app, timeouts=tasks_pb2.Timeouts(start_to_close=duration(120)))
    leased = await hist.lease_one(app, worker="agent-7", lease_s=20)
    assert (leased.task_id, leased.attempt, leased.lease_epoch, leased.max_attempts) == (task_id, 1, 1, 5)
    assert leased.tenant_id == tenant and leased.app_id == app and leased.payload_json == b'{"n":1}'
    assert leased.lease_duration.seconds == 20 and leased.start_to_close.seconds == 120
    got = await hist.get(task_id, tenant)
    assert got.state == tasks_pb2.TASK_STATE_LEASED and got.version == 2 and got.HasField("started_at")
    (att,) = got.attempts
    assert (att.attempt, att.lease_epoch, att.worker_id, att.outcome) == (1, 1, "agent-7",
                                                                            tasks_pb2.ATTEMPT_OUTCOME_RUNNING)
    assert not att.HasField("finished_at")
    timers = await hist.timers(task_id)
    assert set(timers) == {"lease"} and timers["lease"]["lease_epoch"] == 1
    (row,) = await hist.sql(1, "SELECT lease_expires_at FROM tasks WHERE task_id = $1::uuid", task_id)
    assert timers["lease"]["fire_at"] == row["lease_expires_at"]  # expiry (20 s) before the deadline (120 s)
    assert await hist.log(task_id) == [(1, None, "ENQUEUED", 0), (2, "ENQUEUED", "LEASED", 1)]


async def test_a_leased_task_is_not_leased_again(hist):
    tenant, app = unique("t"), unique("app")
    await hist.create_one(tenant, app)
    assert len((await hist.lease(app)).tasks) == 1
    again = await hist.lease(app)
    assert list(again.tasks) == [] and not again.more


async def test_app_filter_and_empty_shard(hist):
    tenant, mine, other = unique("t"), unique("app"), unique("app")
    await hist.create(hist.task(tenant, mine), hist.task(tenant, other))
    got = await hist.lease(mine, max_tasks=10)
    assert {t.app_id for t in got.tasks} == {mine}


async def test_concurrent_leases_take_disjoint_tasks(hist):
    tenant, app = unique("t"), unique("app")
    await hist.create(*[hist.task(tenant, app) for _ in range(40)])
    batches = await asyncio.gather(*(hist.lease(app, max_tasks=10, worker=f"w{i}") for i in range(6)))
    ids = [t.task_id for b in batches for t in b.tasks]
    assert len(ids) == 40 and len(set(ids)) == 40


async def test_one_tenants_100k_backlog_does_not_delay_another_tenants_single_task(make_hist):
    hist = await make_hist()
    # Bulk-load the backlog with SQL: the point is the lease, not 100 enqueue calls.
    await hist.sql(1, """
        INSERT INTO tasks (task_id, tenant_id, app_id, queue, task_type, state, max_attempts, payload,
                           retry_policy, timeouts, run_at, created_at, updated_at)
        SELECT gen_random_uuid(), 'big', 'app', 'default', 'work', 'ENQUEUED', 5, '1'::bytea,
               '{"max_attempts": 5}', '{"start_to_close_s": 600}', clock_timestamp() - interval '1 hour',
               clock_timestamp(), clock_timestamp()
          FROM generate_series(1, 100000)""")  # the row implies its create transition (migration 0008)
    await hist.sql(1, "ANALYZE tasks")
    small = await hist.create_one("small", "app")
    started = time.monotonic()
    got = await hist.lease("app", max_tasks=10)
    elapsed = time.monotonic() - started
    assert small in [t.task_id for t in got.tasks]
    assert len(got.tasks) == 10 and got.more
    assert sum(t.tenant_id == "big" for t in got.tasks) == 9  # the leftover share goes to the big tenant
    assert elapsed < 3.0, f"leasing from a 100k backlog took {elapsed:.2f}s"  # loose: the CPU is shared
    plan = await hist.sql(1, "EXPLAIN (ANALYZE, BUFFERS, FORMAT JSON) " + _ready_tenants_sql(),
                          "", None, [], 10, [], [], [])
    root = json.loads(plan[0][0])[0]["Plan"]
    touched = root["Shared Hit Blocks"] + root["Shared Read Blocks"]
    assert touched < 100, f"the tenant scan touched {touched} blocks: it must not read the backlog"


def _ready_tenants_sql() -> str:
    from ratchet.services.history.store import QUERIES
    return QUERIES["task_ready_tenants"]


async def test_round_robin_rotates_over_tenants_and_wraps(make_hist):
    hist = await make_hist()
    for tenant in ("a", "b", "c"):
        await hist.create(*[hist.task(tenant, "app") for _ in range(4)])
    first = await hist.lease("app", max_tasks=2)
    assert [t.tenant_id for t in first.tasks] == ["a", "b"] and first.next_tenant_cursor == "b" and first.more
    second = await hist.lease("app", max_tasks=2, cursor=first.next_tenant_cursor)
    assert [t.tenant_id for t in second.tasks] == ["c", "a"] and second.next_tenant_cursor == "a"
    third = await hist.lease("app", max_tasks=3, cursor=second.next_tenant_cursor)
    assert [t.tenant_id for t in third.tasks] == ["b", "c", "a"]
    # Equal shares when every tenant can fill one; the rest goes to those with more.
    rest = await hist.lease("app", max_tasks=7, cursor=third.next_tenant_cursor)
    assert sorted(t.tenant_id for t in rest.tasks) == ["a", "b", "b", "c", "c"] and not rest.more
    assert (await hist.lease("app", max_tasks=5)).tasks == []


async def test_bad_lease_requests_are_refused(hist):
    for kw, needle in (({"max_tasks": 0}, "max_tasks"), ({"worker": ""}, "worker_id"),
                       ({"lease_s": 7200}, "lease_duration")):
        with pytest.raises(grpc.aio.AioRpcError) as e:
            await hist.lease(unique("app"), **kw)
        assert e.value.code() == grpc.StatusCode.INVALID_ARGUMENT and needle in e.value.details()


async def test_ready_tenants_probe_reads_the_dispatch_index_not_the_table(make_hist):
    """The "has due work" probe of task_ready_tenants, as the generic plan a pooled connection
    ends up with: with finished tasks in front of the ready ones it must read the dispatch
    index in run_at order. (As an EXISTS it was a sequential scan of `tasks` from the start,
    1.6 ms per lease call in a 20k drain and growing; docs/benchmarks/findings.md.)"""
    import asyncpg

    from ratchet.services.history.store import QUERIES
    h = await make_hist(check_logs=False)  # the rows are written directly, without transition logs
    conn = await asyncpg.connect(next(iter(h.dsns.values())))
    try:
        # A drain's picture: statistics taken while everything was ready, then the tasks at the
        # start of the table leased and finished (autovacuum has not analyzed since).
        await conn.execute("""
            INSERT INTO tasks (task_id, tenant_id, app_id, queue, task_type, max_attempts, payload,
                               retry_policy, timeouts, created_at, state, run_at, updated_at)
            SELECT gen_random_uuid(), 'tenant-plan', 'app', 'default', 'noop', 3, '\\x6e756c6c'::bytea,
                   '{}', '{}', now(), 'ENQUEUED', now() - interval '1 hour' + g * interval '1 ms', now()
              FROM generate_series(1, 3100) g""")
        await conn.execute("ANALYZE tasks")
        await conn.execute("""
            UPDATE tasks SET state = 'SUCCEEDED', finished_at = now()
             WHERE task_id IN (SELECT task_id FROM tasks ORDER BY run_at LIMIT 3000)""")
        await conn.execute("SET plan_cache_mode = force_generic_plan")
        params = "'', NULL, '{}'::text[], 10, '{}'::text[], '{}'::text[], '{}'::text[]"
        await conn.execute(f"PREPARE ready AS {QUERIES['task_ready_tenants']}")
        plan = "\n".join(r[0] for r in await conn.fetch(f"EXPLAIN EXECUTE ready({params})"))
        assert "Seq Scan on tasks r" not in plan and "tasks_dispatch on tasks r" in plan, plan
        assert [r[0] for r in await conn.fetch(f"EXECUTE ready({params})")] == ["tenant-plan"]
    finally:
        await conn.close()


async def test_default_policy_and_timeouts_are_stored_empty_and_lease_as_the_defaults(hist):
    """A task in the default queue with the default retry policy and timeouts stores NULL
    for all three (migration 0013; {} before it, still read the same); the lease still reads a 600 s
    start_to_close from it and hands out queue 'default', and an explicit null start_to_close
    (unlimited) sets no deadline."""
    tenant, app = unique("t"), unique("app")
    default, unlimited = await hist.create_one(tenant, app), await hist.create_one(tenant, app)
    (row,) = await hist.sql(1, "SELECT queue, retry_policy::text, timeouts::text FROM tasks WHERE task_id = $1::uuid",
                            default)
    assert (row["queue"], row["retry_policy"], row["timeouts"]) == (None, None, None)
    await hist.sql(1, """UPDATE tasks SET timeouts = '{"start_to_close_s": null}' WHERE task_id = $1::uuid""",
                   unlimited)
    leased = {t.task_id: t for t in (await hist.lease(app, max_tasks=2, lease_s=20)).tasks}
    assert leased[default].start_to_close.seconds == 600 and not leased[unlimited].HasField("start_to_close")
    assert leased[default].queue == "default"
    rows = {str(r["task_id"]): r for r in await hist.sql(
        1, "SELECT task_id, attempt_deadline - updated_at AS d FROM tasks WHERE task_id = ANY($1::uuid[])",
        [default, unlimited])}
    assert rows[default]["d"].total_seconds() == 600 and rows[unlimited]["d"] is None
    got = await hist.get(default, tenant)
    assert got.retry.max_attempts == 5 and got.retry.cap.seconds == 3600 and got.retry.base.seconds == 1
    assert got.retry.factor == 2.0 and got.retry.jitter and got.timeouts.start_to_close.seconds == 600
    assert got.queue == "default"
