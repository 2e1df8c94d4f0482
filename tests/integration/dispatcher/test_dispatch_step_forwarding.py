"""DispatchService.Step through the real dispatcher, in front of the fake history: a
step goes to the shard its lease names as history's WorkflowStep, with the host-agent
token checked and a malformed request refused before history sees it; history's
refusals pass through with their messages; a shard that does not answer is UNAVAILABLE
within the call's deadline; a SUSPENDED completion reaches history as it was sent."""

from __future__ import annotations

import time

import grpc
import pytest
from dispatch_helpers import AUTH, poll, seconds

from ratchet.api.tasks.v1 import tasks_pb2 as tpb
from ratchet.internal.worker.v1 import worker_pb2 as wpb

pytestmark = pytest.mark.timeout(60)


def step_of(task: wpb.LeasedTask, name: str = "charge", epoch: int | None = None, **fields) -> wpb.StepRequest:
    lease = wpb.LeaseRef(shard_id=task.shard_id, task_id=task.task_id,
                         lease_epoch=task.lease_epoch if epoch is None else epoch)
    values = dict(op=wpb.STEP_OP_BEGIN, kind=wpb.STEP_KIND_STEP, position=0)
    return wpb.StepRequest(lease=lease, name=name, **{**values, **fields})


async def leased(stub, history, shards: tuple[int, ...] = (0,)) -> list[wpb.LeasedTask]:
    for shard in shards:
        history.fake.add_task(shard, task_type="flow")
    tasks: list[wpb.LeasedTask] = []
    while len(tasks) < len(shards):
        tasks += await poll(stub, capacity=len(shards), max_wait=2)
    return sorted(tasks, key=lambda t: t.shard_id)


async def refused(call) -> grpc.aio.AioRpcError:
    with pytest.raises(grpc.aio.AioRpcError) as info:
        await call
    return info.value


async def test_a_step_goes_to_the_shard_its_lease_names_and_its_answer_comes_back(stub, history):
    on_0, on_1 = await leased(stub, history, shards=(0, 1))
    sent = [step_of(on_0, "charge"),
            step_of(on_1, "wait-approval", kind=wpb.STEP_KIND_WAIT, match_json=b'{"order": 7}',
                    duration=seconds(3600))]
    answers = [await stub.Step(request, metadata=AUTH, timeout=5) for request in sent]
    assert [(a.status, a.attempt, a.logged_name) for a in answers] == [
        (wpb.STEP_STATUS_RUN, 1, "charge"), (wpb.STEP_STATUS_RUN, 1, "wait-approval")]
    for shard, request in ((0, sent[0]), (1, sent[1])):
        [call] = history.fake.calls_of("WorkflowStep", shard)
        assert call.request.step == request  # forwarded as it came, lease and all


@pytest.mark.parametrize("metadata, fragment", [
    ((), "missing credentials"),
    ((("authorization", "Bearer not-the-token"),), "not accepted"),
])
async def test_steps_without_an_accepted_token_are_refused(stub, history, metadata, fragment):
    [task] = await leased(stub, history)
    err = await refused(stub.Step(step_of(task), metadata=metadata, timeout=5))
    assert err.code() == grpc.StatusCode.UNAUTHENTICATED and fragment in err.details()
    assert not history.fake.calls_of("WorkflowStep")


@pytest.mark.parametrize("request_, fragment", [
    (wpb.StepRequest(op=wpb.STEP_OP_BEGIN, kind=wpb.STEP_KIND_STEP, name="x"), "lease must be set"),
    (wpb.StepRequest(lease=wpb.LeaseRef(shard_id=0, task_id="t", lease_epoch=0), op=wpb.STEP_OP_BEGIN,
                     kind=wpb.STEP_KIND_STEP, name="x"), "lease.lease_epoch must be >= 1"),
    (wpb.StepRequest(lease=wpb.LeaseRef(shard_id=0, task_id="t", lease_epoch=1), kind=wpb.STEP_KIND_STEP,
                     name="x"), "op must be STEP_OP_BEGIN or STEP_OP_COMMIT"),
    (wpb.StepRequest(lease=wpb.LeaseRef(shard_id=0, task_id="t", lease_epoch=1), op=wpb.STEP_OP_BEGIN,
                     kind=wpb.STEP_KIND_STEP, position=-2, name="x"), "position must be >= 0"),
])
async def test_malformed_steps_are_refused_before_history(stub, history, request_, fragment):
    err = await refused(stub.Step(request_, metadata=AUTH, timeout=5))
    assert err.code() == grpc.StatusCode.INVALID_ARGUMENT and fragment in err.details()
    assert not history.fake.calls_of("WorkflowStep")


