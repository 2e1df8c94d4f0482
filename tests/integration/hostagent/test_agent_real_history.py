"""A checkpointed task killed mid-run resumes from its cursor, and a workflow
suspends at its sleep and resumes from its step log, through the real
dispatcher (in process) and the real history service (its own process) on
real shard databases; only the gateway's ControlService is a fake."""

from __future__ import annotations

import asyncio
import hashlib
import json
import os
import pathlib
import signal
import subprocess
import sys

import grpc
import pytest
import pytest_asyncio
from google.protobuf import duration_pb2, json_format
from grpc_health.v1 import health_pb2, health_pb2_grpc

from ratchet.api.tasks.v1 import tasks_pb2
from ratchet.internal.history.v1 import history_pb2, history_pb2_grpc
from ratchet.libs.pg.cluster import free_port
from ratchet.libs.shardmap import ShardMap, new_task_id
from ratchet.services.dispatcher.config import DispatcherConfig
from ratchet.services.dispatcher.server import DispatcherServer
from ratchet.services.hostagent.server import HostAgent
from tests.integration.hostagent.conftest import agent_config
from tests.integration.hostagent.fakes import SAMPLE_APP, TOKEN, serve_fakes
from tests.integration.hostagent.test_agent_stops_tasks import sandbox_of, until
from tests.integration.hostagent.test_agent_workflow_steps import WORKFLOW_APP

# Children are SAMPLE_APP's tasks: echo returns its payload (among other fields), boom raises.
FANOUT_APP = '''

from ratchet import ChildError


@workflow
def fan_echo(ctx, n):
    values = ctx.parallel("fan", [("echo", i) for i in range(n)] + [("boom", "x")])
    return [v.state if isinstance(v, ChildError) else v["payload"] for v in values]
'''

pytestmark = pytest.mark.timeout(90)
HISTORY_MAIN = pathlib.Path(__file__).resolve().parents[3] / "services" / "history" / "__main__.py"
SHARD = 0


async def _serving(port: int, proc: subprocess.Popen) -> bool:
    assert proc.poll() is None, f"history exited with {proc.returncode}"
    async with grpc.aio.insecure_channel(f"127.0.0.1:{port}") as channel:
        try:
            reply = await health_pb2_grpc.HealthStub(channel).Check(health_pb2.HealthCheckRequest(), timeout=1)
        except grpc.aio.AioRpcError:
            return False
    return reply.status == health_pb2.HealthCheckResponse.SERVING


@pytest_asyncio.fixture
async def mesh(pg_cluster, fresh_db, work_dir, tmp_path):
    """(history stub, host agent, fake control) with history, dispatcher and agent running."""
    if not HISTORY_MAIN.exists():
        pytest.skip("services/history has no __main__.py yet")
    hport = free_port()
    config = tmp_path / "history.json"
    config.write_text(json.dumps({"shards": {str(SHARD): fresh_db("agent_shard")}, "grpc_port": hport,
                                  "lease_duration_s": 5.0}))
    # A file, not a pipe: an unread pipe stalls history. The child keeps its own descriptor of it.
    with open(tmp_path / "history.log", "w") as log:
        proc = subprocess.Popen([sys.executable, "-m", "ratchet.services.history", "--config", str(config)],
                                stdout=log, stderr=subprocess.STDOUT)
    server, port, _dispatcher, control = await serve_fakes()
    control.deploy("app-1", {"app.py": SAMPLE_APP + WORKFLOW_APP + FANOUT_APP})
    dispatcher = agent = channel = None
    try:
        await until(lambda: _serving(hport, proc), timeout=30, what="history SERVING")
        fields = dict(history_target=f"127.0.0.1:{hport}", shard_ids=[SHARD], lease_duration_s=5.0,
                      host_token_sha256=[hashlib.sha256(TOKEN.encode()).hexdigest()])
        if "dsn" in DispatcherConfig.__dataclass_fields__:  # the breakers' database, once it has one
            fields["dsn"] = fresh_db("agent_dispatch")
        dispatcher = DispatcherServer(DispatcherConfig(**fields))
        await dispatcher.start()
        agent = HostAgent(agent_config(port, work_dir, dispatcher_target=dispatcher.target,
                                       heartbeat_interval_s=0.2))
        await agent.start()
        channel = grpc.aio.insecure_channel(f"127.0.0.1:{hport}")
        control.create_children = _children_creator(history_pb2_grpc.HistoryServiceStub(channel))
        yield history_pb2_grpc.HistoryServiceStub(channel), agent, control
    finally:
        if agent is not None:
            await asyncio.wait_for(agent.stop(grace_s=0.5), 30)
        if dispatcher is not None:
            await dispatcher.stop(grace=1)
        if channel is not None:
            await channel.close()
        await server.stop(0)
        proc.terminate()
        try:
            proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=10)


