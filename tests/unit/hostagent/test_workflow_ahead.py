"""The agent passes a DONE answer's read-ahead entries (StepResponse.ahead) on to the stub:
the mapping to the reply's "ahead", and the frame limit it trims them to."""

from __future__ import annotations

import json

import pytest

from ratchet.internal.worker.v1 import worker_pb2 as wpb
from ratchet.sandbox.protocol import HEADER, MAX_FRAME_BYTES, encode
from ratchet.services.hostagent import steps

from .test_workflow_steps import T1, FakeDispatch, make_agent, replies, run, step_frame

pytestmark = pytest.mark.timeout(30)

KINDS = [(wpb.STEP_KIND_STEP, "step"), (wpb.STEP_KIND_VERSION, "version"), (wpb.STEP_KIND_SLEEP, "sleep"),
         (wpb.STEP_KIND_WAIT, "wait"), (wpb.STEP_KIND_ON_CANCEL, "on_cancel")]


def logged(position: int, kind: int = wpb.STEP_KIND_STEP, result: bytes = b'{"n":1}',
           name: str = "s") -> wpb.LoggedStep:
    return wpb.LoggedStep(position=position, name=f"{name}{position}", kind=kind, attempt=2, result_json=result)


def test_a_done_answer_s_ahead_becomes_the_reply_s_entries_with_lower_case_kinds():
    response = wpb.StepResponse(status=wpb.STEP_STATUS_DONE, attempt=1, result_json=b"1",
                                ahead=[logged(4 + i, kind) for i, (kind, _) in enumerate(KINDS)]
                                + [logged(9, result=b"")])
    reply = steps.reply_of(response)
    assert reply.ahead == [{"position": 4 + i, "name": f"s{4 + i}", "kind": name, "attempt": 2, "result": '{"n":1}'}
                           for i, (_, name) in enumerate(KINDS)] + [
        {"position": 9, "name": "s9", "kind": "step", "attempt": 2, "result": None}]
    assert reply.frame("t1", 3)["ahead"] == reply.ahead
    # No entries, or an answer other than DONE: null (the stub asks as before).
    assert steps.reply_of(wpb.StepResponse(status=wpb.STEP_STATUS_DONE)).ahead is None
    assert steps.reply_of(wpb.StepResponse(status=wpb.STEP_STATUS_RUN, ahead=[logged(1)])).ahead is None
    # A kind this agent does not know ends the list there (the stub asks for that position).
    odd = steps.reply_of(wpb.StepResponse(status=wpb.STEP_STATUS_DONE, ahead=[logged(1), logged(2, kind=99),
                                                                              logged(3)]))
    assert [e["position"] for e in odd.ahead] == [1]


def test_ahead_that_would_pass_the_frame_limit_loses_its_tail_and_the_rest_is_kept_whole():
    # 500 entries of 16 KB each: 8 MB, twice the frame limit.
    big = json.dumps("x" * 16_000).encode()
    reply = steps.reply_of(wpb.StepResponse(status=wpb.STEP_STATUS_DONE, result_json=b"1",
                                            ahead=[logged(1 + i, result=big) for i in range(500)]))
    frame = steps.fitted(reply, "t1", 7)
    body = len(encode(frame)) - HEADER.size
    assert MAX_FRAME_BYTES - 17_000 < body <= MAX_FRAME_BYTES
    kept = frame["ahead"]
    assert 200 < len(kept) < 500
    assert [e["position"] for e in kept] == list(range(1, len(kept) + 1))
    assert all(e["result"] == big.decode() for e in kept)
    assert (frame["status"], frame["result"], frame["call"]) == ("done", "1", 7)
    # Within a small limit: fewer; at a limit no entry fits: null, the rest of the reply intact.
    assert len(steps.fitted(reply, "t1", 7, limit=100_000)["ahead"]) == 6
    assert steps.fitted(reply, "t1", 7, limit=1_000)["ahead"] is None
    small = steps.reply_of(wpb.StepResponse(status=wpb.STEP_STATUS_DONE, ahead=[logged(1), logged(2)]))
    assert steps.fitted(small, "t1", 7) == small.frame("t1", 7)


async def test_the_agent_sends_the_trimmed_ahead_to_the_stub_within_the_frame_limit(sandbox):
    box, wire = sandbox
    big = json.dumps("y" * 100_000).encode()

    def answer(request):
        return wpb.StepResponse(status=wpb.STEP_STATUS_DONE, attempt=1, result_json=b'{"paid":1}',
                                ahead=[logged(request.position + 1 + i, result=big) for i in range(60)])

    agent = make_agent(FakeDispatch(answer))
    run(agent, box, T1)
    box._on_message(step_frame("t1", 5, position=10))
    (reply,) = await replies(wire, 1)
    assert (reply["status"], reply["result"]) == ("done", '{"paid":1}')
    assert 30 < len(reply["ahead"]) < 60  # 6 MB of entries: the tail dropped, not the reply
    assert [e["position"] for e in reply["ahead"]] == list(range(11, 11 + len(reply["ahead"])))
    assert reply["ahead"][0] == {"position": 11, "name": "s11", "kind": "step", "attempt": 2, "result": big.decode()}
    await agent.close()