async def test_history_s_refusals_pass_through_with_their_messages(stub, history):
    task, other = await leased(stub, history, shards=(0, 1))
    stale = await refused(stub.Step(step_of(task, epoch=task.lease_epoch + 5), metadata=AUTH, timeout=5))
    assert stale.code() == grpc.StatusCode.FAILED_PRECONDITION
    assert f"the run's lease {task.lease_epoch + 5} is not current" in stale.details()
    history.fake.step_refusals[other.task_id] = (grpc.StatusCode.INVALID_ARGUMENT,
                                                 "position 9 is past the end of the log (2 steps)")
    invalid = await refused(stub.Step(step_of(other), metadata=AUTH, timeout=5))
    assert invalid.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert "position 9 is past the end of the log (2 steps)" in invalid.details()
    unknown = wpb.LeasedTask(shard_id=1, task_id="no-such-run", lease_epoch=1)
    missing = await refused(stub.Step(step_of(unknown), metadata=AUTH, timeout=5))
    assert missing.code() == grpc.StatusCode.NOT_FOUND and "no run no-such-run on shard 1" in missing.details()
    assert len(history.fake.calls_of("WorkflowStep")) == 3


async def test_a_shard_that_does_not_answer_is_unavailable_within_the_deadline(make_dispatcher, stub_for, history):
    server = await make_dispatcher(rpc_timeout_s=0.5)
    stub = await stub_for(server)
    down, hung = await leased(stub, history, shards=(0, 1))
    history.fake.unavailable.add(0)
    history.fake.hanging.add(1)
    err = await refused(stub.Step(step_of(down), metadata=AUTH, timeout=5))
    assert err.code() == grpc.StatusCode.UNAVAILABLE and "shard 0 unavailable" in err.details()
    started = time.monotonic()
    err = await refused(stub.Step(step_of(hung), metadata=AUTH, timeout=5))
    assert err.code() == grpc.StatusCode.UNAVAILABLE and "shard 1 unavailable" in err.details()
    assert "retry the call" in err.details()  # the agent resends: Step is safe to repeat
    assert time.monotonic() - started < 0.5 + 0.5  # the dispatcher's deadline, not the caller's 5 s
    # A caller with less time than rpc_timeout_s gets its answer before its own deadline.
    started = time.monotonic()
    err = await refused(stub.Step(step_of(hung), metadata=AUTH, timeout=0.3))
    assert err.code() in (grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.DEADLINE_EXCEEDED)
    assert time.monotonic() - started < 0.3 + 0.3


async def test_a_suspended_completion_reaches_history_as_it_was_sent(stub, history):
    [task] = await leased(stub, history)
    completion = wpb.Completion(shard_id=task.shard_id, task_id=task.task_id, lease_epoch=task.lease_epoch,
                                outcome=wpb.COMPLETION_OUTCOME_SUSPENDED, suspend_position=3,
                                wake_after=seconds(90), tenant_id=task.tenant_id, app_id=task.app_id,
                                task_type=task.task_type)
    reply = await stub.Complete(wpb.CompleteRequest(worker_id="agent-1", completions=[completion]),
                                metadata=AUTH, timeout=5)
    assert [(r.accepted, r.state) for r in reply.results] == [(True, tpb.TASK_STATE_WAITING)]
    [call] = history.fake.calls_of("CompleteTasks")
    assert list(call.request.completions) == [completion]
    assert history.fake.tasks[task.task_id].state == tpb.TASK_STATE_WAITING
