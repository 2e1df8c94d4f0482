"""Fan-outs through the agent (docs/design/workflows-protocol.md, "Frames and calls"): a
parallel/child step frame becomes a BEGIN with its children; history's RUN with child ids
makes the agent start them with ControlService.StartChildren under the lease's tenant and
app and tell the stub to suspend; refusals of the children are fatal errors, an outage a
retryable one; a DONE forwards every child's outcome by index, and an answer too large for
a frame is a fatal error instead of no answer; malformed fan-out frames break the protocol.

Real Agent and Sandbox objects (in-memory socket), fake DispatchService and ControlService
stubs answering across the contract."""

from __future__ import annotations

import asyncio
import json
import re
import time

import grpc
import pytest

from ratchet.api.tasks.v1 import tasks_pb2
from ratchet.internal.gateway.v1 import control_pb2
from ratchet.internal.worker.v1 import worker_pb2 as wpb
from ratchet.sandbox.protocol import HEADER, MAX_FRAME_BYTES, ProtocolError
from ratchet.services.hostagent import steps
from ratchet.services.hostagent.agent import Agent
from ratchet.services.hostagent.steps import StepClient

from .test_workflow_steps import AUTH, T1, FakeDispatch, FakePool, replies, rpc_error, run, step_frame

pytestmark = pytest.mark.timeout(60)

OWNER = steps.Owner(tenant_id="ten", app_id="app")


class FakeControl:
    """ControlService.StartChildren as the agent sees it: records every call, answers with
    `answer(request)` (a StartChildrenResponse, or an AioRpcError to raise)."""

    def __init__(self, answer=None):
        self.answer = answer or (lambda r: control_pb2.StartChildrenResponse(created=len(r.child_ids)))
        self.calls: list[tuple[control_pb2.StartChildrenRequest, float, tuple]] = []

    async def StartChildren(self, request, timeout, metadata):
        self.calls.append((request, timeout, metadata))
        out = self.answer(request)
        if isinstance(out, BaseException):
            raise out
        return out


def fan_out(task_id: str, call: int, children: list[tuple[str, object]], **fields) -> dict:
    """A parallel step frame as the stub sends it: every field present."""
    frame = step_frame(task_id, call, kind="parallel", name="fan", position=4,
                       children=[{"task_type": t, "payload": json.dumps(p)} for t, p in children],
                       on_failure="collect")
    frame.update(fields)
    return frame


def ids_for(request: wpb.StepRequest) -> list[str]:
    return [f"{request.lease.task_id}.{request.position}.{i}" for i in range(len(request.children))]


def run_with_ids(request: wpb.StepRequest) -> wpb.StepResponse:
    """History's RUN for a fan-out's BEGIN: ids minted from (run, position, index)."""
    return wpb.StepResponse(status=wpb.STEP_STATUS_RUN, attempt=1, child_ids=ids_for(request))


def client(dispatch: FakeDispatch, control: FakeControl | None, budget_s: float = 1.0) -> StepClient:
    return StepClient(stub=dispatch, metadata=AUTH, rpc_timeout_s=0.5, retry_budget_s=budget_s, control=control)


def make_agent(dispatch: FakeDispatch, control: FakeControl, budget_s: float = 1.0) -> Agent:
    return Agent(capacity=4, deployments=None, bundles=None, pool=FakePool(), submit=lambda c: None,
                 steps=client(dispatch, control, budget_s))


def begin(children: int = 2, kind: int = wpb.STEP_KIND_PARALLEL) -> wpb.StepRequest:
    request = wpb.StepRequest(lease=wpb.LeaseRef(shard_id=2, task_id="t1", lease_epoch=9), op=wpb.STEP_OP_BEGIN,
                              kind=kind, position=4, name="fan")
    request.children.extend(wpb.ChildSpec(task_type="charge", payload_json=b'{"n": %d}' % i)
                            for i in range(children))
    return request


def test_fan_out_frames_become_begins_with_their_children_and_policy():
    parallel = steps.parse_frame(fan_out("t1", 1, [("charge", {"n": 1}), ("ship", [1, 2])],
                                         on_failure="fail_fast")).request
    assert (parallel.op, parallel.kind, parallel.on_failure) == (wpb.STEP_OP_BEGIN, wpb.STEP_KIND_PARALLEL,
                                                                 wpb.PARALLEL_FAILURE_FAIL_FAST)
    assert [(c.task_type, c.payload_json) for c in parallel.children] == [("charge", b'{"n": 1}'),
                                                                          ("ship", b"[1, 2]")]
    child = steps.parse_frame(fan_out("t1", 2, [("review", None)], kind="child", on_failure=None)).request
    assert (child.kind, child.on_failure, child.children[0].payload_json) == (
        wpb.STEP_KIND_CHILD, wpb.PARALLEL_FAILURE_UNSPECIFIED, b"null")
    # The frames of the first slice's kinds may carry the new fields empty.
    plain = steps.parse_frame(step_frame("t1", 3, children=None, on_failure=None)).request
    assert not plain.children and plain.on_failure == wpb.PARALLEL_FAILURE_UNSPECIFIED
    assert not steps.parse_frame(step_frame("t1", 4, children=[])).request.children


