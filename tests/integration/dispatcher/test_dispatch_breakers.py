"""Circuit breakers through the real dispatcher, in front of the fake history,
on a real breakers database: crashes open a breaker and every LeaseTasks then
leaves that type out while other types and tenants flow; after the cool-down
exactly one probe goes (its success closes, its crash reopens, its silence
lets another through); ResetBreaker closes at once; a restarted dispatcher
keeps the breaker from its first poll."""

from __future__ import annotations

import asyncio

import grpc
import pytest
from dispatch_helpers import AUTH, poll, wait_until

from ratchet.api.tasks.v1 import breakers_pb2 as bpb
from ratchet.internal.dispatcher.v1 import dispatcher_pb2 as dpb
from ratchet.internal.dispatcher.v1 import dispatcher_pb2_grpc as dgrpc
from ratchet.internal.worker.v1 import worker_pb2 as wpb
from ratchet.services.dispatcher.breakers import BreakerKey

pytestmark = pytest.mark.timeout(60)

POISON = ("tenant-a", "app", "poison")
KEY = BreakerKey(*POISON)
KILLED = "sandbox process exited with signal 9 (SIGKILL) while running the handler"


@pytest.fixture
async def breakers(make_dispatcher, stub_for, fresh_db, history):
    """make(**config) -> (server, DispatchService stub, BreakerAdminService stub), on a fresh breakers database."""
    dsn = fresh_db("breakers")
    channels = []

    async def make(**overrides):
        fields = dict(dsn=dsn, breaker_crash_threshold=3, breaker_window_s=60.0, breaker_cooldown_s=60.0,
                      shard_ids=[0, 1], refresh_s=0.05)
        fields.update(overrides)
        server = await make_dispatcher(**fields)
        channel = grpc.aio.insecure_channel(server.target)
        channels.append(channel)
        return server, await stub_for(server), dgrpc.BreakerAdminServiceStub(channel)

    yield make
    for channel in channels:
        await channel.close()


def add(history, n: int, shard: int = 0, tenant: str = "tenant-a", task_type: str = "poison") -> list[str]:
    return [history.fake.add_task(shard, tenant_id=tenant, task_type=task_type) for _ in range(n)]


async def finish(stub, tasks, crashed: bool) -> None:
    outcome = wpb.COMPLETION_OUTCOME_CRASHED if crashed else wpb.COMPLETION_OUTCOME_SUCCEEDED
    completions = []
    for t in tasks:
        c = wpb.Completion(shard_id=t.shard_id, task_id=t.task_id, lease_epoch=t.lease_epoch, outcome=outcome,
                           tenant_id=t.tenant_id, app_id=t.app_id, task_type=t.task_type)
        if crashed:
            c.error.error_class, c.error.message = "SandboxCrashed", KILLED
        completions.append(c)
    await stub.Complete(wpb.CompleteRequest(worker_id="agent-1", completions=completions), metadata=AUTH,
                        timeout=5)


async def listed(admin, tenant: str = "tenant-a", app: str = "app") -> dict[str, bpb.Breaker]:
    reply = await admin.ListBreakers(dpb.ListBreakersRequest(tenant_id=tenant, app_id=app), timeout=5)
    return {b.task_type: b for b in reply.breakers}


async def listed_until(admin, check, timeout: float = 5.0) -> dict[str, bpb.Breaker]:
    """ListBreakers until `check(breakers)` holds (events are written by the breaker loop, just after)."""
    deadline = asyncio.get_running_loop().time() + timeout
    while True:
        got = await listed(admin)
        if check(got):
            return got
        assert asyncio.get_running_loop().time() < deadline, f"ListBreakers never matched: {got}"
        await asyncio.sleep(0.02)


def lease_limits(history, since: int = 0) -> list[dict]:
    """The type limits of every LeaseTasks call after the first `since` calls."""
    return [{(lim.tenant_id, lim.app_id, lim.task_type): lim.max_tasks for lim in c.request.type_limits}
            for c in history.fake.calls_of("LeaseTasks")[since:]]


