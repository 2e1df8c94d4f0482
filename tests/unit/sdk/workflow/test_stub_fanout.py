"""ctx.parallel and ctx.child through the stub, against a fake host agent over a socketpair:
the fan-out's step frame, suspension on "suspend", the outcomes a "done" carries (in
order, ChildError in place, ChildFailed for fail_fast and ctx.child), a fatal refusal,
a mismatch; and the checks that refuse a bad fan-out before anything is sent
(docs/design/workflows-protocol.md, "Fan-out")."""

from __future__ import annotations

import itertools
import json

import pytest

import ratchet
from ratchet.errors import ChildError, ChildFailed, StepUnavailable
from ratchet.task import task
from ratchet.workflow import WorkflowContext, workflow

from .test_stub_steps import FakeAgent


@task
def double(ctx, x):
    return x * 2


@workflow
def child_flow(ctx, input):
    return input


def _describe(value):
    """A child's outcome as the workflow returns it (a ChildError is not JSON)."""
    if isinstance(value, ChildError):
        return {"error": [value.index, value.child_id, value.state, value.error_class, value.message]}
    return value


@workflow
def fan(ctx, input):
    values = ctx.parallel("fan", [(double, 1), ("child_flow", {"a": 1}), (double, 3)],
                          on_failure=input or "collect")
    return [_describe(v) for v in values]


def _outcome(index, state="SUCCEEDED", result=None, error_class=None):
    error = None if error_class is None else {"error_class": error_class, "message": f"boom {index}", "stack": "s"}
    return {"index": index, "child_id": f"c{index}", "state": state, "result": result, "error": error}


def test_parallel_sends_one_fan_out_frame_and_suspends_when_the_agent_says_suspend():
    agent = FakeAgent(fan, double, child_flow)
    agent.run("fan")
    frame = agent.step(op="begin", position=0, name="fan", kind="parallel", on_failure="collect",
                       result=None, error=None, fatal=False, duration_s=None, match=None, version=None)
    assert frame["children"] == [{"task_type": "double", "payload": "1"},
                                 {"task_type": "child_flow", "payload": '{"a":1}'},
                                 {"task_type": "double", "payload": "3"}]
    agent.reply(frame, "suspend", wake_after_s=None)
    done = agent.done()
    assert (done["outcome"], done["suspend_position"], done["wake_after_s"]) == ("suspended", 0, None)
    agent.close()


def test_collect_returns_every_result_in_order_with_a_child_error_in_place_of_a_failure():
    agent = FakeAgent(fan, double, child_flow)
    agent.run("fan")
    frame = agent.step(kind="parallel")
    # In any order: the SDK places each outcome by its index.
    agent.reply(frame, "done", children=[_outcome(2, result="6"), _outcome(0, result="2"),
                                         _outcome(1, "FAILED", error_class="KeyError")])
    done = agent.done()
    assert done["outcome"] == "succeeded"
    assert json.loads(done["result"]) == [2, {"error": [1, "c1", "FAILED", "KeyError", "boom 1"]}, 6]
    agent.close()


@workflow
def fail_fast(ctx, input):
    try:
        ctx.parallel("ff", [(double, 1), (double, 2), (double, 3), (double, 4)], on_failure="fail_fast")
    except ChildFailed as e:
        return {"index": e.index, "child_id": e.child_id, "state": e.state, "class": e.error_class,
                "error": _describe(e.error), "text": str(e)}
    return "no failure"


@workflow
def fail_fast_uncaught(ctx, input):
    return ctx.parallel("ff", [(double, 1), (double, 2)], on_failure="fail_fast")


def test_fail_fast_raises_child_failed_naming_the_first_failed_child_and_uncaught_fails_the_run():
    agent = FakeAgent(fail_fast, fail_fast_uncaught, double)
    agent.run("fail_fast")
    frame = agent.step(kind="parallel", on_failure="fail_fast")
    # Child 3 failed first; siblings it cancelled were recorded after; child 0 succeeded; 2 is absent.
    agent.reply(frame, "done", children=[_outcome(0, result="2"), _outcome(1, "CANCELED"),
                                         _outcome(3, "FAILED", error_class="ValueError")])
    done = agent.done()
    got = json.loads(done["result"])
    assert (got["index"], got["child_id"], got["state"], got["class"]) == (3, "c3", "FAILED", "ValueError")
    assert got["error"] == {"error": [3, "c3", "FAILED", "ValueError", "boom 3"]}
    assert "'ff'" in got["text"] and "child 3 (c3)" in got["text"]

    agent.run("fail_fast_uncaught", task_id="w2")
    agent.reply(agent.step(kind="parallel", task_id="w2"), "done",
                children=[_outcome(1, "TIMED_OUT", error_class="TaskTimeout")])
    done = agent.done()
    assert (done["outcome"], done["fatal"], done["error"]["error_class"]) == ("failed", True, "ChildFailed")
    assert "child 1 (c1) ended TIMED_OUT" in done["error"]["message"]
    agent.close()


