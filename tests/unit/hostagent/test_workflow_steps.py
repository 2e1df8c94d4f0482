"""Workflow steps through the agent: a sandbox's step frame goes out as a StepRequest
under the lease the agent holds (the stub never sees it), its answer comes back to the
task that asked as a step_reply, a refusal or an outage becomes the status the protocol
names, and a malformed frame breaks the protocol (docs/design/workflows-protocol.md).

The sandbox is a real Sandbox object whose socket is an in-memory writer (no process is
started); the dispatcher is a fake DispatchService stub answering across the contract."""

from __future__ import annotations

import asyncio
import re
import time

import grpc
import pytest
from google.protobuf import duration_pb2

from ratchet.api.tasks.v1 import tasks_pb2
from ratchet.internal.worker.v1 import worker_pb2 as wpb
from ratchet.sandbox.protocol import ProtocolError
from ratchet.services.hostagent import steps
from ratchet.services.hostagent.agent import Agent, Lease
from ratchet.services.hostagent.sandboxes import Sandbox
from ratchet.services.hostagent.steps import StepClient

from .conftest import Wire

pytestmark = pytest.mark.timeout(30)

T1 = wpb.LeasedTask(shard_id=2, task_id="t1", tenant_id="ten", app_id="app", task_type="flow", lease_epoch=9,
                    attempt=1)
T2 = wpb.LeasedTask(shard_id=3, task_id="t2", tenant_id="ten", app_id="app", task_type="flow", lease_epoch=4,
                    attempt=2)
AUTH = (("authorization", "Bearer tok"),)


def rpc_error(code: grpc.StatusCode, details: str) -> grpc.aio.AioRpcError:
    return grpc.aio.AioRpcError(code, grpc.aio.Metadata(), grpc.aio.Metadata(), details)


class FakeDispatch:
    """DispatchService.Step as the agent sees it: records every call, answers with `answer(request)`
    (a StepResponse, or an AioRpcError to raise)."""

    def __init__(self, answer):
        self.answer = answer
        self.calls: list[tuple[wpb.StepRequest, float, tuple]] = []

    async def Step(self, request, timeout, metadata):
        self.calls.append((request, timeout, metadata))
        out = self.answer(request)
        if isinstance(out, BaseException):
            raise out
        return out


class FakePool:
    """The pool as the agent uses it when a lease is lost: records what it was told."""

    def __init__(self):
        self.retired: list[tuple[str, str]] = []
        self.released: list[Sandbox] = []

    def retire(self, sandbox: Sandbox, task_id: str, reason: str) -> None:
        self.retired.append((task_id, reason))

    def release(self, sandbox: Sandbox) -> None:
        self.released.append(sandbox)


def make_agent(dispatch: FakeDispatch, pool=None, budget_s: float = 1.0) -> Agent:
    client = StepClient(stub=dispatch, metadata=AUTH, rpc_timeout_s=0.5, retry_budget_s=budget_s)
    return Agent(capacity=4, deployments=None, bundles=None, pool=pool or FakePool(), submit=lambda c: None,
                 steps=client)


def run(agent: Agent, box: Sandbox, task: wpb.LeasedTask) -> Lease:
    """The lease held and its run started in `box`, as accept() does once a sandbox is at hand."""
    lease = Lease(task)
    agent._leases[task.task_id] = lease
    agent._busy += 1
    agent._start(lease, box)
    return lease


def step_frame(task_id: str, call: int, **fields) -> dict:
    frame = {"type": "step", "task_id": task_id, "call": call, "op": "begin", "position": 0, "name": "charge",
             "kind": "step", "result": None, "error": None, "fatal": False, "duration_s": None, "match": None,
             "version": None}
    frame.update(fields)
    return frame


async def replies(wire: Wire, n: int, timeout: float = 5.0) -> list[dict]:
    """The first n step_reply frames written to the sandbox, waiting up to `timeout`."""
    deadline = time.monotonic() + timeout
    while len(got := wire.frames("step_reply")) < n:
        assert time.monotonic() < deadline, f"only {len(got)} of {n} step replies: {wire.frames()}"
        await asyncio.sleep(0.005)
    return got