async def test_run_with_child_ids_starts_the_children_under_the_lease_then_answers_suspend(sandbox):
    box, wire = sandbox
    dispatch, control = FakeDispatch(run_with_ids), FakeControl()
    agent = make_agent(dispatch, control)
    run(agent, box, T1)
    box._on_message(fan_out("t1", 3, [("charge", {"n": 1}), ("ship", {"n": 2})]))
    [reply] = await replies(wire, 1)
    assert (reply["call"], reply["status"], reply["wake_after_s"], reply["fatal"]) == (3, "suspend", None, False)
    [(step, _, _)] = dispatch.calls
    assert (step.lease.task_id, step.lease.lease_epoch, step.kind, len(step.children)) == (
        "t1", 9, wpb.STEP_KIND_PARALLEL, 2)
    [(start, timeout, metadata)] = control.calls
    assert (start.tenant_id, start.app_id, start.parent_id, start.position) == ("ten", "app", "t1", 4)
    assert list(start.child_ids) == ["t1.4.0", "t1.4.1"]
    assert list(start.children) == list(step.children)  # the specs as the stub named them
    assert metadata == AUTH and timeout <= 0.5
    await agent.close()


async def test_start_children_outages_are_retried_then_the_run_suspends():
    answers = [rpc_error(grpc.StatusCode.UNAVAILABLE, "gateway restarting"),
               rpc_error(grpc.StatusCode.DEADLINE_EXCEEDED, "slow"),
               control_pb2.StartChildrenResponse(created=1)]
    dispatch, control = FakeDispatch(run_with_ids), FakeControl(lambda r: answers.pop(0))
    reply = await client(dispatch, control, budget_s=5.0).step(begin(), held=lambda: True, owner=OWNER)
    assert (reply.status, len(dispatch.calls), len(control.calls)) == ("suspend", 1, 3)
    # Every try names the same ids: a resend creates nothing twice (the gateway's promise).
    assert len({tuple(r.child_ids) for r, _, _ in control.calls}) == 1


async def test_start_children_unanswered_is_a_retryable_error_within_the_step_budget():
    dispatch = FakeDispatch(run_with_ids)
    control = FakeControl(lambda r: rpc_error(grpc.StatusCode.UNAVAILABLE, "gateway down"))
    started = time.monotonic()
    reply = await client(dispatch, control, budget_s=0.4).step(begin(), held=lambda: True, owner=OWNER)
    assert (reply.status, reply.fatal) == ("error", False)
    assert reply.message == "the platform did not answer the children's start within 0.4s (UNAVAILABLE: gateway down)"
    assert len(control.calls) >= 2 and time.monotonic() - started < 0.4 + 0.2


@pytest.mark.parametrize("code, details, fatal, message", [
    (grpc.StatusCode.INVALID_ARGUMENT, "children[1]: app has no handler 'shipp'", True,
     "children[1]: app has no handler 'shipp'"),
    (grpc.StatusCode.NOT_FOUND, "app app has no active deployment", True, "app app has no active deployment"),
    (grpc.StatusCode.RESOURCE_EXHAUSTED, "children[0].payload_json is 200000 bytes; the limit is 65536 bytes", True,
     "children[0].payload_json is 200000 bytes; the limit is 65536 bytes"),
    (grpc.StatusCode.PERMISSION_DENIED, "token not accepted", False,
     "the platform refused to start the children: PERMISSION_DENIED: token not accepted"),
])
async def test_refused_children_are_errors_fatal_when_retrying_cannot_help(code, details, fatal, message):
    dispatch, control = FakeDispatch(run_with_ids), FakeControl(lambda r: rpc_error(code, details))
    reply = await client(dispatch, control).step(begin(), held=lambda: True, owner=OWNER)
    assert (reply.status, reply.fatal, reply.message, len(control.calls)) == ("error", fatal, message, 1)
    assert reply.frame("t1", 1)["fatal"] is fatal


