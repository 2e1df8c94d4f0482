"""Cancel, lease loss, crashes and agent death: what the host agent does to sandboxes."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys

import grpc

from ratchet.internal.hostagent.v1 import hostagent_pb2, hostagent_pb2_grpc
from ratchet.internal.worker.v1 import worker_pb2
from tests.integration.hostagent.fakes import TOKEN

OUTCOME = worker_pb2.CompletionOutcome


def pid_alive(pid: int) -> bool:
    """True unless pid is gone or a zombie."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except (FileNotFoundError, ProcessLookupError):
        return False


async def until(predicate, timeout: float = 10.0, what: str = "condition"):
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while True:
        value = predicate()
        if asyncio.iscoroutine(value):
            value = await value
        if value:
            return value
        assert loop.time() < deadline, f"{what} not met within {timeout}s"
        await asyncio.sleep(0.02)


def sandbox_of(agent, task_id: str):
    return next((s for s in agent.pool.sandboxes() if task_id in dict(s.running())), None)


async def test_cancel_reaches_the_handler_and_the_attempt_ends_canceled(agent, fakes):
    _, dispatcher, _ = fakes
    task = dispatcher.enqueue("polite")
    sandbox = await until(lambda: sandbox_of(agent, task.task_id), what="task running")
    await until(lambda: sandbox.last_handler_beat is not None, what="handler heartbeat")
    dispatcher.answer(task.task_id, worker_pb2.LEASE_ACTION_CANCEL, kill_after_s=10)
    c = await dispatcher.completion_for(task.task_id, timeout=5)
    assert OUTCOME.Name(c.outcome) == "COMPLETION_OUTCOME_CANCELED" and json.loads(c.result_json) == "stopped"
    assert sandbox.alive  # a handler that stops in time keeps its sandbox


async def test_a_handler_ignoring_cancel_is_killed_after_kill_after(agent, fakes):
    _, dispatcher, _ = fakes
    task = dispatcher.enqueue("sleepy", "30")
    sandbox = await until(lambda: sandbox_of(agent, task.task_id), what="task running")
    dispatcher.answer(task.task_id, worker_pb2.LEASE_ACTION_CANCEL, kill_after_s=0.3)
    started = asyncio.get_running_loop().time()
    await until(lambda: not pid_alive(sandbox.pid), timeout=5, what="sandbox killed")
    assert asyncio.get_running_loop().time() - started >= 0.25
    # The server revokes the lease and decides the outcome: the agent reports nothing.
    await until(lambda: all(r.task_id != task.task_id for r in agent.agent.lease_refs()), what="lease dropped")
    nxt = dispatcher.enqueue("echo")
    await dispatcher.completion_for(nxt.task_id)
    assert all(c.task_id != task.task_id for c in dispatcher.completions)


async def test_lease_lost_kills_the_sandbox_at_once_and_sends_nothing(agent, fakes):
    _, dispatcher, _ = fakes
    task = dispatcher.enqueue("sleepy", "30")
    sandbox = await until(lambda: sandbox_of(agent, task.task_id), what="task running")
    dispatcher.answer(task.task_id, worker_pb2.LEASE_ACTION_LEASE_LOST)
    await until(lambda: not pid_alive(sandbox.pid), timeout=2, what="sandbox killed")
    nxt = dispatcher.enqueue("echo")
    await dispatcher.completion_for(nxt.task_id)
    assert all(c.task_id != task.task_id for c in dispatcher.completions)


async def test_sigkill_of_a_sandbox_mid_task_crashes_the_attempt_and_a_fresh_sandbox_follows(agent, fakes):
    _, dispatcher, _ = fakes
    task = dispatcher.enqueue("sleepy", "30")
    sandbox = await until(lambda: sandbox_of(agent, task.task_id), what="task running")
    loop = asyncio.get_running_loop()
    killed_at = loop.time()
    os.kill(sandbox.pid, signal.SIGKILL)
    c = await dispatcher.completion_for(task.task_id, timeout=5)
    assert loop.time() - killed_at < 1.0
    assert OUTCOME.Name(c.outcome) == "COMPLETION_OUTCOME_CRASHED" and not c.fatal
    assert c.error.error_class == "SandboxCrashed"
    assert c.error.message == "sandbox process exited with signal 9 (SIGKILL) while running the handler"
    nxt = dispatcher.enqueue("echo")
    result = json.loads((await dispatcher.completion_for(nxt.task_id)).result_json)
    assert result["pid"] != sandbox.pid