async def trip(server, stub, history) -> None:
    """Three crashes of tenant-a's poison type: the breaker opens."""
    add(history, 3)
    tasks = await poll(stub, capacity=3, max_wait=2)
    assert len(tasks) == 3
    await finish(stub, tasks, crashed=True)
    await wait_until(lambda: KEY in server.gate.breakers, what="the breaker to open")


async def test_crashes_open_the_breaker_and_only_that_type_of_that_app_is_paused(breakers, history):
    server, stub, admin = await breakers()
    add(history, 2)
    first = await poll(stub, capacity=2, max_wait=2)
    await finish(stub, first, crashed=True)
    counting = await listed_until(admin, lambda got: "poison" in got and got["poison"].crashes == 2)
    assert counting["poison"].state == bpb.BREAKER_STATE_CLOSED  # 2 < 3: counting, not open
    await trip(server, stub, history)
    b = (await listed_until(admin, lambda got: got["poison"].crashes == 5))["poison"]
    assert b.state == bpb.BREAKER_STATE_OPEN
    assert b.reason == f"3 sandbox crashes in 60 s; last: SandboxCrashed: {KILLED}"
    assert len(b.last_crashes) == 5 and b.last_crashes[0].error_class == "SandboxCrashed"
    assert b.probe_at.ToDatetime() > b.opened_at.ToDatetime()

    calls = len(history.fake.calls_of("LeaseTasks"))
    paused = add(history, 4)
    flowing = add(history, 2, task_type="good") + add(history, 2, shard=1, tenant="tenant-b") + \
        [history.fake.add_task(1, tenant_id="tenant-a", app_id="other-app", task_type="poison")]
    got = []
    while len(got) < len(flowing):
        got += await poll(stub, capacity=10, max_wait=2)
    assert sorted(t.task_id for t in got) == sorted(flowing)
    assert not await poll(stub, capacity=10, max_wait=0.3)
    assert all(history.fake.tasks[t].state == 1 for t in paused)  # still ENQUEUED
    assert all(limits == {POISON: 0} for limits in lease_limits(history, calls))
    assert set(await listed(admin, "tenant-b")) == set()  # another tenant's breakers are its own


async def test_after_the_cool_down_exactly_one_probe_and_its_success_closes(breakers, history):
    server, stub, admin = await breakers(breaker_cooldown_s=0.5)
    await trip(server, stub, history)
    waiting = add(history, 3) + add(history, 3, shard=1)
    await wait_until(lambda: server.gate.breakers[KEY].state == "HALF_OPEN", what="HALF_OPEN")
    (probe,) = await poll(stub, capacity=10, max_wait=2)
    assert probe.task_id in waiting
    assert not await poll(stub, capacity=10, max_wait=0.5)  # one probe, not one per shard or per poll
    assert sum(1 for limits in lease_limits(history) if limits.get(POISON) == 1) >= 1
    await wait_until(lambda: server.gate.breakers[KEY].probe_task_id == probe.task_id, what="probe recorded")
    assert (await listed(admin))["poison"].state == bpb.BREAKER_STATE_HALF_OPEN
    await finish(stub, [probe], crashed=False)
    await wait_until(lambda: KEY not in server.gate.breakers, what="the breaker to close")
    got = []
    while len(got) < 5:
        got += await poll(stub, capacity=10, max_wait=2)
    assert sorted(t.task_id for t in got) == sorted(set(waiting) - {probe.task_id})
    assert await listed(admin) == {}  # closed, and the counts were cleared


async def test_a_probe_that_crashes_reopens_with_a_new_cool_down(breakers, history):
    server, stub, admin = await breakers(breaker_cooldown_s=0.5)
    await trip(server, stub, history)
    first_opened = (await listed(admin))["poison"].opened_at.ToDatetime()
    add(history, 2)
    await wait_until(lambda: server.gate.breakers[KEY].state == "HALF_OPEN", what="HALF_OPEN")
    (probe,) = await poll(stub, capacity=10, max_wait=2)
    await wait_until(lambda: server.gate.breakers[KEY].probe_task_id == probe.task_id, what="probe recorded")
    await finish(stub, [probe], crashed=True)
    await wait_until(lambda: server.gate.breakers[KEY].state == "OPEN", what="OPEN again")
    b = (await listed(admin))["poison"]
    assert b.state == bpb.BREAKER_STATE_OPEN and b.opened_at.ToDatetime() > first_opened
    assert b.reason.startswith(f"the probe task {probe.task_id} crashed")
    assert b.last_crashes[0].task_id == probe.task_id


