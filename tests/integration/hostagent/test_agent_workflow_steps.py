"""Workflow activations through the real host agent and real sandboxes (the SDK's stub),
against a fake dispatcher whose Step answers from an in-memory step log: each step
frame reaches Step under the lease the agent holds, its answer reaches the activation
that asked, a sleep ends the activation SUSPENDED (position and wake_after on the
completion), and a resumed activation answers its steps from the log. A Step refused
FAILED_PRECONDITION stops the activation and nothing is reported; one that cannot be
reached fails the activation, retryably, within step_retry_s."""

from __future__ import annotations

import asyncio
import json

import grpc
import pytest
from google.protobuf import duration_pb2

from ratchet.internal.gateway.v1 import control_pb2_grpc
from ratchet.internal.worker.v1 import worker_pb2 as wpb
from ratchet.internal.worker.v1 import worker_pb2_grpc
from ratchet.services.hostagent.server import HostAgent
from tests.integration.hostagent.conftest import agent_config
from tests.integration.hostagent.fakes import FakeControl, FakeDispatcher, _authorized

pytestmark = pytest.mark.timeout(60)

WORKFLOW_APP = '''
import time

from ratchet import workflow


def double(n):
    return n * 2


@workflow
def nap(ctx, payload):
    n = ctx.step("double", double, payload)
    ctx.sleep("nap", seconds=60)
    return {"n": n}


@workflow
def nap_briefly(ctx, payload):
    """Stamps the time in a step, sleeps payload seconds: a step answered from the log keeps its stamp."""
    stepped_at = ctx.step("stamp", time.time)
    ctx.sleep("nap", seconds=payload)
    return {"stepped_at": stepped_at, "at": time.time()}
'''


class StepDispatcher(FakeDispatcher):
    """FakeDispatcher with Step: a log per task (position -> (name, kind, result)), every
    request recorded; `refuse` answers every Step with that (code, details) instead."""

    def __init__(self):
        super().__init__()
        self.steps: list[wpb.StepRequest] = []
        self.logs: dict[str, dict[int, tuple[str, int, bytes | None]]] = {}
        self.refuse: tuple[grpc.StatusCode, str] | None = None

    async def Step(self, request, context):
        if not _authorized(context, self.unauthorized):
            await context.abort(grpc.StatusCode.UNAUTHENTICATED, "bad token")
        self.steps.append(request)
        self.changed.set()
        if self.refuse is not None:
            await context.abort(*self.refuse)
        log = self.logs.setdefault(request.lease.task_id, {})
        row = log.get(request.position)
        if request.op == wpb.STEP_OP_COMMIT:
            log[request.position] = (request.name, request.kind, request.result_json)
            return wpb.StepResponse(status=wpb.STEP_STATUS_DONE, attempt=1)
        if row is not None and row[2] is not None:
            return wpb.StepResponse(status=wpb.STEP_STATUS_DONE, attempt=1, result_json=row[2])
        if request.kind == wpb.STEP_KIND_SLEEP:
            log[request.position] = (request.name, request.kind, b"null" if row is not None else None)
            if row is not None:  # the second activation: the sleep is over
                return wpb.StepResponse(status=wpb.STEP_STATUS_DONE, attempt=1)
            return wpb.StepResponse(status=wpb.STEP_STATUS_SUSPEND, wake_after=request.duration)
        log[request.position] = (request.name, request.kind, None)
        return wpb.StepResponse(status=wpb.STEP_STATUS_RUN, attempt=1)


@pytest.fixture
async def workflow_fakes():
    server = grpc.aio.server()
    dispatcher, control = StepDispatcher(), FakeControl()
    worker_pb2_grpc.add_DispatchServiceServicer_to_server(dispatcher, server)
    control_pb2_grpc.add_ControlServiceServicer_to_server(control, server)
    port = server.add_insecure_port("127.0.0.1:0")
    await server.start()
    control.deploy("app-1", {"app.py": WORKFLOW_APP})
    yield port, dispatcher
    await server.stop(0)


@pytest.fixture
async def make_agent(workflow_fakes, work_dir):
    agents: list[HostAgent] = []

    async def make(**overrides) -> HostAgent:
        port, _ = workflow_fakes
        host_agent = HostAgent(agent_config(port, work_dir, **overrides))
        await host_agent.start()
        agents.append(host_agent)
        return host_agent

    yield make
    for host_agent in agents:
        await asyncio.wait_for(host_agent.stop(grace_s=0.5), 30)