def _new_task(task_type: str, payload: object, task_id: str | None = None,
              max_attempts: int = 3) -> history_pb2.NewTask:
    shard_map = ShardMap.even([SHARD])
    task_id = task_id or new_task_id()
    assert shard_map.shard_for_task(task_id) == SHARD
    retry = tasks_pb2.RetryPolicy(max_attempts=max_attempts, base=duration_pb2.Duration(nanos=100_000_000),
                                  factor=1.0, cap=duration_pb2.Duration(seconds=1), jitter=False)
    timeouts = tasks_pb2.Timeouts(start_to_close=duration_pb2.Duration(seconds=60))
    return history_pb2.NewTask(task_id=task_id, tenant_id="tenant-1", app_id="app-1", task_type=task_type,
                               queue="default", payload_json=json.dumps(payload).encode(), fingerprint=task_id,
                               retry=retry, timeouts=timeouts)


def _children_creator(history: history_pb2_grpc.HistoryServiceStub):
    """StartChildren's effect as the gateway has it: one CreateTasks of the children with their
    parent link (the ids history minted; one attempt each, so a failing child ends FAILED at once)."""

    async def create(request) -> int:
        tasks = []
        for index, (child_id, spec) in enumerate(zip(request.child_ids, request.children, strict=True)):
            new = _new_task(spec.task_type, None, task_id=child_id, max_attempts=1)
            new.payload_json = spec.payload_json
            new.parent.CopyFrom(history_pb2.ChildOf(parent_id=request.parent_id, position=request.position,
                                                    index=index))
            tasks.append(new)
        reply = await history.CreateTasks(history_pb2.CreateTasksRequest(shard_id=SHARD, tasks=tasks), timeout=10)
        return sum(1 for r in reply.results if not r.deduplicated)

    return create


async def test_a_killed_task_resumes_from_its_stored_checkpoint(mesh):
    history, agent, _control = mesh
    new = _new_task("resumable", {"to": 40, "pause": 0.05})
    await history.CreateTasks(history_pb2.CreateTasksRequest(shard_id=SHARD, tasks=[new]), timeout=10)

    async def task() -> tasks_pb2.Task:
        reply = await history.GetTask(history_pb2.GetTaskRequest(shard_id=SHARD, task_id=new.task_id,
                                                                 tenant_id="tenant-1"), timeout=10)
        return reply.task

    async def stored_cursor() -> int:
        t = await task()
        return t.checkpoint.struct_value.fields["next"].number_value if t.HasField("checkpoint") else 0

    await until(lambda: _at_least(stored_cursor(), 5), timeout=20, what="a checkpoint stored by a heartbeat")
    sandbox = sandbox_of(agent, new.task_id)
    assert sandbox is not None
    os.kill(sandbox.pid, signal.SIGKILL)
    final = await until(lambda: _terminal(task()), timeout=30, what="the task finished")
    assert final.state == tasks_pb2.TASK_STATE_SUCCEEDED
    result = json_format.MessageToDict(final.result)
    assert result["attempt"] == 2 and result["started_at"] >= 5  # resumed, not restarted
    first, second = final.attempts
    assert first.outcome == tasks_pb2.ATTEMPT_OUTCOME_CRASHED and first.error.error_class == "SandboxCrashed"
    assert second.outcome == tasks_pb2.ATTEMPT_OUTCOME_SUCCEEDED
    assert final.checkpoint.struct_value.fields["next"].number_value == 40