async def test_a_probe_with_no_completion_lets_another_through_after_two_lease_durations(breakers, history):
    server, stub, _ = await breakers(breaker_cooldown_s=0.3, lease_duration_s=0.5)
    await trip(server, stub, history)
    # On both shards: a round gives the probe token to the first shard it asks, and a token that
    # finds nothing there waits for the next wake-up (the fallback tick is 1 s while the watch
    # stream is live).
    add(history, 3)
    add(history, 3, shard=1)
    await wait_until(lambda: server.gate.breakers[KEY].state == "HALF_OPEN", what="HALF_OPEN")
    (lost,) = await poll(stub, capacity=10, max_wait=2)  # its agent dies: no completion, ever
    leased_at = asyncio.get_running_loop().time()
    (second,) = await poll(stub, capacity=10, max_wait=3)
    waited = asyncio.get_running_loop().time() - leased_at
    assert second.task_id != lost.task_id
    assert 0.7 < waited < 2.5, f"the second probe went {waited:.2f}s after the first (timeout 1 s)"


async def test_reset_closes_at_once_and_clears_the_counts(breakers, history):
    server, stub, admin = await breakers()
    await trip(server, stub, history)
    paused = add(history, 2)
    assert not await poll(stub, capacity=10, max_wait=0.2)
    request = dpb.ResetBreakerRequest(tenant_id="tenant-a", app_id="app", task_type="poison")
    reply = await admin.ResetBreaker(request, timeout=5)
    assert reply.breaker.state == bpb.BREAKER_STATE_CLOSED and reply.breaker.crashes == 0
    assert KEY not in server.gate.breakers  # effective for the very next poll
    assert sorted(t.task_id for t in await poll(stub, capacity=10, max_wait=2)) == sorted(paused)
    assert await listed(admin) == {}
    again = await admin.ResetBreaker(request, timeout=5)  # idempotent
    assert again.breaker.state == bpb.BREAKER_STATE_CLOSED
    unknown = await admin.ResetBreaker(dpb.ResetBreakerRequest(tenant_id="t", app_id="a", task_type="never"),
                                       timeout=5)
    assert unknown.breaker.task_type == "never" and unknown.breaker.state == bpb.BREAKER_STATE_CLOSED


async def test_a_restarted_dispatcher_keeps_the_breaker_from_its_first_poll(breakers, history):
    server, stub, _ = await breakers()
    await trip(server, stub, history)
    await server.stop(grace=0.5)
    calls = len(history.fake.calls_of("LeaseTasks"))
    add(history, 2)
    _fresh, stub2, admin2 = await breakers(refresh_s=30.0)  # no refresh tick: only the start-up load
    assert not await poll(stub2, capacity=10, max_wait=0.3)
    assert lease_limits(history, calls) and all(limits == {POISON: 0} for limits in lease_limits(history, calls))
    b = (await listed(admin2))["poison"]
    assert b.state == bpb.BREAKER_STATE_OPEN and b.crashes == 3


async def test_bad_admin_requests_are_refused_naming_the_field(breakers):
    _, _, admin = await breakers()
    with pytest.raises(grpc.aio.AioRpcError) as err:
        await admin.ListBreakers(dpb.ListBreakersRequest(tenant_id="", app_id="app"), timeout=5)
    assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT and "tenant_id" in err.value.details()
    with pytest.raises(grpc.aio.AioRpcError) as err:
        await admin.ResetBreaker(dpb.ResetBreakerRequest(tenant_id="t", app_id="a"), timeout=5)
    assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT and "task_type" in err.value.details()