@workflow
def one_child(ctx, input):
    try:
        return {"value": ctx.child("only", double, input)}
    except ChildFailed as e:
        return {"failed": [e.index, e.child_id, e.state, e.error_class, e.error_message]}


def test_child_sends_one_child_and_returns_its_result_or_raises_child_failed():
    agent = FakeAgent(one_child, double)
    agent.run("one_child", 21)
    frame = agent.step(kind="child", name="only", position=0, on_failure="collect")
    assert frame["children"] == [{"task_type": "double", "payload": "21"}]
    agent.reply(frame, "done", children=[_outcome(0, result="42")])
    assert json.loads(agent.done()["result"]) == {"value": 42}

    agent.run("one_child", 1, task_id="w2")
    agent.reply(agent.step(kind="child", task_id="w2"), "done",
                children=[_outcome(0, "FAILED", error_class="FatalError")])
    assert json.loads(agent.done()["result"]) == {"failed": [0, "c0", "FAILED", "FatalError", "boom 0"]}
    agent.close()


@workflow
def swallows_refusal(ctx, input):
    try:
        ctx.child("c", "no_such_handler", {})
    except Exception:  # noqa: BLE001 -- the point: catching the refusal does not make the run go on
        pass
    ctx.step("after", lambda: 1)  # must not reach the platform
    return "carried on"


def test_a_fatal_error_reply_fails_the_activation_for_good_and_a_plain_one_retryably():
    agent = FakeAgent(swallows_refusal)
    agent.run("swallows_refusal")
    frame = agent.step(kind="child", children=[{"task_type": "no_such_handler", "payload": "{}"}])
    agent.reply(frame, "error", fatal=True, message="the app has no handler 'no_such_handler'")
    done = agent.done()  # the very next frame: no step frame for "after"
    assert (done["outcome"], done["fatal"], done["error"]["error_class"]) == ("failed", True, "StepRefused")
    assert "no handler 'no_such_handler'" in done["error"]["message"] and "ctx.child('c')" in done["error"]["message"]

    agent.run("swallows_refusal", task_id="w2")
    agent.reply(agent.step(kind="child", task_id="w2"), "error", message="the gateway is unreachable")
    done = agent.done()
    assert (done["outcome"], done["fatal"], done["error"]["error_class"]) == ("failed", False, "StepUnavailable")
    agent.close()


def test_a_mismatch_at_a_fan_out_fails_the_run_and_names_another_child_count():
    agent = FakeAgent(fan, double, child_flow)
    agent.run("fan")
    agent.reply(agent.step(kind="parallel", position=0), "mismatch", logged_name="fan", logged_kind="parallel")
    done = agent.done()
    assert (done["outcome"], done["fatal"], done["error"]["error_class"]) == ("failed", True, "WorkflowVersionError")
    assert "another number of children" in done["error"]["message"]

    agent.run("fan", task_id="w2")
    agent.reply(agent.step(kind="parallel", task_id="w2"), "mismatch", logged_name="charge", logged_kind="step")
    done = agent.done()
    assert done["error"]["error_class"] == "WorkflowVersionError" and "ctx.step('charge')" in done["error"]["message"]
    agent.close()


def test_a_malformed_fan_out_answer_fails_the_activation_retryably():
    agent = FakeAgent(fan, fail_fast, double, child_flow)
    bad_answers = [
        ("fan", [_outcome(0, result="2"), _outcome(2, result="6")]),  # collect with a child missing
        ("fan", [_outcome(0, result="2"), _outcome(0, result="2"), _outcome(1), _outcome(2)]),  # index twice
        ("fan", [_outcome(0, result="{nope"), _outcome(1), _outcome(2)]),  # a result that is not JSON
        ("fan", "not a list"),
        ("fail_fast", [_outcome(0, result="2")]),  # fail_fast done with none failed and children missing
    ]
    for n, (workflow_name, children) in enumerate(bad_answers):
        agent.run(workflow_name, task_id=f"w{n}")
        agent.reply(agent.step(kind="parallel", task_id=f"w{n}"), "done", children=children)
        done = agent.done()
        assert (done["outcome"], done["fatal"], done["error"]["error_class"]) == ("failed", False,
                                                                                  "StepUnavailable"), children
    agent.close()


