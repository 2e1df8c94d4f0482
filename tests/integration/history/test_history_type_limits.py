"""LeaseTasks type_limits (circuit breakers): 0 leaves a type out of the call,
N caps it, and other types and tenants keep flowing."""

from __future__ import annotations

import grpc
import pytest

from ratchet.internal.history.v1 import history_pb2 as h

from .helpers import RPC_TIMEOUT


async def _lease(hist, max_tasks: int, limits: list[tuple[str, str, str, int]],
                 cursor: str = "") -> h.LeaseTasksResponse:
    req = h.LeaseTasksRequest(shard_id=1, worker_id="w", max_tasks=max_tasks, tenant_cursor=cursor,
                              type_limits=[h.TaskTypeLimit(tenant_id=t, app_id=a, task_type=x, max_tasks=n)
                                           for t, a, x, n in limits])
    return await hist.stub.LeaseTasks(req, timeout=RPC_TIMEOUT)


async def _backlog(hist, tenant: str, task_type: str, n: int) -> list[str]:
    r = await hist.create(*[hist.task(tenant, "app", task_type=task_type) for _ in range(n)])
    return [x.task_id for x in r.results]


def _kinds(resp) -> list[tuple[str, str]]:
    return sorted((t.tenant_id, t.task_type) for t in resp.tasks)


async def test_a_paused_type_is_left_out_and_its_share_goes_to_other_work(make_hist):
    hist = await make_hist()
    await _backlog(hist, "a", "poison", 20)  # older than the rest: first in run_at order
    await _backlog(hist, "a", "work", 2)
    await _backlog(hist, "b", "work", 1)
    paused = [("a", "app", "poison", 0)]
    got = await _lease(hist, 2, paused)
    assert _kinds(got) == [("a", "work"), ("b", "work")]
    got = await _lease(hist, 10, paused, got.next_tenant_cursor)
    assert _kinds(got) == [("a", "work")] and not got.more
    assert list((await _lease(hist, 10, paused)).tasks) == []
    # Pausing is per (tenant, app, type): the same type name elsewhere is not paused.
    assert len((await _lease(hist, 3, [("a", "other-app", "poison", 0)])).tasks) == 3


async def test_a_tenant_with_only_paused_work_takes_no_share(make_hist):
    hist = await make_hist()
    await _backlog(hist, "a", "poison", 5)
    await _backlog(hist, "b", "work", 3)
    got = await _lease(hist, 3, [("a", "app", "poison", 0)])
    assert _kinds(got) == [("b", "work")] * 3


async def test_a_cap_lets_exactly_that_many_through(make_hist):
    hist = await make_hist()
    await _backlog(hist, "a", "poison", 5)
    await _backlog(hist, "a", "work", 3)
    probe = [("a", "app", "poison", 1)]
    got = await _lease(hist, 10, probe)
    assert _kinds(got) == [("a", "poison")] + [("a", "work")] * 3
    got = await _lease(hist, 10, probe)
    assert _kinds(got) == [("a", "poison")]
    got = await _lease(hist, 10, [])
    assert _kinds(got) == [("a", "poison")] * 3  # no limits: the rest goes


async def test_bad_type_limits_are_refused(hist):
    for limit, needle in ((("a", "app", "x", -1), "max_tasks"), (("", "app", "x", 0), "tenant_id"),
                          (("a", "app", "", 0), "task_type")):
        with pytest.raises(grpc.aio.AioRpcError) as e:
            await _lease(hist, 1, [limit])
        assert e.value.code() == grpc.StatusCode.INVALID_ARGUMENT and needle in e.value.details()
