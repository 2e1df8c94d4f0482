"""Compensation steps through the real dispatcher, in front of the fake history: ON_CANCEL
and COMPENSATE requests reach history as they were sent, history's CANCELLED answer
comes back as it is, and an ON_CANCEL that is not a BEGIN is refused before history."""

from __future__ import annotations

import grpc
import pytest
from dispatch_helpers import AUTH
from test_dispatch_step_forwarding import leased, refused, step_of

from ratchet.internal.worker.v1 import worker_pb2 as wpb

pytestmark = pytest.mark.timeout(60)


async def test_compensation_kinds_reach_history_as_sent_and_cancelled_comes_back(stub, history):
    [task] = await leased(stub, history)
    register = step_of(task, "refund", kind=wpb.STEP_KIND_ON_CANCEL, position=1,
                       result_json=b'{"args":[12],"kwargs":{}}')
    compensate = step_of(task, "compensate:refund", kind=wpb.STEP_KIND_COMPENSATE, position=2,
                         op=wpb.STEP_OP_COMMIT, result_json=b'{"refunded":12}')
    for request in (register, compensate):
        await stub.Step(request, metadata=AUTH, timeout=10)
    assert [call.request.step for call in history.fake.calls_of("WorkflowStep")] == [register, compensate]
    cancelled = wpb.StepResponse(status=wpb.STEP_STATUS_CANCELLED)
    history.fake.step_answers[task.task_id] = cancelled
    answer = await stub.Step(step_of(task, "nap", kind=wpb.STEP_KIND_SLEEP, position=2), metadata=AUTH, timeout=10)
    assert answer == cancelled


async def test_an_on_cancel_commit_is_refused_before_history(stub, history):
    [task] = await leased(stub, history)
    request = step_of(task, "refund", kind=wpb.STEP_KIND_ON_CANCEL, op=wpb.STEP_OP_COMMIT)
    err = await refused(stub.Step(request, metadata=AUTH, timeout=10))
    assert err.code() == grpc.StatusCode.INVALID_ARGUMENT and "an ON_CANCEL step is only begun" in err.details()
    assert not history.fake.calls_of("WorkflowStep")
