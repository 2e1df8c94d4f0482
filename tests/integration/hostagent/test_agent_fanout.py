"""Fan-outs through the real host agent and real sandboxes (the SDK's stub running
ctx.parallel and ctx.child), against a fake dispatcher whose Step mints child ids and
answers a fan-out DONE once its outcomes are set, and a fake ControlService recording
StartChildren: the first activation starts the children under the lease's tenant and app
and ends SUSPENDED at the fan-out's position with no wake; the next one gets every
child's outcome; children the gateway refuses fail the run fatally, an unreachable
gateway retryably; a 1,000-child fan-out is timed from BEGIN to StartChildren."""

from __future__ import annotations

import asyncio
import json
import time

import grpc
import pytest

from ratchet.api.tasks.v1 import tasks_pb2 as tpb
from ratchet.internal.gateway.v1 import control_pb2, control_pb2_grpc
from ratchet.internal.worker.v1 import worker_pb2 as wpb
from ratchet.internal.worker.v1 import worker_pb2_grpc
from ratchet.services.hostagent.server import HostAgent
from ratchet.workflow import WorkflowContext
from tests.integration.hostagent.conftest import agent_config
from tests.integration.hostagent.fakes import FakeControl, FakeDispatcher, _authorized

pytestmark = [pytest.mark.timeout(90),
              pytest.mark.skipif(not hasattr(WorkflowContext, "parallel"),
                                 reason="the SDK's ctx.parallel has not landed: the stub sends no fan-out frames")]

FANOUT_APP = '''
from ratchet import ChildError, ChildFailed, task, workflow


@task
def double(ctx, n):
    return n * 2


@workflow
def fan(ctx, n):
    values = ctx.parallel("fan", [(double, i) for i in range(n)])
    return [v.state if isinstance(v, ChildError) else v for v in values]


@workflow
def one(ctx, n):
    try:
        return {"value": ctx.child("only", "double", n)}
    except ChildFailed as e:
        return {"failed": e.state}
'''


class FanOutDispatcher(FakeDispatcher):
    """FakeDispatcher with Step for fan-outs: a BEGIN of PARALLEL/CHILD answers DONE with
    `outcomes[task_id]` when set, else RUN with ids minted from (run, position, index)."""

    def __init__(self):
        super().__init__()
        self.steps: list[tuple[float, wpb.StepRequest]] = []
        self.outcomes: dict[str, list[wpb.ChildOutcome]] = {}

    async def Step(self, request, context):
        if not _authorized(context, self.unauthorized):
            await context.abort(grpc.StatusCode.UNAUTHENTICATED, "bad token")
        self.steps.append((time.perf_counter(), request))
        if request.kind not in (wpb.STEP_KIND_PARALLEL, wpb.STEP_KIND_CHILD):
            await context.abort(grpc.StatusCode.INVALID_ARGUMENT, "this fake logs fan-outs only")
        done = self.outcomes.get(request.lease.task_id)
        if done is not None:
            return wpb.StepResponse(status=wpb.STEP_STATUS_DONE, attempt=1, children=done)
        ids = [f"{request.lease.task_id}.{request.position}.{i}" for i in range(len(request.children))]
        return wpb.StepResponse(status=wpb.STEP_STATUS_RUN, attempt=1, child_ids=ids)


class ChildrenControl(FakeControl):
    """FakeControl with StartChildren: records each call; `refuse` answers every one with
    that (code, details) instead."""

    def __init__(self):
        super().__init__()
        self.starts: list[tuple[float, control_pb2.StartChildrenRequest]] = []
        self.refuse: tuple[grpc.StatusCode, str] | None = None

    async def StartChildren(self, request, context):
        if not _authorized(context, self.unauthorized):
            await context.abort(grpc.StatusCode.UNAUTHENTICATED, "bad token")
        self.starts.append((time.perf_counter(), request))
        if self.refuse is not None:
            await context.abort(*self.refuse)
        return control_pb2.StartChildrenResponse(created=len(request.child_ids))


@pytest.fixture
async def fanout_fakes():
    server = grpc.aio.server()
    dispatcher, control = FanOutDispatcher(), ChildrenControl()
    worker_pb2_grpc.add_DispatchServiceServicer_to_server(dispatcher, server)
    control_pb2_grpc.add_ControlServiceServicer_to_server(control, server)
    port = server.add_insecure_port("127.0.0.1:0")
    await server.start()
    control.deploy("app-1", {"app.py": FANOUT_APP})
    yield port, dispatcher, control
    await server.stop(0)


@pytest.fixture
async def make_agent(fanout_fakes, work_dir):
    agents: list[HostAgent] = []

    async def make(**overrides) -> HostAgent:
        host_agent = HostAgent(agent_config(fanout_fakes[0], work_dir, **overrides))
        await host_agent.start()
        agents.append(host_agent)
        return host_agent

    yield make
    for host_agent in agents:
        await asyncio.wait_for(host_agent.stop(grace_s=0.5), 30)


def ended(task_id: str, states: list[int]) -> list[wpb.ChildOutcome]:
    out = []
    for i, state in enumerate(states):
        child = wpb.ChildOutcome(index=i, child_id=f"{task_id}.0.{i}", state=state)
        if state == tpb.TASK_STATE_SUCCEEDED:
            child.result_json = json.dumps(i * 2).encode()
        else:
            child.error.CopyFrom(tpb.TaskError(error_class="ValueError", message=f"child {i} broke"))
        out.append(child)
    return out


