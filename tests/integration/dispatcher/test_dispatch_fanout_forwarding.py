"""Fan-out steps through the real dispatcher, in front of the fake history: a PARALLEL
BEGIN with 1,000 children reaches history as it was sent and its child ids come back
(timed); a DONE carrying 10,000 children's outcomes comes back whole within the message
limits; malformed fan-outs are refused before history sees them."""

from __future__ import annotations

import statistics
import time

import grpc
import pytest
from dispatch_helpers import AUTH
from test_dispatch_step_forwarding import leased, refused, step_of

from ratchet.api.tasks.v1 import tasks_pb2 as tpb
from ratchet.internal.worker.v1 import worker_pb2 as wpb

pytestmark = pytest.mark.timeout(120)


def fan_out(task: wpb.LeasedTask, n: int, **fields) -> wpb.StepRequest:
    request = step_of(task, "fan", **{"kind": wpb.STEP_KIND_PARALLEL, "position": 2, **fields})
    request.children.extend(wpb.ChildSpec(task_type="charge", payload_json=b'{"order": %d}' % (10_000 + i))
                            for i in range(n))
    return request


async def test_a_thousand_child_begin_reaches_history_as_sent_and_its_ids_come_back(stub, history):
    [task] = await leased(stub, history)
    request = fan_out(task, 1_000, on_failure=wpb.PARALLEL_FAILURE_FAIL_FAST)
    timings = []
    for _ in range(20):
        started = time.perf_counter()
        answer = await stub.Step(request, metadata=AUTH, timeout=10)
        timings.append(time.perf_counter() - started)
    assert answer.status == wpb.STEP_STATUS_RUN
    assert list(answer.child_ids) == [f"{task.task_id}.2.{i}" for i in range(1_000)]
    calls = history.fake.calls_of("WorkflowStep")
    assert len(calls) == 20 and all(call.request.step == request for call in calls)  # children and policy as sent
    median = statistics.median(timings)
    print(f"\n1,000-child BEGIN through the dispatcher: median {median * 1e3:.2f} ms, "
          f"max {max(timings) * 1e3:.2f} ms ({request.ByteSize()} bytes)")
    assert median < 0.5


async def test_a_done_with_ten_thousand_outcomes_comes_back_whole(stub, history):
    [task] = await leased(stub, history)
    outcomes = [wpb.ChildOutcome(index=i, child_id=f"{task.task_id}.2.{i}", state=tpb.TASK_STATE_SUCCEEDED,
                                 result_json=b'{"charged": %d}' % i) for i in range(10_000)]
    outcomes[7] = wpb.ChildOutcome(index=7, child_id=f"{task.task_id}.2.7", state=tpb.TASK_STATE_FAILED,
                                   error=tpb.TaskError(error_class="CardDeclined", message="no", stack="x" * 4000))
    done = wpb.StepResponse(status=wpb.STEP_STATUS_DONE, attempt=1, children=outcomes)
    history.fake.step_answers[task.task_id] = done
    answer = await stub.Step(fan_out(task, 10_000), metadata=AUTH, timeout=20)
    assert answer == done
    print(f"\n10,000 outcomes through the dispatcher: {answer.ByteSize()} bytes")


@pytest.mark.parametrize("build, fragment", [
    (lambda t: fan_out(t, 0), "children must hold 1..10000 ChildSpecs for this kind, got 0"),
    (lambda t: fan_out(t, 10_001), "children must hold 1..10000 ChildSpecs for this kind, got 10001"),
    (lambda t: fan_out(t, 2, kind=wpb.STEP_KIND_CHILD), "children must hold 1..1 ChildSpecs for this kind, got 2"),
    (lambda t: fan_out(t, 1, op=wpb.STEP_OP_COMMIT), "a PARALLEL or CHILD step is only begun"),
    (lambda t: fan_out(t, 1, kind=wpb.STEP_KIND_STEP), "children and on_failure are for STEP_KIND_PARALLEL"),
])
async def test_malformed_fan_outs_are_refused_before_history(stub, history, build, fragment):
    [task] = await leased(stub, history)
    err = await refused(stub.Step(build(task), metadata=AUTH, timeout=10))
    assert err.code() == grpc.StatusCode.INVALID_ARGUMENT and fragment in err.details()
    assert not history.fake.calls_of("WorkflowStep")
