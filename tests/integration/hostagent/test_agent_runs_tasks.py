"""The host agent runs leased tasks in sandboxes and reports their outcomes."""

from __future__ import annotations

import asyncio
import json

import grpc
from grpc_health.v1 import health_pb2, health_pb2_grpc

from ratchet.internal.hostagent.v1 import hostagent_pb2, hostagent_pb2_grpc
from ratchet.internal.worker.v1 import worker_pb2
from ratchet.services.hostagent.server import HostAgent
from tests.integration.hostagent.conftest import agent_config
from tests.integration.hostagent.fakes import TOKEN

OUTCOME = worker_pb2.CompletionOutcome


async def test_a_task_runs_and_its_result_is_completed(agent, fakes):
    _, dispatcher, control = fakes
    task = dispatcher.enqueue("echo", '{"n": 1}')
    c = await dispatcher.completion_for(task.task_id)
    assert OUTCOME.Name(c.outcome) == "COMPLETION_OUTCOME_SUCCEEDED"
    assert (c.shard_id, c.lease_epoch) == (task.shard_id, task.lease_epoch)
    result = json.loads(c.result_json)
    assert result["payload"] == {"n": 1}
    assert (result["task_id"], result["attempt"], result["epoch"], result["max_attempts"], result["task_type"]) == (
        task.task_id, 1, task.lease_epoch, 5, "echo")
    assert dispatcher.unauthorized == [] and control.unauthorized == []


async def test_sandboxes_are_reused_for_one_app_version(agent, fakes):
    _, dispatcher, control = fakes
    pids = []
    for n in range(3):
        task = dispatcher.enqueue("echo", str(n))
        pids.append(json.loads((await dispatcher.completion_for(task.task_id)).result_json)["pid"])
    assert len(set(pids)) == 1
    assert control.bundle_fetches == 1


async def test_a_new_version_gets_new_sandboxes_and_old_idle_ones_stop(agent, fakes):
    _, dispatcher, control = fakes
    first = json.loads((await dispatcher.completion_for(dispatcher.enqueue("echo").task_id)).result_json)["pid"]
    control.deploy("app-1", {"app.py": "from ratchet import task\nimport os\n"
                                       "@task\ndef echo(ctx, p):\n    return {'v': 2, 'pid': os.getpid()}\n"})
    second = json.loads((await dispatcher.completion_for(dispatcher.enqueue("echo").task_id)).result_json)
    assert second["v"] == 2 and second["pid"] != first
    await _until(lambda: first not in [s.pid for s in agent.pool.sandboxes()])


async def test_completions_are_retried_while_the_dispatcher_is_unavailable(agent, fakes):
    _, dispatcher, _ = fakes
    dispatcher.complete_failures = 3
    task = dispatcher.enqueue("echo")
    c = await dispatcher.completion_for(task.task_id)
    assert OUTCOME.Name(c.outcome) == "COMPLETION_OUTCOME_SUCCEEDED" and dispatcher.complete_calls == 4
    # The lease stayed held (heartbeated) until the completion was answered, then it was let go.
    await _until(lambda: not any(r.task_id == task.task_id for r in agent.agent.lease_refs()))


async def test_raising_handlers_fail_with_class_message_and_stack(agent, fakes):
    _, dispatcher, _ = fakes
    boom, fatal = dispatcher.enqueue("boom", '"x"'), dispatcher.enqueue("fatal")
    c = await dispatcher.completion_for(boom.task_id)
    assert OUTCOME.Name(c.outcome) == "COMPLETION_OUTCOME_FAILED" and not c.fatal
    assert (c.error.error_class, c.error.message) == ("ValueError", "kaput x")
    assert "app.py" in c.error.stack and "raise ValueError" in c.error.stack
    c = await dispatcher.completion_for(fatal.task_id)
    assert OUTCOME.Name(c.outcome) == "COMPLETION_OUTCOME_FAILED" and c.fatal
    assert c.error.error_class == "FatalError"


async def test_unknown_task_type_fails_fatally(agent, fakes):
    _, dispatcher, _ = fakes
    c = await dispatcher.completion_for(dispatcher.enqueue("nope").task_id)
    assert c.fatal and c.error.error_class == "UnknownTaskType" and "nope" in c.error.message


async def test_an_app_without_deployment_fails_the_attempt_retryably(agent, fakes):
    _, dispatcher, _ = fakes
    c = await dispatcher.completion_for(dispatcher.enqueue("echo", app_id="ghost").task_id)
    assert OUTCOME.Name(c.outcome) == "COMPLETION_OUTCOME_FAILED" and not c.fatal
    assert c.error.error_class == "NoActiveDeployment"