async def test_a_fan_out_starts_its_children_suspends_and_resumes_with_their_outcomes(make_agent, fanout_fakes):
    _, dispatcher, control = fanout_fakes
    await make_agent()
    first = dispatcher.enqueue("fan", "3", lease_epoch=7)
    c = await dispatcher.completion_for(first.task_id, lease_epoch=7)
    assert c.outcome == wpb.COMPLETION_OUTCOME_SUSPENDED, c
    assert c.suspend_position == 0 and not c.HasField("wake_after")  # the barrier wakes it, no timer
    [(_, step)] = dispatcher.steps
    assert (step.op, step.kind, step.name, step.on_failure) == (wpb.STEP_OP_BEGIN, wpb.STEP_KIND_PARALLEL, "fan",
                                                                wpb.PARALLEL_FAILURE_COLLECT)
    assert (step.lease.task_id, step.lease.lease_epoch) == (first.task_id, 7)
    [(_, start)] = control.starts
    assert (start.tenant_id, start.app_id, start.parent_id, start.position) == ("tenant-1", "app-1",
                                                                                first.task_id, 0)
    assert list(start.child_ids) == [f"{first.task_id}.0.{i}" for i in range(3)]
    assert [(s.task_type, s.payload_json) for s in start.children] == [("double", b"0"), ("double", b"1"),
                                                                        ("double", b"2")]

    # The barrier fired: the next activation gets each outcome in its child's place.
    dispatcher.outcomes[first.task_id] = ended(first.task_id, [tpb.TASK_STATE_SUCCEEDED, tpb.TASK_STATE_FAILED,
                                                               tpb.TASK_STATE_SUCCEEDED])
    dispatcher.enqueue("fan", "3", task_id=first.task_id, lease_epoch=8, attempt=2)
    c = await dispatcher.completion_for(first.task_id, lease_epoch=8)
    assert c.outcome == wpb.COMPLETION_OUTCOME_SUCCEEDED, c
    assert json.loads(c.result_json) == [0, "FAILED", 4]
    assert len(control.starts) == 1  # a DONE starts nothing


async def test_a_child_s_outcome_is_its_value_or_its_failure(make_agent, fanout_fakes):
    _, dispatcher, control = fanout_fakes
    await make_agent()
    run = dispatcher.enqueue("one", "21")
    assert (await dispatcher.completion_for(run.task_id)).outcome == wpb.COMPLETION_OUTCOME_SUSPENDED
    assert control.starts[0][1].children[0] == wpb.ChildSpec(task_type="double", payload_json=b"21")
    assert dispatcher.steps[0][1].kind == wpb.STEP_KIND_CHILD
    dispatcher.outcomes[run.task_id] = ended(run.task_id, [tpb.TASK_STATE_FAILED])
    dispatcher.enqueue("one", "21", task_id=run.task_id, lease_epoch=50)
    c = await dispatcher.completion_for(run.task_id, lease_epoch=50)
    assert c.outcome == wpb.COMPLETION_OUTCOME_SUCCEEDED and json.loads(c.result_json) == {"failed": "FAILED"}, c


async def test_children_the_gateway_refuses_fail_the_run_fatally(make_agent, fanout_fakes):
    _, dispatcher, control = fanout_fakes
    await make_agent()
    control.refuse = (grpc.StatusCode.INVALID_ARGUMENT, "children[0]: app app-1 has no handler 'double'")
    run = dispatcher.enqueue("fan", "1")
    c = await dispatcher.completion_for(run.task_id)
    assert c.outcome == wpb.COMPLETION_OUTCOME_FAILED and c.fatal, c
    assert "app app-1 has no handler 'double'" in c.error.message, c.error


async def test_an_unreachable_gateway_fails_the_run_retryably_within_step_retry_s(make_agent, fanout_fakes):
    _, dispatcher, control = fanout_fakes
    await make_agent(step_retry_s=0.5)
    control.refuse = (grpc.StatusCode.UNAVAILABLE, "gateway restarting")
    run = dispatcher.enqueue("fan", "1")
    started = asyncio.get_running_loop().time()
    c = await dispatcher.completion_for(run.task_id)
    assert c.outcome == wpb.COMPLETION_OUTCOME_FAILED and not c.fatal, c
    assert "did not answer the children's start within 0.5s (UNAVAILABLE: gateway restarting)" in c.error.message
    assert len(control.starts) >= 2 and asyncio.get_running_loop().time() - started < 10


async def test_a_thousand_child_fan_out_from_begin_to_start_children(make_agent, fanout_fakes):
    _, dispatcher, control = fanout_fakes
    await make_agent()
    timings = []
    for _ in range(5):
        run = dispatcher.enqueue("fan", "1000")
        c = await dispatcher.completion_for(run.task_id)
        assert c.outcome == wpb.COMPLETION_OUTCOME_SUSPENDED, c
        (began, step), (started, start) = dispatcher.steps[-1], control.starts[-1]
        assert len(step.children) == 1_000 and list(start.children) == list(step.children)
        assert start.child_ids[999] == f"{run.task_id}.0.999"
        timings.append(started - began)
    timings.sort()
    print(f"\n1,000-child fan-out: Step received -> StartChildren received, median {timings[2] * 1e3:.2f} ms, "
          f"max {timings[-1] * 1e3:.2f} ms")
    assert timings[2] < 0.5