async def test_a_workflow_suspends_at_its_sleep_and_resumes_from_its_log(make_agent, workflow_fakes):
    _, dispatcher = workflow_fakes
    await make_agent()
    first = dispatcher.enqueue("nap", "21", lease_epoch=7)
    c = await dispatcher.completion_for(first.task_id, lease_epoch=7)
    assert c.outcome == wpb.COMPLETION_OUTCOME_SUSPENDED, c
    assert c.suspend_position == 1 and c.wake_after == duration_pb2.Duration(seconds=60)
    assert (c.tenant_id, c.app_id, c.task_type) == ("tenant-1", "app-1", "nap")
    ops = [(s.op, s.kind, s.position, s.name) for s in dispatcher.steps]
    assert ops == [(wpb.STEP_OP_BEGIN, wpb.STEP_KIND_STEP, 0, "double"),
                   (wpb.STEP_OP_COMMIT, wpb.STEP_KIND_STEP, 0, "double"),
                   (wpb.STEP_OP_BEGIN, wpb.STEP_KIND_SLEEP, 1, "nap")]
    # Every step went under the agent's lease; the stub never saw it.
    assert {(s.lease.shard_id, s.lease.task_id, s.lease.lease_epoch) for s in dispatcher.steps} == {
        (1, first.task_id, 7)}
    assert dispatcher.steps[1].result_json == b"42"
    assert dispatcher.steps[2].duration == duration_pb2.Duration(seconds=60)

    # The next activation (a new lease): the step answers from the log, the sleep is over.
    dispatcher.steps.clear()
    dispatcher.enqueue("nap", "21", task_id=first.task_id, lease_epoch=8, attempt=2)
    c = await dispatcher.completion_for(first.task_id, lease_epoch=8)
    assert c.outcome == wpb.COMPLETION_OUTCOME_SUCCEEDED, c
    assert json.loads(c.result_json)["n"] == 42
    assert [(s.op, s.position) for s in dispatcher.steps] == [(wpb.STEP_OP_BEGIN, 0), (wpb.STEP_OP_BEGIN, 1)]
    assert {s.lease.lease_epoch for s in dispatcher.steps} == {8}


async def test_a_step_refused_failed_precondition_stops_the_activation_and_reports_nothing(make_agent,
                                                                                           workflow_fakes):
    _, dispatcher = workflow_fakes
    agent = await make_agent()
    dispatcher.refuse = (grpc.StatusCode.FAILED_PRECONDITION, "the run's lease 3 is not current")
    task = dispatcher.enqueue("nap", "1", lease_epoch=3)
    loop = asyncio.get_running_loop()
    deadline = loop.time() + 10
    while not dispatcher.steps:
        assert loop.time() < deadline, "no step reached the dispatcher"
        await asyncio.sleep(0.02)
    while any(r.task_id == task.task_id for r in agent.agent.lease_refs()):
        assert loop.time() < deadline, "the agent kept the lease"
        await asyncio.sleep(0.02)
    # The agent goes on with other work, and never reports the stopped activation.
    dispatcher.refuse = None
    other = dispatcher.enqueue("nap", "2")
    assert (await dispatcher.completion_for(other.task_id)).outcome == wpb.COMPLETION_OUTCOME_SUSPENDED
    assert len([s for s in dispatcher.steps if s.lease.task_id == task.task_id]) == 1
    assert all(c.task_id != task.task_id for c in dispatcher.completions)


async def test_an_unreachable_step_fails_the_activation_retryably_within_step_retry_s(make_agent,
                                                                                      workflow_fakes):
    _, dispatcher = workflow_fakes
    await make_agent(step_retry_s=0.5)
    dispatcher.refuse = (grpc.StatusCode.UNAVAILABLE, "dispatcher restarting")
    task = dispatcher.enqueue("nap", "1")
    loop = asyncio.get_running_loop()
    started = loop.time()
    c = await dispatcher.completion_for(task.task_id, timeout=15)
    assert c.outcome == wpb.COMPLETION_OUTCOME_FAILED and not c.fatal, c
    assert "did not answer the step within 0.5s (UNAVAILABLE: dispatcher restarting)" in c.error.message, c.error
    assert len(dispatcher.steps) >= 2  # retried before giving up
    # Sandbox start, then at most step_retry_s of tries: well under the stub's own 60 s.
    assert loop.time() - started < 10