class Recorder:
    """A channel that records requests and answers "done" with every child succeeded."""

    def __init__(self):
        self.requests: list = []

    def call(self, request):
        self.requests.append(request)
        children = [{"index": i, "child_id": f"c{i}", "state": "SUCCEEDED", "result": "null"}
                    for i in range(len(request["children"]))]
        return {"status": "done", "children": children}


def _ctx(channel) -> WorkflowContext:
    return WorkflowContext(channel=channel, task_id="r1", attempt=1, max_attempts=5, lease_epoch=1, task_type="w")


def plain(ctx, x):
    return x


@pytest.mark.parametrize("call, error, fragment", [
    (lambda c: c.parallel("p", []), ValueError, "1..10,000 children, got 0"),
    (lambda c: c.parallel("p", [(double, 1)] * 10_001), ValueError, "got more than 10,000"),
    (lambda c: c.parallel("p", itertools.repeat((double, 1))), ValueError, "got more than 10,000"),
    (lambda c: c.parallel("p", 5), TypeError, "list of \\(handler, input\\) pairs"),
    (lambda c: c.parallel("p", "double"), TypeError, "list of \\(handler, input\\) pairs"),
    (lambda c: c.parallel("p", {"double": 1}), TypeError, "list of \\(handler, input\\) pairs"),
    (lambda c: c.parallel("p", [double]), TypeError, "child 0 must be a \\(handler, input\\) pair"),
    (lambda c: c.parallel("p", [(double, 1), (plain, 2)]), TypeError, "child 1: the handler must be a @task"),
    (lambda c: c.parallel("p", [("bad name", 1)]), ValueError, "child 0: handler name"),
    (lambda c: c.parallel("p", [(double, {1, 2})]), TypeError, "child 0: the input must be JSON"),
    (lambda c: c.parallel("p", [(double, float("nan"))]), TypeError, "must be JSON"),
    (lambda c: c.parallel("p", [(double, "x" * (256 * 1024))]), ValueError, "over the 262144-byte limit"),
    (lambda c: c.parallel("p", [(double, "x" * 200_000)] * 25), ValueError, "a fan-out can carry"),
    (lambda c: c.parallel("p", [(double, 1)], on_failure="ignore"), ValueError, "'collect' or 'fail_fast'"),
    (lambda c: c.parallel("bad/name", [(double, 1)]), ValueError, "ctx.parallel\\(\\) name"),
    (lambda c: c.child("c", plain, 1), TypeError, "ctx.child\\('c'\\) child 0: the handler must be"),
    (lambda c: c.child("c", double, object()), TypeError, "must be JSON"),
])
def test_bad_fan_outs_are_refused_before_anything_is_sent(call, error, fragment):
    channel = Recorder()
    ctx = _ctx(channel)
    with pytest.raises(error, match=fragment):
        call(ctx)
    assert channel.requests == [] and ctx.position == 0


def test_the_largest_fan_out_fits_and_takes_one_position():
    channel = Recorder()
    ctx = _ctx(channel)
    assert ctx.parallel("p", [(double, i) for i in range(10_000)]) == [None] * 10_000
    assert ctx.child("c", "double", None) is None
    assert ctx.parallel("g", ((double, i) for i in range(3))) == [None] * 3  # any iterable
    assert [r["kind"] for r in channel.requests] == ["parallel", "child", "parallel"] and ctx.position == 3
    assert len(channel.requests[0]["children"]) == 10_000


def test_child_error_and_child_failed_are_exported_and_catchable():
    assert ratchet.ChildError is ChildError and ratchet.ChildFailed is ChildFailed
    assert issubclass(ChildFailed, Exception) and issubclass(ChildError, Exception)
    assert not issubclass(StepUnavailable, Exception)  # (the halts are not, by design)


@workflow
def naps_zero(ctx, input):
    ctx.sleep("zero", seconds=0)
    return ctx.step("after", lambda: "went on")


def test_a_sleep_of_zero_is_sent_and_the_platforms_done_lets_the_run_go_on():
    agent = FakeAgent(naps_zero)
    agent.run("naps_zero")
    agent.reply(agent.step(kind="sleep", name="zero", position=0, duration_s=0.0), "done")
    agent.reply(agent.step(op="begin", kind="step", name="after", position=1), "run")
    agent.reply(agent.step(op="commit", name="after", result='"went on"'), "done")
    assert json.loads(agent.done()["result"]) == "went on"
    agent.close()
