"""Reading ahead through the stub, against a fake host agent over a socketpair: a DONE reply's
"ahead" entries answer the next checkpoint calls without a frame, exactly as the platform's
DONE, MISMATCH or ABSENT would (docs/design/workflows-protocol.md; StepResponse.ahead), and
when they run out the calls go to the platform again."""

from __future__ import annotations

import json
import time

import pytest

from ratchet.workflow import workflow

from .test_stub_steps import CALLED, FakeAgent, record

pytestmark = pytest.mark.timeout(120)


def entry(position: int, name: str, kind: str = "step", result: str | None = '{"value":"logged"}',
          attempt: int = 1) -> dict:
    return {"position": position, "name": name, "kind": kind, "attempt": attempt, "result": result}


@workflow
def every_kind(ctx, input):
    first = ctx.step("first", record, 0)
    branch = ctx.version("billing", latest=2)
    ctx.on_cancel(record, "undo")
    ctx.sleep("grace", days=1)
    event = ctx.wait_for_event("approved", match={"order": 7})
    second = ctx.step("second", record, 2)
    third = ctx.step("third", record, 3)  # past what was read ahead: asked
    return {"first": first, "branch": branch, "event": event, "second": second, "third": third,
            "registered": ctx.compensations}


def test_a_done_with_ahead_answers_the_next_calls_of_every_kind_without_a_frame_then_they_ask_again():
    CALLED.clear()
    agent = FakeAgent(every_kind)
    agent.run("every_kind")
    begin = agent.step(op="begin", position=0, name="first", kind="step")
    agent.reply(begin, "done", result='{"value":"zero"}',
                ahead=[entry(1, "billing", "version", "2"), entry(2, "record", "on_cancel", '{"args":["undo"]}'),
                       entry(3, "grace", "sleep", None), entry(4, "approved", "wait", '{"order":7,"ok":true}'),
                       entry(5, "second", "step", '{"value":"two"}', attempt=3)])
    # The next frame is the begin at position 6: positions 1..5 sent nothing.
    third = agent.step(op="begin", position=6, name="third", kind="step")
    assert third["call"] == begin["call"] + 1
    agent.reply(third, "run")
    commit = agent.step(op="commit", position=6, name="third", result='{"value":3}')
    agent.reply(commit, "done")
    done = agent.done()
    assert done["outcome"] == "succeeded", done
    assert json.loads(done["result"]) == {"first": {"value": "zero"}, "branch": 2, "event": {"order": 7, "ok": True},
                                          "second": {"value": "two"}, "third": {"value": 3}, "registered": ["record"]}
    assert CALLED == [3]  # only the step past the entries ran
    agent.close()


@workflow
def two_steps(ctx, input):
    ctx.step("first", record, 1)
    return ctx.step(input, record, 2)


@pytest.mark.parametrize("name, kind", [("renamed", "step"), ("second", "sleep"), ("second", "on_cancel")])
def test_an_entry_ahead_of_another_name_or_kind_raises_workflow_version_error_without_a_frame(name, kind):
    CALLED.clear()
    agent = FakeAgent(two_steps)
    agent.run("two_steps", "second")
    agent.reply(agent.step(op="begin", position=0, name="first"), "done", result="1",
                ahead=[entry(1, name, kind)])
    done = agent.done()  # the very next frame: no step frame for position 1
    assert (done["outcome"], done["fatal"], done["error"]["error_class"]) == ("failed", True, "WorkflowVersionError")
    assert f"{name!r}" in done["error"]["message"] and "log position 1" in done["error"]["message"]
    assert CALLED == []
    agent.close()


@workflow
def marker_added(ctx, input):
    ctx.step("first", record, 1)
    branch = ctx.version("new-billing", latest=3)  # added under a live run that had passed here
    value = ctx.step("second", record, 2)
    again = ctx.version("later", latest=1)
    return {"branch": branch, "value": value, "again": again}


def test_a_version_marker_absent_ahead_is_branch_0_and_takes_no_position():
    CALLED.clear()
    agent = FakeAgent(marker_added)
    agent.run("marker_added")
    agent.reply(agent.step(op="begin", position=0, name="first"), "done", result="1",
                ahead=[entry(1, "second", "step", '"two"'), entry(2, "other-marker", "version", "1")])
    # "new-billing" meets a step at 1: ABSENT; "second" is that step; "later" meets another marker: ABSENT.
    done = agent.done()
    assert done["outcome"] == "succeeded", done
    assert json.loads(done["result"]) == {"branch": 0, "value": "two", "again": 0}
    assert CALLED == []
    agent.close()