async def test_capacity_bounds_busy_sandboxes(agent, fakes):
    _, dispatcher, _ = fakes  # the agent fixture has capacity 2
    sleepers = [dispatcher.enqueue("sleepy", "30") for _ in range(2)]
    waiting = dispatcher.enqueue("echo")
    await until(lambda: all(sandbox_of(agent, t.task_id) for t in sleepers), what="both slots busy")
    await asyncio.sleep(0.3)  # give a wrong agent the chance to over-poll
    assert dispatcher.ready.qsize() == 1 and all(c.task_id != waiting.task_id for c in dispatcher.completions)
    dispatcher.answer(sleepers[0].task_id, worker_pb2.LEASE_ACTION_LEASE_LOST)
    await dispatcher.completion_for(waiting.task_id)


def spawn_agent(port: int, work_dir: str, agent_port: int) -> subprocess.Popen:
    """The host agent as its own process, as `ratchet dev up` runs it."""
    config = {"dispatcher_target": f"127.0.0.1:{port}", "control_target": f"127.0.0.1:{port}",
              "host_token": TOKEN, "work_dir": work_dir, "grpc_port": agent_port, "heartbeat_interval_s": 0.2,
              "poll_max_wait_s": 1.0, "shutdown_grace_s": 10.0}
    path = os.path.join(work_dir, "agent.json")
    with open(path, "w") as f:
        json.dump(config, f)
    return subprocess.Popen([sys.executable, "-m", "ratchet.services.hostagent", "--config", path],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


async def test_sigterm_lets_running_handlers_finish_and_report(fakes, work_dir):
    port, dispatcher, _ = fakes
    proc = spawn_agent(port, work_dir, _free_port())
    try:
        task = dispatcher.enqueue("sleepy", "1")
        await until(lambda: dispatcher.heartbeats and dispatcher.heartbeats[-1].leases, timeout=20,
                    what="task leased")
        proc.send_signal(signal.SIGTERM)
        c = await dispatcher.completion_for(task.task_id, timeout=10)
        assert OUTCOME.Name(c.outcome) == "COMPLETION_OUTCOME_SUCCEEDED"
        await until(lambda: proc.poll() is not None, timeout=10, what="agent exited")
        assert proc.returncode == 0
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


async def test_a_killed_agent_takes_its_sandboxes_with_it(fakes, work_dir):
    port, dispatcher, _ = fakes
    agent_port = _free_port()
    pids: list[int] = []
    proc = spawn_agent(port, work_dir, agent_port)
    try:
        tasks = [dispatcher.enqueue("sleepy", "60"), dispatcher.enqueue("hog")]
        async with grpc.aio.insecure_channel(f"127.0.0.1:{agent_port}") as channel:
            stub = hostagent_pb2_grpc.HostAgentServiceStub(channel)

            async def busy():
                try:
                    r = await stub.ListSandboxes(hostagent_pb2.ListSandboxesRequest(), timeout=1)
                except grpc.aio.AioRpcError:
                    return None
                running = [s.pid for s in r.sandboxes if s.task_id in {t.task_id for t in tasks}]
                return running if len(running) == 2 else None

            pids = await until(busy, timeout=20, what="two sandboxes running")
        # The hog's stub cannot even notice its socket closing: only PR_SET_PDEATHSIG can end it.
        await until(lambda: any(cpu_ticks(p) > 20 for p in pids), what="hog spinning")
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait(timeout=5)
        await until(lambda: not any(pid_alive(p) for p in pids), timeout=5, what="sandboxes dead")
        assert dispatcher.completions == []  # the leases are left to expire
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        for pid in pids:
            if pid_alive(pid):
                os.kill(pid, signal.SIGKILL)


def cpu_ticks(pid: int) -> int:
    try:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
        return int(fields[11]) + int(fields[12])
    except (FileNotFoundError, ProcessLookupError):
        return 0


def _free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]