async def test_the_sandbox_environment_holds_no_credential(agent, fakes, work_dir):
    _, dispatcher, _ = fakes
    c = await dispatcher.completion_for(dispatcher.enqueue("env").task_id)
    result = json.loads(c.result_json)
    assert TOKEN not in c.result_json.decode()
    assert set(result["env"]) <= {"PATH", "LANG", "HOME", "TMPDIR", "PYTHONUNBUFFERED", "PYTHONDONTWRITEBYTECODE"}
    assert result["env"]["HOME"].startswith(work_dir) and result["cwd"].startswith(f"{work_dir}/bundles/")


async def test_list_sandboxes_and_health(agent, fakes):
    _, dispatcher, _ = fakes
    task = dispatcher.enqueue("sleepy", "30")
    async with grpc.aio.insecure_channel(f"127.0.0.1:{agent.port}") as channel:
        health = health_pb2_grpc.HealthStub(channel)
        listing = hostagent_pb2_grpc.HostAgentServiceStub(channel)

        async def serving():
            r = await health.Check(health_pb2.HealthCheckRequest(service=""), timeout=2)
            return r.status == health_pb2.HealthCheckResponse.SERVING

        async def running():
            r = await listing.ListSandboxes(hostagent_pb2.ListSandboxesRequest(), timeout=2)
            return [s for s in r.sandboxes if s.task_id == task.task_id]

        await _until_async(serving)
        sandboxes = await _until_async(running)
        assert sandboxes[0].pid > 0 and sandboxes[0].app_id == "app-1"
        assert sandboxes[0].digest.startswith("sha256:") and sandboxes[0].attempt == 1


async def _until(predicate, timeout: float = 10.0):
    deadline = asyncio.get_running_loop().time() + timeout
    while True:
        value = predicate()
        if value:
            return value
        assert asyncio.get_running_loop().time() < deadline, "condition not met in time"
        await asyncio.sleep(0.02)


async def _until_async(predicate, timeout: float = 10.0):
    deadline = asyncio.get_running_loop().time() + timeout
    while True:
        value = await predicate()
        if value:
            return value
        assert asyncio.get_running_loop().time() < deadline, "condition not met in time"
        await asyncio.sleep(0.02)


async def test_once_a_sandbox_is_up_leases_run_without_a_task_each(fakes, work_dir):
    """The first lease of an app waits for its deployment, bundle and sandbox (a coroutine per
    lease); later ones find all three at hand and go straight to the sandbox (Agent._start).
    Both paths report the same completions, and a cancel still reaches a fast-path handler."""
    port, dispatcher, _ = fakes
    agent = HostAgent(agent_config(port, work_dir, deployment_cache_s=60.0))
    await agent.start()
    try:
        await _fast_path(agent, dispatcher)
    finally:
        await asyncio.wait_for(agent.stop(grace_s=0.5), 30)


async def _fast_path(agent, dispatcher) -> None:
    first = dispatcher.enqueue("echo", "0")
    assert OUTCOME.Name((await dispatcher.completion_for(first.task_id)).outcome) == "COMPLETION_OUTCOME_SUCCEEDED"
    made = []
    real = asyncio.ensure_future

    def counting(coro, **kw):
        made.append(getattr(coro, "__qualname__", repr(coro)))
        return real(coro, **kw)

    import ratchet.services.hostagent.agent as agent_module
    agent_module.asyncio.ensure_future = counting
    try:
        later = [dispatcher.enqueue("echo", str(n)) for n in range(1, 6)]
        done = [await dispatcher.completion_for(t.task_id) for t in later]
        polite = dispatcher.enqueue("polite")
        await _until(lambda: any(polite.task_id in dict(s.running()) for s in agent.pool.sandboxes()))
        agent.agent.on_heartbeat(worker_pb2.HeartbeatResult(task_id=polite.task_id, lease_epoch=polite.lease_epoch,
                                                             action=worker_pb2.LEASE_ACTION_CANCEL))
        stopped = await dispatcher.completion_for(polite.task_id)
    finally:
        agent_module.asyncio.ensure_future = real
    assert [json.loads(c.result_json)["payload"] for c in done] == [1, 2, 3, 4, 5]
    assert all(OUTCOME.Name(c.outcome) == "COMPLETION_OUTCOME_SUCCEEDED" for c in done)
    assert OUTCOME.Name(stopped.outcome) == "COMPLETION_OUTCOME_CANCELED"
    assert not [m for m in made if "Agent._run" in m]  # (no lease took the coroutine path)
    assert agent.agent.running() == 0
