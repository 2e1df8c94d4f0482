"""The dispatcher in front of the REAL history service (its own process, as
in production) on real shard databases: enqueue with CreateTasks, lease
through Poll, Complete, and read the task back; a delayed task is leased
right when it is due.

History fires its own timers: every timer these tests wait for (a delay, a
retry backoff, a lease expiry) reaches the parked poll through history's
timer loop and its WatchReady event; the dispatcher asks history for nothing
but leases, heartbeats and completions."""

from __future__ import annotations

import asyncio
import hashlib
import json
import pathlib
import subprocess
import sys
import time

import grpc
import pytest
import pytest_asyncio
from dispatch_helpers import AUTH, TOKEN, poll, seconds
from grpc_health.v1 import health_pb2, health_pb2_grpc

from ratchet.api.tasks.v1 import tasks_pb2 as tpb
from ratchet.internal.history.v1 import history_pb2 as hpb
from ratchet.internal.history.v1 import history_pb2_grpc as hgrpc
from ratchet.internal.worker.v1 import worker_pb2 as wpb
from ratchet.internal.worker.v1 import worker_pb2_grpc as wgrpc
from ratchet.libs.pg.cluster import free_port
from ratchet.libs.shardmap import ShardMap, child_id, new_task_id
from ratchet.services.dispatcher.config import DispatcherConfig
from ratchet.services.dispatcher.server import DispatcherServer

pytestmark = pytest.mark.timeout(90)
HISTORY_MAIN = pathlib.Path(__file__).resolve().parents[3] / "services" / "history" / "__main__.py"
SHARDS = [0, 1]