async def test_a_parent_that_ended_is_lost_and_the_agent_drops_its_lease(sandbox):
    box, wire = sandbox
    control = FakeControl(lambda r: rpc_error(grpc.StatusCode.FAILED_PRECONDITION,
                                              "parent run t1 has ended (TASK_STATE_CANCELED)"))
    agent = make_agent(FakeDispatch(run_with_ids), control)
    lease = run(agent, box, T1)
    box._on_message(fan_out("t1", 1, [("charge", 1)]))
    [reply] = await replies(wire, 1)
    assert (reply["status"], reply["message"]) == ("lost", "parent run t1 has ended (TASK_STATE_CANCELED)")
    assert lease.lost and agent.lease_refs() == [] and len(control.calls) == 1
    await agent.close()


async def test_a_lease_lost_while_the_children_are_started_ends_the_tries_lost():
    held = [True]

    def answer(request):
        held[0] = False  # the heartbeat loop heard LEASE_LOST meanwhile
        return rpc_error(grpc.StatusCode.UNAVAILABLE, "down")

    dispatch, control = FakeDispatch(run_with_ids), FakeControl(answer)
    reply = await client(dispatch, control, budget_s=5.0).step(begin(), held=lambda: held[0], owner=OWNER)
    assert reply.status == "lost" and len(control.calls) == 1


async def test_a_run_naming_another_number_of_ids_is_an_error_and_starts_nothing():
    dispatch = FakeDispatch(lambda r: wpb.StepResponse(status=wpb.STEP_STATUS_RUN, attempt=1, child_ids=["only"]))
    control = FakeControl()
    reply = await client(dispatch, control).step(begin(3), held=lambda: True, owner=OWNER)
    assert reply.status == "error" and "1 child ids for 3 children" in reply.message
    assert control.calls == []


async def test_a_run_of_a_plain_step_or_a_fan_out_s_other_answers_call_no_control():
    control = FakeControl()
    plain = wpb.StepRequest(kind=wpb.STEP_KIND_STEP, name="x")
    ran = await client(FakeDispatch(run_with_ids), control).step(plain, held=lambda: True, owner=OWNER)
    mismatch = FakeDispatch(lambda r: wpb.StepResponse(status=wpb.STEP_STATUS_MISMATCH, logged_name="fan",
                                                       logged_kind=wpb.STEP_KIND_PARALLEL))
    other = await client(mismatch, control).step(begin(), held=lambda: True, owner=OWNER)
    assert ran.status == "run" and (other.status, other.logged_kind) == ("mismatch", "parallel")
    assert control.calls == []


def outcomes(n: int, result: bytes = b'{"ok": true}') -> list[wpb.ChildOutcome]:
    return [wpb.ChildOutcome(index=i, child_id=f"t1.4.{i}", state=tasks_pb2.TASK_STATE_SUCCEEDED, result_json=result)
            for i in range(n)]


async def test_a_done_fan_out_forwards_every_outcome_by_index(sandbox):
    box, wire = sandbox
    ended = [wpb.ChildOutcome(index=0, child_id="t1.4.0", state=tasks_pb2.TASK_STATE_SUCCEEDED, result_json=b"12"),
             wpb.ChildOutcome(index=1, child_id="t1.4.1", state=tasks_pb2.TASK_STATE_FAILED,
                              error=tasks_pb2.TaskError(error_class="CardDeclined", message="no", stack="tb")),
             wpb.ChildOutcome(index=2, child_id="t1.4.2", state=tasks_pb2.TASK_STATE_CANCELED)]
    dispatch = FakeDispatch(lambda r: wpb.StepResponse(status=wpb.STEP_STATUS_DONE, attempt=1, children=ended))
    control = FakeControl()
    agent = make_agent(dispatch, control)
    run(agent, box, T1)
    box._on_message(fan_out("t1", 5, [("charge", 1), ("charge", 2), ("charge", 3)]))
    [reply] = await replies(wire, 1)
    assert reply["status"] == "done" and control.calls == []
    assert reply["children"] == [
        {"index": 0, "child_id": "t1.4.0", "state": "SUCCEEDED", "result": "12", "error": None},
        {"index": 1, "child_id": "t1.4.1", "state": "FAILED", "result": None,
         "error": {"error_class": "CardDeclined", "message": "no", "stack": "tb"}},
        {"index": 2, "child_id": "t1.4.2", "state": "CANCELED", "result": None, "error": None}]
    await agent.close()