async def test_two_dispatcher_processes_on_one_database_let_one_probe_through_between_them(breakers, history):
    one, stub_one, _ = await breakers(shard_ids=[0], breaker_cooldown_s=0.5)
    two, stub_two, _ = await breakers(shard_ids=[1], breaker_cooldown_s=0.5)
    add(history, 3)
    await finish(stub_one, await poll(stub_one, capacity=3, max_wait=2), crashed=True)
    await wait_until(lambda: KEY in one.gate.breakers and KEY in two.gate.breakers, what="both see it open")
    waiting = add(history, 3, shard=0) + add(history, 3, shard=1)
    await wait_until(lambda: one.gate.breakers[KEY].state == two.gate.breakers[KEY].state == "HALF_OPEN",
                     what="both HALF_OPEN")
    got = await asyncio.gather(*(poll(stub, capacity=10, max_wait=1.5) for stub in (stub_one, stub_two)))
    probes = [t.task_id for tasks in got for t in tasks]
    assert len(probes) == 1 and probes[0] in waiting, probes
    assert one.gate.has_token(KEY) + two.gate.has_token(KEY) == 0  # the one claim was spent


async def test_with_the_breakers_database_away_dispatch_goes_on_and_crashes_are_written_later(breakers, history):
    server, stub, admin = await breakers()
    await trip(server, stub, history)
    pool, server.store.pool = server.store.pool, None  # as if the database went away
    paused, other = add(history, 1), add(history, 1, task_type="good") + add(history, 2, task_type="flaky")
    got = await poll(stub, capacity=10, max_wait=2)
    assert sorted(t.task_id for t in got) == sorted(other)  # still paused from memory; the rest flows
    flaky = [t for t in got if t.task_type == "flaky"]
    await finish(stub, flaky, crashed=True)  # answered at once: history does not wait for the breakers
    with pytest.raises(grpc.aio.AioRpcError) as err:
        await admin.ListBreakers(dpb.ListBreakersRequest(tenant_id="tenant-a", app_id="app"), timeout=5)
    assert err.value.code() == grpc.StatusCode.UNAVAILABLE
    await asyncio.sleep(0.3)  # the loop retries meanwhile
    server.store.pool = pool
    got = await listed_until(admin, lambda b: "flaky" in b and b["flaky"].crashes == 2)
    assert got["poison"].state == bpb.BREAKER_STATE_OPEN
    assert history.fake.tasks[paused[0]].state == 1  # never leased


async def suspend(stub, tasks) -> None:
    """Complete the tasks SUSPENDED, as workflow activations stopping at a sleep or a wait."""
    completions = [wpb.Completion(shard_id=t.shard_id, task_id=t.task_id, lease_epoch=t.lease_epoch,
                                  outcome=wpb.COMPLETION_OUTCOME_SUSPENDED, suspend_position=0,
                                  tenant_id=t.tenant_id, app_id=t.app_id, task_type=t.task_type) for t in tasks]
    reply = await stub.Complete(wpb.CompleteRequest(worker_id="agent-1", completions=completions), metadata=AUTH,
                                timeout=5)
    assert all(r.accepted for r in reply.results)


async def test_suspensions_are_no_crashes_and_a_probe_that_suspends_closes_the_breaker(breakers, history):
    server, stub, admin = await breakers(breaker_cooldown_s=0.5)
    # Twice the threshold of suspensions, and a crash to show the breakers were listening.
    add(history, 6)
    suspended = await poll(stub, capacity=6, max_wait=2)
    assert len(suspended) == 6
    await suspend(stub, suspended)
    add(history, 1)
    await finish(stub, await poll(stub, capacity=1, max_wait=2), crashed=True)
    got = await listed_until(admin, lambda b: "poison" in b and b["poison"].crashes == 1)
    assert got["poison"].state == bpb.BREAKER_STATE_CLOSED and len(got["poison"].last_crashes) == 1
    assert KEY not in server.gate.breakers
    # An open breaker's probe that suspends ran without crashing its sandbox: it closes.
    await trip(server, stub, history)
    add(history, 2)
    await wait_until(lambda: server.gate.breakers[KEY].state == "HALF_OPEN", what="HALF_OPEN")
    (probe,) = await poll(stub, capacity=10, max_wait=2)
    await wait_until(lambda: server.gate.breakers[KEY].probe_task_id == probe.task_id, what="probe recorded")
    await suspend(stub, [probe])
    await wait_until(lambda: KEY not in server.gate.breakers, what="the breaker to close")