async def test_a_step_frame_goes_out_under_the_lease_and_the_reply_goes_to_the_task_that_asked(sandbox):
    box, wire = sandbox

    def answer(request):
        if request.lease.task_id == "t1":
            return wpb.StepResponse(status=wpb.STEP_STATUS_RUN, attempt=2)
        return wpb.StepResponse(status=wpb.STEP_STATUS_DONE, attempt=1, result_json=b'{"paid": 12}')

    dispatch = FakeDispatch(answer)
    agent = make_agent(dispatch)
    run(agent, box, T1), run(agent, box, T2)
    # The run frames the stub got carry no shard, and the step frames no lease at all.
    assert all("shard_id" not in f for f in wire.frames("run"))
    box._on_message(step_frame("t2", 7, position=3, name="ship"))
    box._on_message(step_frame("t1", 7, op="commit", result='{"n": 1}'))
    got = {r["task_id"]: r for r in await replies(wire, 2)}
    assert got["t1"] == {"type": "step_reply", "task_id": "t1", "call": 7, "status": "run", "attempt": 2,
                         "result": None, "error": None, "wake_after_s": None, "logged_name": None,
                         "logged_kind": None, "message": None, "children": None, "fatal": False,
                         "compensate_from": None, "ahead": None}
    assert (got["t2"]["status"], got["t2"]["call"], got["t2"]["result"]) == ("done", 7, '{"paid": 12}')
    sent = {req.lease.task_id: req for req, _, _ in dispatch.calls}
    assert (sent["t1"].lease.shard_id, sent["t1"].lease.lease_epoch) == (2, 9)
    assert (sent["t2"].lease.shard_id, sent["t2"].lease.lease_epoch) == (3, 4)
    assert not sent["t1"].lease.HasField("checkpoint_json")
    assert (sent["t1"].op, sent["t1"].kind, sent["t1"].result_json) == (wpb.STEP_OP_COMMIT, wpb.STEP_KIND_STEP,
                                                                          b'{"n": 1}')
    assert (sent["t2"].op, sent["t2"].position, sent["t2"].name) == (wpb.STEP_OP_BEGIN, 3, "ship")
    assert all(metadata == AUTH and timeout <= 0.5 for _, timeout, metadata in dispatch.calls)
    await agent.close()


async def test_failed_precondition_answers_lost_and_the_agent_drops_the_lease(sandbox):
    box, wire = sandbox
    pool = FakePool()
    dispatch = FakeDispatch(lambda r: rpc_error(grpc.StatusCode.FAILED_PRECONDITION,
                                                "the run's lease 9 is not current"))
    agent = make_agent(dispatch, pool)
    lease = run(agent, box, T1)
    box._on_message(step_frame("t1", 1))
    [reply] = await replies(wire, 1)
    assert (reply["status"], reply["message"]) == ("lost", "the run's lease 9 is not current")
    # As on LEASE_LOST: no more heartbeats for it, its slot free, its sandbox takes no new task.
    assert lease.lost and agent.lease_refs() == [] and agent.free_slots() == 4
    assert pool.retired and pool.retired[0][0] == "t1" and "not current" in pool.retired[0][1]
    await agent.close()


async def test_a_step_of_a_lease_the_agent_lost_is_answered_lost_without_a_call(sandbox):
    box, wire = sandbox
    dispatch = FakeDispatch(lambda r: wpb.StepResponse(status=wpb.STEP_STATUS_RUN, attempt=1))
    agent = make_agent(dispatch)
    lease = run(agent, box, T1)
    agent.on_heartbeat(wpb.HeartbeatResult(task_id="t1", lease_epoch=9, action=wpb.LEASE_ACTION_LEASE_LOST))
    assert lease.lost
    box._on_message(step_frame("t1", 4))
    box._on_message(step_frame("never-handed-here", 5))
    got = {r["task_id"]: r for r in await replies(wire, 2)}
    assert got["t1"]["status"] == "lost" and got["t1"]["call"] == 4
    assert got["never-handed-here"]["status"] == "lost" and got["never-handed-here"]["call"] == 5
    assert dispatch.calls == []
    await agent.close()