def _wait_serving(port: int, proc: subprocess.Popen, timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    with grpc.insecure_channel(f"127.0.0.1:{port}") as channel:
        stub = health_pb2_grpc.HealthStub(channel)
        while time.monotonic() < deadline:
            if proc.poll() is not None:
                raise RuntimeError(f"history exited with {proc.returncode}: {proc.stdout.read()}")
            try:
                if stub.Check(health_pb2.HealthCheckRequest(), timeout=1).status == \
                        health_pb2.HealthCheckResponse.SERVING:
                    return
            except grpc.RpcError:
                pass
            time.sleep(0.1)
    raise TimeoutError(f"history did not report SERVING within {timeout}s")


class Real:
    def __init__(self, history: hgrpc.HistoryServiceStub, dispatch: wgrpc.DispatchServiceStub,
                 server: DispatcherServer):
        self.history, self.dispatch, self.server = history, dispatch, server
        self.shard_map = ShardMap.even(SHARDS)

    def task_id_on(self, shard: int) -> str:
        while True:
            task_id = new_task_id()
            if self.shard_map.shard_for_task(task_id) == shard:
                return task_id

    async def create(self, shard: int, tenant: str, delay_s: float | None = None,
                     retry_base_s: float | None = None) -> str:
        task = hpb.NewTask(task_id=self.task_id_on(shard), tenant_id=tenant, app_id="app", task_type="work",
                           queue="default", payload_json=b'{"n": 1}', fingerprint=f"fp-{tenant}")
        if delay_s is not None:
            task.delay.CopyFrom(seconds(delay_s))
        if retry_base_s is not None:
            task.retry.CopyFrom(tpb.RetryPolicy(max_attempts=3, base=seconds(retry_base_s), factor=1.0,
                                                jitter=False))
        reply = await self.history.CreateTasks(hpb.CreateTasksRequest(shard_id=shard, tasks=[task]), timeout=10)
        return reply.results[0].task_id


@pytest_asyncio.fixture(scope="module")
async def real(pg_cluster, tmp_path_factory):
    if not HISTORY_MAIN.exists():
        pytest.skip("services/history has no __main__.py yet")
    tag = free_port()
    shards = {}
    for s in SHARDS:
        pg_cluster.create_database(f"disp_shard{s}_{tag}")
        shards[str(s)] = pg_cluster.dsn(f"disp_shard{s}_{tag}")
    pg_cluster.create_database(f"disp_breakers_{tag}")
    config = tmp_path_factory.mktemp("dispatcher-real") / "history.json"
    hport = free_port()
    config.write_text(json.dumps({"shards": shards, "grpc_port": hport}))
    proc = subprocess.Popen([sys.executable, "-m", "ratchet.services.history", "--config", str(config)],
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    server = channel = history_channel = None
    try:
        await asyncio.to_thread(_wait_serving, hport, proc)
        server = DispatcherServer(DispatcherConfig(
            history_target=f"127.0.0.1:{hport}", shard_ids=SHARDS,
            host_token_sha256=[hashlib.sha256(TOKEN.encode()).hexdigest()],
            dsn=pg_cluster.dsn(f"disp_breakers_{tag}")))
        await server.start()
        channel = grpc.aio.insecure_channel(server.target)
        history_channel = grpc.aio.insecure_channel(f"127.0.0.1:{hport}")
        yield Real(hgrpc.HistoryServiceStub(history_channel), wgrpc.DispatchServiceStub(channel), server)
    finally:
        for ch in (channel, history_channel):
            if ch is not None:
                await ch.close()
        if server is not None:
            await server.stop(grace=1)
        proc.terminate()
        try:
            proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=10)


async def test_enqueue_poll_complete_reaches_succeeded(real):
    ids = {await real.create(0, "tenant-rt"), await real.create(1, "tenant-rt")}
    tasks = await poll(real.dispatch, capacity=10, max_wait=5)
    assert {t.task_id for t in tasks} == ids
    assert all(t.attempt == 1 and t.lease_epoch >= 1 for t in tasks)
    done = [wpb.Completion(shard_id=t.shard_id, task_id=t.task_id, lease_epoch=t.lease_epoch,
                           outcome=wpb.COMPLETION_OUTCOME_SUCCEEDED, result_json=b'{"ok": true}') for t in tasks]
    request = wpb.CompleteRequest(worker_id="agent-1", completions=done)
    reply = await real.dispatch.Complete(request, metadata=AUTH, timeout=10)
    assert [(r.task_id, r.accepted, r.state) for r in reply.results] == \
        [(t.task_id, True, tpb.TASK_STATE_SUCCEEDED) for t in tasks]
    for t in tasks:
        got = await real.history.GetTask(hpb.GetTaskRequest(shard_id=t.shard_id, task_id=t.task_id,
                                                            tenant_id="tenant-rt"), timeout=10)
        assert got.task.state == tpb.TASK_STATE_SUCCEEDED
    # A retried completion (the agent never heard back) is not applied twice, and says where the task is.
    again = await real.dispatch.Complete(request, metadata=AUTH, timeout=10)
    assert [(r.accepted, r.state) for r in again.results] == [(False, tpb.TASK_STATE_SUCCEEDED)] * 2


async def test_heartbeat_extends_a_real_lease(real):
    await real.create(1, "tenant-hb")
    (task,) = await poll(real.dispatch, capacity=1, max_wait=5)
    ref = wpb.LeaseRef(shard_id=task.shard_id, task_id=task.task_id, lease_epoch=task.lease_epoch)
    reply = await real.dispatch.Heartbeat(wpb.HeartbeatRequest(worker_id="agent-1", leases=[ref]), metadata=AUTH,
                                          timeout=10)
    assert [r.action for r in reply.results] == [wpb.LEASE_ACTION_CONTINUE]
    stale = wpb.LeaseRef(shard_id=task.shard_id, task_id=task.task_id, lease_epoch=task.lease_epoch + 7)
    reply = await real.dispatch.Heartbeat(wpb.HeartbeatRequest(worker_id="agent-1", leases=[stale]),
                                          metadata=AUTH, timeout=10)
    assert [r.action for r in reply.results] == [wpb.LEASE_ACTION_LEASE_LOST]


async def test_a_delayed_task_is_leased_within_300ms_of_its_due_time(real):
    delay = 1.0
    pending = asyncio.ensure_future(poll(real.dispatch, capacity=1, max_wait=8))
    await asyncio.sleep(0.05)
    task_id = await real.create(0, "tenant-delay", delay_s=delay)
    due = time.monotonic() + delay  # the commit happened before the ack: due no later than this
    tasks = await asyncio.wait_for(pending, 10)
    lag = time.monotonic() - due
    assert [t.task_id for t in tasks] == [task_id]
    assert lag < 0.3, f"leased {lag * 1000:.0f} ms after its due time"
    assert lag > -0.1, f"leased {-lag * 1000:.0f} ms before its due time"


async def test_an_idle_parked_poll_gets_a_new_task_fast(real):
    # The WatchReady event, not the 250 ms tick, must carry it: median well under 100 ms.
    lags = []
    for i in range(5):
        pending = asyncio.ensure_future(poll(real.dispatch, capacity=1, max_wait=5))
        await asyncio.sleep(0.05)
        started = time.monotonic()
        task_id = await real.create(i % 2, f"tenant-idle-{i}")
        tasks = await asyncio.wait_for(pending, 6)
        lags.append(time.monotonic() - started)
        assert [t.task_id for t in tasks] == [task_id]
    lags.sort()
    assert lags[2] < 0.1, f"schedule-to-start samples (s): {lags}"


async def test_with_the_event_stream_live_the_fallback_tick_slows_to_a_second(real):
    # A parked poll makes the stream wanted; history answers with every shard at once,
    # so the stream is live and the tick (one LeaseTasks per shard per wake-up) slows down.
    pending = asyncio.ensure_future(poll(real.dispatch, capacity=1, max_wait=1))
    deadline = time.monotonic() + 5
    while not real.server.watch.live and time.monotonic() < deadline:
        await asyncio.sleep(0.02)
    assert real.server.watch.live, "no ready event arrived on the WatchReady stream"
    assert real.server.tick.interval() == 1.0
    assert await asyncio.wait_for(pending, 5) == []


async def test_a_retry_backoff_fires_on_time(real):
    task_id = await real.create(1, "tenant-retry", retry_base_s=0.4)
    (task,) = await poll(real.dispatch, capacity=1, max_wait=5)
    assert task.task_id == task_id
    failed = wpb.Completion(shard_id=task.shard_id, task_id=task.task_id, lease_epoch=task.lease_epoch,
                            outcome=wpb.COMPLETION_OUTCOME_FAILED,
                            error=tpb.TaskError(error_class="Boom", message="try again"))
    reply = await real.dispatch.Complete(wpb.CompleteRequest(worker_id="agent-1", completions=[failed]),
                                         metadata=AUTH, timeout=10)
    assert [(r.accepted, r.state) for r in reply.results] == [(True, tpb.TASK_STATE_RETRY_WAIT)]
    due = time.monotonic() + 0.4
    (again,) = await asyncio.wait_for(poll(real.dispatch, capacity=1, max_wait=8), 10)
    lag = time.monotonic() - due
    assert again.task_id == task_id and again.attempt == 2
    assert lag < 0.5, f"the retry was leased {lag * 1000:.0f} ms after its backoff ended"


async def test_a_short_lease_expires_on_time(real):
    task_id = await real.create(0, "tenant-lease", retry_base_s=0.01)
    leased = await real.history.LeaseTasks(hpb.LeaseTasksRequest(
        shard_id=0, worker_id="agent-gone", max_tasks=1, lease_duration=seconds(0.5)), timeout=10)
    assert [t.task_id for t in leased.tasks] == [task_id]
    # Nobody heartbeats: the lease check is due in 0.5 s and the retry right after it.
    (again,) = await asyncio.wait_for(poll(real.dispatch, capacity=1, max_wait=8), 10)
    assert again.task_id == task_id and again.attempt == 2


def _step(task: wpb.LeasedTask, op: int, kind: int, position: int, name: str, epoch: int | None = None,
          **fields) -> wpb.StepRequest:
    lease = wpb.LeaseRef(shard_id=task.shard_id, task_id=task.task_id,
                         lease_epoch=task.lease_epoch if epoch is None else epoch)
    return wpb.StepRequest(lease=lease, op=op, kind=kind, position=position, name=name, **fields)


async def _refused(call) -> grpc.aio.AioRpcError:
    with pytest.raises(grpc.aio.AioRpcError) as info:
        await call
    return info.value


async def test_workflow_steps_and_a_suspension_through_the_dispatcher_reach_the_real_history(real):
    # A run is a task (history knows it by its step log only): step, commit, sleep, suspend.
    task_id = await real.create(1, "tenant-wf")
    (task,) = await poll(real.dispatch, capacity=1, max_wait=5)
    assert task.task_id == task_id
    begin, commit = wpb.STEP_OP_BEGIN, wpb.STEP_OP_COMMIT
    run = await real.dispatch.Step(_step(task, begin, wpb.STEP_KIND_STEP, 0, "charge"), metadata=AUTH, timeout=10)
    assert (run.status, run.attempt) == (wpb.STEP_STATUS_RUN, 1)
    done = await real.dispatch.Step(_step(task, commit, wpb.STEP_KIND_STEP, 0, "charge", result_json=b'{"paid": 1}'),
                                    metadata=AUTH, timeout=10)
    assert done.status == wpb.STEP_STATUS_DONE
    again = await real.dispatch.Step(_step(task, begin, wpb.STEP_KIND_STEP, 0, "charge"), metadata=AUTH, timeout=10)
    assert (again.status, json.loads(again.result_json)) == (wpb.STEP_STATUS_DONE, {"paid": 1})  # memoized
    nap = await real.dispatch.Step(_step(task, begin, wpb.STEP_KIND_SLEEP, 1, "nap", duration=seconds(60)),
                                   metadata=AUTH, timeout=10)
    assert nap.status == wpb.STEP_STATUS_SUSPEND and 50 < nap.wake_after.ToTimedelta().total_seconds() <= 60
    # History's refusals come through the dispatcher with their codes and messages.
    stale = await _refused(real.dispatch.Step(_step(task, begin, wpb.STEP_KIND_STEP, 2, "ship",
                                                    epoch=task.lease_epoch + 3), metadata=AUTH, timeout=10))
    assert stale.code() == grpc.StatusCode.FAILED_PRECONDITION and "not current" in stale.details()
    gap = await _refused(real.dispatch.Step(_step(task, begin, wpb.STEP_KIND_STEP, 9, "ship"), metadata=AUTH,
                                            timeout=10))
    assert gap.code() == grpc.StatusCode.INVALID_ARGUMENT, gap.details()
    suspended = wpb.Completion(shard_id=task.shard_id, task_id=task.task_id, lease_epoch=task.lease_epoch,
                               outcome=wpb.COMPLETION_OUTCOME_SUSPENDED, suspend_position=1,
                               wake_after=nap.wake_after, tenant_id=task.tenant_id, app_id=task.app_id,
                               task_type=task.task_type)
    reply = await real.dispatch.Complete(wpb.CompleteRequest(worker_id="agent-1", completions=[suspended]),
                                         metadata=AUTH, timeout=10)
    assert [(r.accepted, r.state) for r in reply.results] == [(True, tpb.TASK_STATE_WAITING)]
    got = await real.history.GetTask(hpb.GetTaskRequest(shard_id=1, task_id=task_id, tenant_id="tenant-wf"),
                                     timeout=10)
    assert got.task.state == tpb.TASK_STATE_WAITING
    # The suspended activation's lease is gone: a late step of it writes nothing.
    late = await _refused(real.dispatch.Step(_step(task, begin, wpb.STEP_KIND_STEP, 2, "ship"), metadata=AUTH,
                                             timeout=10))
    assert late.code() == grpc.StatusCode.FAILED_PRECONDITION


async def test_a_fan_out_begin_through_the_dispatcher_mints_the_same_ids_on_the_real_history(real):
    # 1,000 children (the most that stay on the parent's shard): RUN with the ids history mints,
    # the same ones on a repeated BEGIN (the agent resends StartChildren with them); timed.
    task_id = await real.create(1, "tenant-fan")
    (task,) = await poll(real.dispatch, capacity=1, max_wait=5)
    assert task.task_id == task_id
    children = [wpb.ChildSpec(task_type="charge", payload_json=b'{"order": %d}' % i) for i in range(1_000)]
    begin = _step(task, wpb.STEP_OP_BEGIN, wpb.STEP_KIND_PARALLEL, 0, "fan", children=children,
                  on_failure=wpb.PARALLEL_FAILURE_COLLECT)
    started = time.perf_counter()
    first = await real.dispatch.Step(begin, metadata=AUTH, timeout=10)
    took = time.perf_counter() - started
    assert first.status == wpb.STEP_STATUS_RUN and len(first.child_ids) == 1_000
    assert list(first.child_ids) == [child_id(task_id, 0, i, False) for i in range(1_000)]
    again = await real.dispatch.Step(begin, metadata=AUTH, timeout=10)
    assert (again.status, again.child_ids) == (wpb.STEP_STATUS_RUN, first.child_ids)
    print(f"\n1,000-child BEGIN through the dispatcher to the real history: {took * 1e3:.1f} ms (first), "
          f"the repeat's ids unchanged")
    # Another count at the position is a MISMATCH, passed through as history answers it.
    other = _step(task, wpb.STEP_OP_BEGIN, wpb.STEP_KIND_PARALLEL, 0, "fan", children=children[:3])
    mismatch = await real.dispatch.Step(other, metadata=AUTH, timeout=10)
    assert mismatch.status == wpb.STEP_STATUS_MISMATCH, mismatch