@workflow
def four_steps(ctx, input):
    return [ctx.step(f"s{i}", record, i) for i in range(4)]


def test_a_remote_done_with_new_ahead_replaces_what_was_kept():
    CALLED.clear()
    agent = FakeAgent(four_steps)
    agent.run("four_steps")
    agent.reply(agent.step(op="begin", position=0, name="s0"), "done", result="0", ahead=[entry(1, "s1", result="1")])
    second = agent.step(op="begin", position=2, name="s2")
    agent.reply(second, "done", result="2", ahead=[entry(3, "s3", result="3")])
    done = agent.done()
    assert json.loads(done["result"]) == [0, 1, 2, 3]
    assert CALLED == []
    agent.close()


def test_entries_not_following_the_position_are_not_used():
    CALLED.clear()
    agent = FakeAgent(four_steps)
    agent.run("four_steps")
    # A gap (no entry for 1) and a malformed entry: neither answers anything.
    agent.reply(agent.step(op="begin", position=0, name="s0"), "done", result="0",
                ahead=[entry(2, "s2", result="2"), entry(3, "s3", result="3")])
    agent.reply(agent.step(op="begin", position=1, name="s1"), "done", result="1",
                ahead=[entry(2, "s2", result="2"), {"position": 3, "name": "s3", "kind": "bogus", "attempt": 1}])
    agent.reply(agent.step(op="begin", position=3, name="s3"), "done", result="3")
    assert json.loads(agent.done()["result"]) == [0, 1, 2, 3]
    agent.close()


@workflow
def compensated(ctx, input):
    ctx.step("book", record, "booked")
    ctx.on_cancel(record, "undo", name="unbook")
    ctx.sleep("hold", days=1)
    return "never"


def test_an_on_cancel_answered_ahead_registers_and_its_compensation_runs_after_a_cancel():
    CALLED.clear()
    agent = FakeAgent(compensated)
    agent.run("compensated")
    agent.reply(agent.step(op="begin", position=0, name="book"), "done", result='"booked"',
                ahead=[entry(1, "unbook", "on_cancel", '{"args":["undo"],"kwargs":{}}')])
    sleep = agent.step(op="begin", position=2, name="hold", kind="sleep")
    agent.reply(sleep, "cancelled", compensate_from=3)
    comp = agent.step(op="begin", position=3, name="compensate:unbook", kind="compensate")
    agent.reply(comp, "run")
    agent.reply(agent.step(op="commit", position=3, kind="compensate"), "done")
    assert agent.done()["outcome"] == "canceled"
    assert CALLED == ["undo"]
    agent.close()


STEPS = 10_000


@workflow
def long_run(ctx, input):
    for i in range(input):
        ctx.step(f"s{i}", record, i)
    return input


def _answer_from_log(agent: FakeAgent, page: int) -> list[int]:
    """Answer every begin from a log of STEPS completed steps, with `page` entries ahead;
    the positions asked, once the done frame came."""
    asked = []
    while (frame := agent.recv())["type"] == "step":
        p = frame["position"]
        asked.append(p)
        ahead = [entry(q, f"s{q}", result=str(q)) for q in range(p + 1, min(STEPS, p + 1 + page))]
        agent.reply(frame, "done", result=str(p), ahead=ahead or None)
    assert frame["type"] == "done" and json.loads(frame["result"]) == STEPS, frame
    return asked


@pytest.mark.parametrize("page", [0, 500])
def test_resuming_a_10000_step_log_asks_once_per_page_read_ahead(page):
    CALLED.clear()
    agent = FakeAgent(long_run)
    started = time.perf_counter()
    agent.run("long_run", STEPS)
    asked = _answer_from_log(agent, page)
    elapsed = time.perf_counter() - started
    print(f"\nresume of a {STEPS}-step log, {page} ahead: {len(asked)} step frames, {elapsed:.3f} s")
    assert asked == (list(range(STEPS)) if page == 0 else list(range(0, STEPS, page + 1)))  # a DONE and its 500
    assert CALLED == []
    agent.close()