async def test_unavailable_is_retried_then_answered_error_within_the_budget():
    dispatch = FakeDispatch(lambda r: rpc_error(grpc.StatusCode.UNAVAILABLE, "dispatcher restarting"))
    client = StepClient(stub=dispatch, metadata=AUTH, rpc_timeout_s=5.0, retry_budget_s=0.4)
    started = time.monotonic()
    reply = await client.step(wpb.StepRequest(position=2), held=lambda: True)
    elapsed = time.monotonic() - started
    assert reply.status == "error"
    assert reply.message == "the platform did not answer the step within 0.4s (UNAVAILABLE: dispatcher restarting)"
    assert len(dispatch.calls) >= 3  # retried, with backoff
    assert elapsed < 0.4 + 0.2
    # No try was given more time than the budget had left.
    assert all(timeout <= 0.4 for _, timeout, _ in dispatch.calls)


async def test_a_deadline_then_an_answer_is_the_answer():
    answers = [rpc_error(grpc.StatusCode.DEADLINE_EXCEEDED, "slow"),
               rpc_error(grpc.StatusCode.UNAVAILABLE, "down"),
               wpb.StepResponse(status=wpb.STEP_STATUS_RUN, attempt=1)]
    dispatch = FakeDispatch(lambda r: answers.pop(0))
    client = StepClient(stub=dispatch, metadata=AUTH, rpc_timeout_s=1.0, retry_budget_s=5.0)
    reply = await client.step(wpb.StepRequest(), held=lambda: True)
    assert (reply.status, reply.attempt, len(dispatch.calls)) == ("run", 1, 3)


async def test_a_lease_lost_between_tries_ends_them_lost():
    held = [True]

    def answer(request):
        held[0] = False  # the heartbeat loop heard LEASE_LOST meanwhile
        return rpc_error(grpc.StatusCode.UNAVAILABLE, "down")

    dispatch = FakeDispatch(answer)
    client = StepClient(stub=dispatch, metadata=AUTH, rpc_timeout_s=1.0, retry_budget_s=5.0)
    reply = await client.step(wpb.StepRequest(), held=lambda: held[0])
    assert reply.status == "lost" and len(dispatch.calls) == 1


@pytest.mark.parametrize("code, details, message", [
    (grpc.StatusCode.INVALID_ARGUMENT, "position 5 is past the log's end (3 steps)",
     "position 5 is past the log's end (3 steps)"),
    (grpc.StatusCode.NOT_FOUND, "no such run", "the platform refused the step: NOT_FOUND: no such run"),
    (grpc.StatusCode.UNAUTHENTICATED, "bad token", "the platform refused the step: UNAUTHENTICATED: bad token"),
])
async def test_refusals_are_errors_with_the_platform_s_message_and_not_retried(code, details, message):
    dispatch = FakeDispatch(lambda r: rpc_error(code, details))
    client = StepClient(stub=dispatch, metadata=AUTH, rpc_timeout_s=1.0, retry_budget_s=5.0)
    reply = await client.step(wpb.StepRequest(), held=lambda: True)
    assert (reply.status, reply.message, len(dispatch.calls)) == ("error", message, 1)


def _duration(s: float) -> duration_pb2.Duration:
    d = duration_pb2.Duration()
    d.FromNanoseconds(int(s * 1e9))
    return d


def test_every_answer_becomes_the_reply_the_protocol_names():
    done = steps.reply_of(wpb.StepResponse(
        status=wpb.STEP_STATUS_DONE, attempt=3,
        error=tasks_pb2.TaskError(error_class="TimeoutError", message="no event", stack="")))
    assert (done.status, done.attempt, done.result) == ("done", 3, None)
    assert done.error == {"error_class": "TimeoutError", "message": "no event", "stack": ""}
    suspend = steps.reply_of(wpb.StepResponse(status=wpb.STEP_STATUS_SUSPEND, wake_after=_duration(90.5)))
    assert (suspend.status, suspend.wake_after_s) == ("suspend", 90.5)
    assert steps.reply_of(wpb.StepResponse(status=wpb.STEP_STATUS_SUSPEND)).wake_after_s is None
    mismatch = steps.reply_of(wpb.StepResponse(status=wpb.STEP_STATUS_MISMATCH, logged_name="refund",
                                               logged_kind=wpb.STEP_KIND_SLEEP))
    assert (mismatch.status, mismatch.logged_name, mismatch.logged_kind) == ("mismatch", "refund", "sleep")
    assert steps.reply_of(wpb.StepResponse(status=wpb.STEP_STATUS_ABSENT)).status == "absent"
    version = steps.reply_of(wpb.StepResponse(status=wpb.STEP_STATUS_DONE, result_json=b"2"))
    assert version.result == "2"
    unknown = steps.reply_of(wpb.StepResponse())
    assert unknown.status == "error" and "status 0" in unknown.message


