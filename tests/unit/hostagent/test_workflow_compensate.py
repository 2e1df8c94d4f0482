"""Compensations through the agent: "on_cancel" frames (begin only) and "compensate" frames
(begin/commit) go out as StepRequests of kinds ON_CANCEL/COMPENSATE under the lease,
STEP_STATUS_CANCELLED comes back as the reply status "cancelled", and malformed frames of
the new kinds break the protocol (docs/design/workflows-protocol.md, "Compensations").

A real Agent and Sandbox object (in-memory socket, no process), a fake DispatchService."""

from __future__ import annotations

import re

import pytest

from ratchet.internal.worker.v1 import worker_pb2 as wpb
from ratchet.sandbox.protocol import ProtocolError
from ratchet.services.hostagent import steps

from .test_workflow_steps import T1, FakeDispatch, make_agent, replies, run, step_frame

pytestmark = pytest.mark.timeout(30)


async def test_compensation_frames_go_out_with_their_kinds_and_cancelled_comes_back(sandbox):
    box, wire = sandbox
    answers = {
        (wpb.STEP_OP_BEGIN, wpb.STEP_KIND_ON_CANCEL): wpb.StepResponse(status=wpb.STEP_STATUS_DONE, attempt=1),
        (wpb.STEP_OP_BEGIN, wpb.STEP_KIND_SLEEP): wpb.StepResponse(status=wpb.STEP_STATUS_CANCELLED),
        (wpb.STEP_OP_BEGIN, wpb.STEP_KIND_COMPENSATE): wpb.StepResponse(status=wpb.STEP_STATUS_RUN, attempt=2),
        (wpb.STEP_OP_COMMIT, wpb.STEP_KIND_COMPENSATE): wpb.StepResponse(status=wpb.STEP_STATUS_DONE, attempt=2),
    }
    dispatch = FakeDispatch(lambda request: answers[(request.op, request.kind)])
    agent = make_agent(dispatch)
    run(agent, box, T1)
    frames = [step_frame("t1", 1, kind="on_cancel", name="refund", result='{"args":[12],"kwargs":{}}'),
              step_frame("t1", 2, kind="sleep", position=1, name="nap", duration_s=60),
              step_frame("t1", 3, kind="compensate", position=1, name="compensate:refund"),
              step_frame("t1", 4, kind="compensate", op="commit", position=1, name="compensate:refund",
                         result='{"refunded":12}')]
    for i, frame in enumerate(frames):
        box._on_message(frame)
        await replies(wire, i + 1)  # one call at a time, as the stub makes them
    got = [(r["call"], r["status"], r["attempt"]) for r in wire.frames("step_reply")]
    assert got == [(1, "done", 1), (2, "cancelled", 0), (3, "run", 2), (4, "done", 2)]
    sent = [req for req, _, _ in dispatch.calls]
    assert [(r.op, r.kind, r.position, r.name) for r in sent] == [
        (wpb.STEP_OP_BEGIN, wpb.STEP_KIND_ON_CANCEL, 0, "refund"),
        (wpb.STEP_OP_BEGIN, wpb.STEP_KIND_SLEEP, 1, "nap"),
        (wpb.STEP_OP_BEGIN, wpb.STEP_KIND_COMPENSATE, 1, "compensate:refund"),
        (wpb.STEP_OP_COMMIT, wpb.STEP_KIND_COMPENSATE, 1, "compensate:refund")]
    assert sent[0].result_json == b'{"args":[12],"kwargs":{}}' and sent[3].result_json == b'{"refunded":12}'
    assert all((r.lease.task_id, r.lease.lease_epoch) == ("t1", 9) for r in sent)
    await agent.close()


def test_cancelled_and_the_new_kinds_map_both_ways():
    assert steps.reply_of(wpb.StepResponse(status=wpb.STEP_STATUS_CANCELLED)).status == "cancelled"
    mismatch = steps.reply_of(wpb.StepResponse(status=wpb.STEP_STATUS_MISMATCH, logged_name="compensate:refund",
                                               logged_kind=wpb.STEP_KIND_COMPENSATE))
    assert (mismatch.logged_name, mismatch.logged_kind) == ("compensate:refund", "compensate")
    assert steps.reply_of(wpb.StepResponse(status=wpb.STEP_STATUS_MISMATCH,
                                           logged_kind=wpb.STEP_KIND_ON_CANCEL)).logged_kind == "on_cancel"
    failed = steps.parse_frame(step_frame("t1", 1, kind="compensate", op="commit", fatal=True, error={
        "error_class": "FatalError", "message": "already refunded", "stack": ""})).request
    assert (failed.kind, failed.op, failed.fatal, failed.error.message) == (
        wpb.STEP_KIND_COMPENSATE, wpb.STEP_OP_COMMIT, True, "already refunded")
    registered = steps.parse_frame(step_frame("t1", 1, kind="on_cancel", result=None)).request
    assert registered.kind == wpb.STEP_KIND_ON_CANCEL and registered.result_json == b""


@pytest.mark.parametrize("fields, fragment", [
    ({"kind": "on_cancel", "op": "commit"}, "an on_cancel step is only begun"),
    ({"kind": "on_cancel", "result": "{not json"}, "result is not valid JSON"),
    ({"kind": "on_cancel", "result": ["args"]}, "result must be JSON text"),
    ({"kind": "on_cancel", "children": [{"task_type": "x", "payload": "1"}]}, "carries no children"),
    ({"kind": "compensate", "on_failure": "collect"}, "carries no children or on_failure"),
    ({"kind": "compensate", "op": "undo"}, "op must be 'begin' or 'commit'"),
    ({"kind": "compensate", "name": 7}, "name must be a string"),
    ({"kind": "compensate", "fatal": "no"}, "fatal must be true or false"),
    ({"kind": "cancelled"}, "kind must be one of"),
    ({"kind": "ON_CANCEL"}, "kind must be one of"),
])
def test_malformed_compensation_frames_break_the_protocol(sandbox, fields, fragment):
    box, wire = sandbox
    with pytest.raises(ProtocolError, match=re.escape(fragment)):
        box._on_message({**step_frame("t1", 1), **fields})
    assert wire.frames() == []
