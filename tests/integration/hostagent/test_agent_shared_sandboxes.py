"""Sandboxes that run several tasks at once (sandbox_concurrency): placement,
crashes that take every attempt in the process, and a lost lease that
retires its sandbox instead of killing the tasks beside it."""

from __future__ import annotations

import asyncio
import json
import os
import pathlib
import signal

import pytest

from ratchet.internal.worker.v1 import worker_pb2
from ratchet.services.hostagent.server import HostAgent
from tests.integration.hostagent.conftest import agent_config
from tests.integration.hostagent.test_agent_stops_tasks import OUTCOME, pid_alive, sandbox_of, until


@pytest.fixture
async def shared_agent(fakes, work_dir):
    port, _dispatcher, _control = fakes
    host_agent = HostAgent(agent_config(port, work_dir, capacity=6, sandbox_concurrency=3))
    await host_agent.start()
    yield host_agent
    await host_agent.stop()


async def test_a_burst_fills_few_sandboxes_and_they_are_reused(shared_agent, fakes):
    _, dispatcher, _ = fakes
    sleepers = [dispatcher.enqueue("sleepy", "0.5") for _ in range(6)]
    await until(lambda: all(sandbox_of(shared_agent, t.task_id) for t in sleepers), what="all six running")
    boxes = {sandbox_of(shared_agent, t.task_id).sandbox_id for t in sleepers}
    assert len(boxes) == 2  # 6 tasks / 3 per sandbox, not one process per task
    for t in sleepers:
        c = await dispatcher.completion_for(t.task_id)
        assert OUTCOME.Name(c.outcome) == "COMPLETION_OUTCOME_SUCCEEDED"
    pids = {json.loads((await dispatcher.completion_for(dispatcher.enqueue("echo").task_id)).result_json)["pid"]
            for _ in range(4)}
    assert pids <= {s.pid for s in shared_agent.pool.sandboxes()} and len(shared_agent.pool.sandboxes()) == 2


async def test_a_crash_fails_every_attempt_the_sandbox_ran(shared_agent, fakes):
    _, dispatcher, _ = fakes
    tasks = [dispatcher.enqueue("sleepy", "30") for _ in range(3)]
    await until(lambda: all(sandbox_of(shared_agent, t.task_id) for t in tasks), what="running")
    (box,) = {sandbox_of(shared_agent, t.task_id) for t in tasks}
    os.kill(box.pid, signal.SIGKILL)
    for t in tasks:
        c = await dispatcher.completion_for(t.task_id, timeout=5)
        assert OUTCOME.Name(c.outcome) == "COMPLETION_OUTCOME_CRASHED" and c.error.error_class == "SandboxCrashed"


async def test_a_lost_lease_retires_its_sandbox_until_the_others_end(shared_agent, fakes):
    """The lost task cannot be stopped alone: its sandbox takes no new task, lets the task
    beside it finish, and is killed then; the lost one reports nothing."""
    _, dispatcher, _ = fakes
    lost, beside = dispatcher.enqueue("sleepy", "30"), dispatcher.enqueue("sleepy", "1")
    await until(lambda: sandbox_of(shared_agent, lost.task_id) and sandbox_of(shared_agent, beside.task_id),
                what="both running")
    box = sandbox_of(shared_agent, lost.task_id)
    assert sandbox_of(shared_agent, beside.task_id) is box
    dispatcher.answer(lost.task_id, worker_pb2.LEASE_ACTION_LEASE_LOST)
    await until(lambda: box.retired_for, what="sandbox retired")
    later = dispatcher.enqueue("echo")
    c_later = await dispatcher.completion_for(later.task_id, timeout=10)
    assert json.loads(c_later.result_json)["pid"] != box.pid  # a retired sandbox takes no new task
    c = await dispatcher.completion_for(beside.task_id, timeout=10)
    assert OUTCOME.Name(c.outcome) == "COMPLETION_OUTCOME_SUCCEEDED"
    await until(lambda: not pid_alive(box.pid), timeout=5, what="retired sandbox killed")
    await asyncio.sleep(0.3)
    assert all(x.task_id != lost.task_id for x in dispatcher.completions)