def test_frames_of_each_kind_become_the_request_fields():
    wait = steps.parse_frame(step_frame("t1", 1, kind="wait", name="approved", match='{"order": 7}',
                                        duration_s=3600)).request
    assert (wait.kind, wait.name, wait.match_json, wait.duration.seconds) == (
        wpb.STEP_KIND_WAIT, "approved", b'{"order": 7}', 3600)
    forever = steps.parse_frame(step_frame("t1", 1, kind="wait", name="approved")).request
    assert not forever.HasField("duration") and forever.match_json == b""
    sleep = steps.parse_frame(step_frame("t1", 2, kind="sleep", duration_s=0.25)).request
    assert (sleep.kind, sleep.duration.nanos) == (wpb.STEP_KIND_SLEEP, 250_000_000)
    version = steps.parse_frame(step_frame("t1", 3, kind="version", version=2)).request
    assert (version.kind, version.version) == (wpb.STEP_KIND_VERSION, 2)
    failed = steps.parse_frame(step_frame("t1", 4, op="commit", fatal=True, error={
        "error_class": "CardDeclined", "message": "no", "stack": "tb"})).request
    assert (failed.op, failed.fatal, failed.error.error_class, failed.error.stack) == (
        wpb.STEP_OP_COMMIT, True, "CardDeclined", "tb")
    assert not failed.HasField("lease")  # the agent adds it; the stub cannot name one


@pytest.mark.parametrize("fields, fragment", [
    ({"task_id": 5}, "task_id must be a non-empty string"),
    ({"call": "1"}, "call must be an integer"),
    ({"call": True}, "call must be an integer"),
    ({"op": "rollback"}, "op must be 'begin' or 'commit'"),
    ({"op": ["begin"]}, "op must be 'begin' or 'commit'"),
    ({"kind": {"step": 1}}, "kind must be one of"),
    ({"kind": "fanout"}, "kind must be one of"),
    ({"position": -1}, "position must be an integer in 0..2147483647"),
    ({"position": 2**31}, "position must be an integer in 0..2147483647"),
    ({"name": None}, "name must be a string"),
    ({"result": {"a": 1}}, "result must be JSON text"),
    ({"result": "{nope"}, "result is not valid JSON"),
    ({"result": '{"x": NaN}'}, "result is not valid JSON"),
    ({"result": '"' + "x" * (256 * 1024) + '"'}, "over the 262144-byte limit"),
    ({"match": "[1]"}, "match must be a JSON object"),
    ({"error": "oops"}, "error must be an object"),
    ({"error": {"message": 3}}, "error fields must be strings"),
    ({"fatal": "yes"}, "fatal must be true or false"),
    ({"duration_s": "1h"}, "duration_s must be a number of seconds"),
    ({"duration_s": float("inf")}, "duration_s must be a number of seconds"),
    ({"version": -2}, "version must be an integer"),
])
def test_malformed_step_frames_break_the_protocol(sandbox, fields, fragment):
    box, wire = sandbox
    frame = {**step_frame("t1", 1), **fields}
    with pytest.raises(ProtocolError, match=re.escape(fragment)):
        box._on_message(frame)
    assert wire.frames() == []  # nothing answered, nothing sent on


def test_frames_naming_no_task_by_a_string_end_nothing_and_raise_nothing_else(sandbox):
    box, wire = sandbox
    box._on_message({"type": "done", "task_id": ["t1"], "outcome": "succeeded"})
    box._on_message({"type": "checkpoint", "task_id": {"t": 1}, "value": "1"})
    assert wire.frames() == []