async def _at_least(value, n: int) -> bool:
    return (await value) >= n


async def _terminal(task_coro):
    t = await task_coro
    return t if t.state in (tasks_pb2.TASK_STATE_SUCCEEDED, tasks_pb2.TASK_STATE_FAILED) else None


async def test_a_workflow_suspends_at_its_sleep_and_its_next_activation_answers_from_the_log(mesh):
    history, _agent, _control = mesh
    new = _new_task("nap_briefly", 1.0)
    await history.CreateTasks(history_pb2.CreateTasksRequest(shard_id=SHARD, tasks=[new]), timeout=10)

    async def task() -> tasks_pb2.Task:
        reply = await history.GetTask(history_pb2.GetTaskRequest(shard_id=SHARD, task_id=new.task_id,
                                                                 tenant_id="tenant-1"), timeout=10)
        return reply.task

    final = await until(lambda: _terminal(task()), timeout=30, what="the workflow finished")
    assert final.state == tasks_pb2.TASK_STATE_SUCCEEDED, final
    first, second = final.attempts
    # The first activation suspended at the sleep (no attempt used up); the wake timer woke it.
    assert first.outcome == tasks_pb2.ATTEMPT_OUTCOME_SUSPENDED
    assert second.outcome == tasks_pb2.ATTEMPT_OUTCOME_SUCCEEDED
    result = json_format.MessageToDict(final.result)
    assert result["at"] - result["stepped_at"] >= 0.9  # the stamp came from the log, not a second run
    steps = await history.GetWorkflowSteps(history_pb2.GetWorkflowStepsRequest(
        shard_id=SHARD, workflow_id=new.task_id, tenant_id="tenant-1"), timeout=10)
    assert [(s.name, s.attempt) for s in steps.steps] == [("stamp", 1), ("nap", 1)]


async def test_a_fan_out_starts_its_children_and_the_barrier_wakes_the_run_with_their_outcomes(mesh):
    """Through the real dispatcher and history: BEGIN PARALLEL mints the ids, the agent starts the
    children (the gateway's part stood in for by CreateTasks with the parent link), the run
    suspends, the children run on the same agent, their ends fire the barrier, and the woken run's
    BEGIN is DONE with every outcome in its child's place."""
    history, _agent, control = mesh
    new = _new_task("fan_echo", 3)
    await history.CreateTasks(history_pb2.CreateTasksRequest(shard_id=SHARD, tasks=[new]), timeout=10)

    async def task() -> tasks_pb2.Task:
        reply = await history.GetTask(history_pb2.GetTaskRequest(shard_id=SHARD, task_id=new.task_id,
                                                                 tenant_id="tenant-1"), timeout=10)
        return reply.task

    final = await until(lambda: _terminal(task()), timeout=60, what="the fan-out workflow finished")
    assert final.state == tasks_pb2.TASK_STATE_SUCCEEDED, final
    assert json.loads(json_format.MessageToJson(final.result)) == [0, 1, 2, "FAILED"]
    first, second = final.attempts
    assert (first.outcome, second.outcome) == (tasks_pb2.ATTEMPT_OUTCOME_SUSPENDED,
                                               tasks_pb2.ATTEMPT_OUTCOME_SUCCEEDED)
    [started] = control.children_started  # once: the second activation's BEGIN was DONE
    assert (started.tenant_id, started.app_id, started.parent_id, started.position) == (
        "tenant-1", "app-1", new.task_id, 0)
    assert [s.task_type for s in started.children] == ["echo", "echo", "echo", "boom"]
    for index, child_id in enumerate(started.child_ids):
        child = (await history.GetTask(history_pb2.GetTaskRequest(shard_id=SHARD, task_id=child_id,
                                                                  tenant_id="tenant-1"), timeout=10)).task
        want = tasks_pb2.TASK_STATE_FAILED if index == 3 else tasks_pb2.TASK_STATE_SUCCEEDED
        assert child.state == want, child