async def test_list_sandboxes_names_every_task_in_flight(shared_agent, fakes):
    from ratchet.internal.hostagent.v1 import hostagent_pb2, hostagent_pb2_grpc
    from ratchet.libs.rpc.client import aio_channel
    _, dispatcher, _ = fakes
    tasks = [dispatcher.enqueue("sleepy", "2") for _ in range(2)]
    await until(lambda: all(sandbox_of(shared_agent, t.task_id) for t in tasks), what="running")
    async with aio_channel(f"127.0.0.1:{shared_agent.port}") as ch:
        listing = await hostagent_pb2_grpc.HostAgentServiceStub(ch).ListSandboxes(
            hostagent_pb2.ListSandboxesRequest(), timeout=5)
    running = {s.task_id: s.sandbox_id for s in listing.sandboxes if s.task_id}
    assert set(running) == {t.task_id for t in tasks} and len(set(running.values())) == 1


async def test_after_a_crash_its_task_types_run_one_per_sandbox(shared_agent, fakes):
    """A crash takes every attempt in the process, whatever its type: so the types that were in
    it run alone for a while (pool.SUSPECT_S), and the next crash of a culprit kills only itself
    (a shared crash once kept an innocent type's circuit breaker open: fault harness, kill_gateway)."""
    _, dispatcher, _ = fakes
    crashed = [dispatcher.enqueue("sleepy", "30") for _ in range(3)]
    await until(lambda: all(sandbox_of(shared_agent, t.task_id) for t in crashed), what="running")
    (box,) = {sandbox_of(shared_agent, t.task_id) for t in crashed}
    os.kill(box.pid, signal.SIGKILL)
    for t in crashed:
        await dispatcher.completion_for(t.task_id, timeout=5)
    assert shared_agent.pool.alone(box.app_id, "sleepy") and not shared_agent.pool.alone(box.app_id, "echo")
    alone = [dispatcher.enqueue("sleepy", "1") for _ in range(2)]
    await until(lambda: all(sandbox_of(shared_agent, t.task_id) for t in alone), what="suspects running")
    boxes = [sandbox_of(shared_agent, t.task_id) for t in alone]
    assert boxes[0] is not boxes[1] and all(b.concurrency == 1 for b in boxes)
    # A task of another type never lands beside them.
    other = dispatcher.enqueue("echo")
    c = await dispatcher.completion_for(other.task_id, timeout=10)
    assert json.loads(c.result_json)["pid"] not in {b.pid for b in boxes}
    for t in alone:
        c = await dispatcher.completion_for(t.task_id, timeout=10)
        assert OUTCOME.Name(c.outcome) == "COMPLETION_OUTCOME_SUCCEEDED"


async def test_suspicion_ends(fakes, work_dir):
    """Once SUSPECT_S has passed without a crash, the type shares sandboxes again."""
    from ratchet.services.hostagent.pool import SUSPECT_S, SandboxPool
    from ratchet.services.hostagent.sandboxes import SandboxDirs
    now = [100.0]
    pool = SandboxPool(dirs=SandboxDirs.under(pathlib.Path(work_dir)), python="python3", capacity=6, start_timeout_s=5,
                       concurrency=3, clock=lambda: now[0])
    pool.crashed("app", "t")
    assert pool.alone("app", "t") and not pool.alone("app", "u") and not pool.alone("other", "t")
    now[0] += SUSPECT_S - 1
    pool.crashed("app", "t")  # a new crash renews it
    now[0] += SUSPECT_S - 1
    assert pool.alone("app", "t")
    now[0] += 2
    assert not pool.alone("app", "t")
    one = SandboxPool(dirs=SandboxDirs.under(pathlib.Path(work_dir)), python="python3", capacity=6, start_timeout_s=5,
                      concurrency=1, clock=lambda: now[0])
    one.crashed("app", "t")
    assert one.alone("app", "t")  # (with one task per sandbox anyway, placement is unchanged)