async def test_ten_thousand_outcomes_fit_one_reply_and_too_large_ones_are_a_fatal_error(sandbox):
    box, wire = sandbox
    sizes = {"small": outcomes(10_000), "large": outcomes(10_000, b'"' + b"x" * 1024 + b'"')}
    dispatch = FakeDispatch(lambda r: wpb.StepResponse(status=wpb.STEP_STATUS_DONE, attempt=1,
                                                       children=sizes[r.name]))
    agent = make_agent(dispatch, FakeControl())
    run(agent, box, T1)
    box._on_message(fan_out("t1", 1, [("charge", 1)], name="small"))
    [small] = await replies(wire, 1)
    assert len(small["children"]) == 10_000 and small["children"][-1]["index"] == 9_999
    assert len(wire.data) < MAX_FRAME_BYTES
    box._on_message(fan_out("t1", 2, [("charge", 1)], name="large"))
    large = (await replies(wire, 2))[1]
    # Over the 4 MiB frame: the stub still gets an answer, and one that says what to change.
    assert (large["call"], large["status"], large["fatal"], large["children"]) == (2, "error", True, None)
    assert "10000 children's outcomes" in large["message"] and "keep each child's result small" in large["message"]
    await agent.close()


def test_an_answer_over_the_message_limits_is_a_fatal_error():
    reply = steps.reply_of_refusal(rpc_error(grpc.StatusCode.RESOURCE_EXHAUSTED, "received 70000000 > 67108864"))
    assert (reply.status, reply.fatal) == ("error", True) and "70000000" in reply.message


def test_ten_thousand_children_fit_a_frame_and_parse_quickly():
    frame = fan_out("t1", 1, [("charge", {"order": 10_000 + i}) for i in range(10_000)])
    size = len(json.dumps(frame))
    started = time.perf_counter()
    request = steps.parse_frame(frame).request
    elapsed = time.perf_counter() - started
    assert len(request.children) == 10_000 and request.children[9_999].payload_json == b'{"order": 19999}'
    assert size < MAX_FRAME_BYTES and elapsed < 1.0, (size, elapsed)


def children_of(n: int) -> list[dict]:
    return [{"task_type": "charge", "payload": "1"}] * n


@pytest.mark.parametrize("fields, fragment", [
    ({"children": None}, "children must be a list of 1..10000"),
    ({"children": []}, "children must be a list of 1..10000"),
    ({"children": {"task_type": "charge"}}, "children must be a list of 1..10000"),
    ({"children": children_of(10_001)}, "children must be a list of 1..10000, got 10001"),
    ({"kind": "child", "children": children_of(2)}, "a child step frame's children must be a list of 1..1"),
    ({"children": ["charge"]}, "children[0] must be an object"),
    ({"children": [{"payload": "1"}]}, "children[0].task_type must be a handler name"),
    ({"children": [{"task_type": "", "payload": "1"}]}, "children[0].task_type must be a handler name"),
    ({"children": [{"task_type": 7, "payload": "1"}]}, "children[0].task_type must be a handler name"),
    ({"children": [{"task_type": "x" * 201, "payload": "1"}]}, "children[0].task_type must be a handler name"),
    ({"children": [{"task_type": "a", "payload": "1"}, {"task_type": "b", "payload": {"n": 1}}]},
     "children[1].payload must be JSON text"),
    ({"children": [{"task_type": "a"}]}, "children[0].payload must be JSON text"),
    ({"children": [{"task_type": "a", "payload": "{oops"}]}, "children[0].payload is not valid JSON"),
    ({"children": [{"task_type": "a", "payload": "[NaN]"}]}, "children[0].payload is not valid JSON"),
    ({"children": [{"task_type": "a", "payload": '"' + "x" * (256 * 1024) + '"'}]},
     "children[0].payload is 262146 bytes, over the 262144-byte limit"),
    ({"on_failure": "ignore"}, "on_failure must be one of ['collect', 'fail_fast'] or null"),
    ({"on_failure": ["collect"]}, "on_failure must be one of"),
    ({"op": "commit"}, "a parallel or child step is only begun"),
    ({"kind": "step"}, "a step frame of kind 'step' carries no children or on_failure"),
    ({"kind": "sleep", "children": None}, "a step frame of kind 'sleep' carries no children or on_failure"),
])
def test_malformed_fan_out_frames_break_the_protocol(sandbox, fields, fragment):
    box, wire = sandbox
    frame = {**fan_out("t1", 1, [("charge", 1)]), **fields}
    with pytest.raises(ProtocolError, match=re.escape(fragment)):
        box._on_message(frame)
    assert wire.frames() == []  # nothing answered, nothing sent on


async def test_a_fan_out_frame_over_the_frame_limit_kills_the_sandbox_unread(sandbox):
    box, wire = sandbox
    reader = asyncio.StreamReader()
    # 10,000 children of 512-byte inputs: over 4 MiB, refused from the length alone.
    reader.feed_data(HEADER.pack(10_000 * 540))
    reader.feed_eof()
    await asyncio.wait_for(box._read(reader), 5)
    assert "over the 4194304-byte limit" in box._protocol_error
    assert wire.frames() == []
