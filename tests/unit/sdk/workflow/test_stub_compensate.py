"""ctx.on_cancel through the stub, against a fake host agent over a socketpair: the
on_cancel frames, a "cancelled" reply unwinding the code at a sleep, a step, a wait, a
version marker or a fan-out, and the compensations running last first as "compensate"
steps from that position on, a compensation failing retryably (the activation fails, retryable) or fatally
(logged, the others run), and a replay that registers again and skips the compensations
the log holds (docs/design/workflows-protocol.md, "Compensations: ctx.on_cancel")."""

from __future__ import annotations

import json

import pytest

from ratchet.errors import FatalError
from ratchet.workflow import workflow

from .test_stub_steps import FakeAgent

UNDONE: list = []


def undo(what, *, times=1):
    UNDONE.append(what)
    return {"undone": what, "times": times}


@workflow
def registers(ctx, input):
    ctx.on_cancel(undo, "order-1", times=2)
    ctx.on_cancel(lambda: UNDONE.append("lambda"))
    ctx.on_cancel(undo, object(), name="opaque:args")
    return {"registered": ctx.compensations}


def test_on_cancel_sends_a_begin_naming_it_with_its_arguments_and_runs_nothing():
    UNDONE.clear()
    agent = FakeAgent(registers)
    agent.run("registers")
    first = agent.step(op="begin", kind="on_cancel", position=0, name="undo",
                       result='{"args":["order-1"],"kwargs":{"times":2}}', error=None, children=None)
    agent.reply(first, "done", result=first["result"])
    # A lambda's __name__ ("<lambda>") made a name the platform takes; arguments that are not
    # JSON are logged as null.
    agent.reply(agent.step(op="begin", kind="on_cancel", position=1, name="_lambda_",
                           result='{"args":[],"kwargs":{}}'), "done")
    agent.reply(agent.step(op="begin", kind="on_cancel", position=2, name="opaque:args", result=None), "done")
    done = agent.done()
    assert done["outcome"] == "succeeded"
    assert json.loads(done["result"]) == {"registered": ["undo", "_lambda_", "opaque:args"]}
    assert UNDONE == []
    agent.close()


@workflow
def books(ctx, kind):
    ctx.step("reserve", lambda: "seat 7")
    ctx.on_cancel(undo, "seat", name="release_seat")
    ctx.step("charge", lambda: "paid")
    ctx.on_cancel(lambda: undo("card", times=ctx.step_attempt), name="refund")
    try:
        if kind == "sleep":
            ctx.sleep("cool_off", "1d")
        elif kind == "wait":
            ctx.wait_for_event("approved")
        elif kind == "version":
            ctx.version("v2")
        elif kind == "parallel":
            ctx.parallel("notify", [("email", {"to": "a"}), ("sms", {"to": "b"})])
        else:
            ctx.step("ship", lambda: UNDONE.append("shipped"))
    except BaseException:  # noqa: BLE001 -- the code swallowing the cancel must not change its end
        return "swallowed"
    return "shipped"


def replay_to_the_cancel(agent, kind, *, task_id="w1", **cancelled):
    """Answer the log's four entries done and the checkpoint at position 4 "cancelled" (with
    `cancelled`'s fields, e.g. compensate_from)."""
    agent.reply(agent.step(kind="step", name="reserve", position=0, task_id=task_id), "done", result='"seat 7"')
    agent.reply(agent.step(kind="on_cancel", name="release_seat", position=1), "done")
    agent.reply(agent.step(kind="step", name="charge", position=2), "done", result='"paid"')
    agent.reply(agent.step(kind="on_cancel", name="refund", position=3), "done")
    agent.reply(agent.step(op="begin", kind=kind, position=4), "cancelled", **cancelled)


@pytest.mark.parametrize("kind", ["sleep", "step", "wait", "version", "parallel"])
def test_a_cancelled_reply_unwinds_the_code_and_runs_the_compensations_last_first_from_that_position(kind):
    UNDONE.clear()
    agent = FakeAgent(books)
    agent.run("books", kind)
    replay_to_the_cancel(agent, kind)
    begin = agent.step(op="begin", kind="compensate", position=4, name="compensate:refund", result=None)
    agent.reply(begin, "run", attempt=3)
    agent.reply(agent.step(op="commit", kind="compensate", position=4, name="compensate:refund",
                           result='{"undone":"card","times":3}', error=None, fatal=False), "done")
    agent.reply(agent.step(op="begin", kind="compensate", position=5, name="compensate:release_seat"), "run")
    agent.reply(agent.step(op="commit", kind="compensate", position=5, result='{"undone":"seat","times":1}'),
                "done")
    done = agent.done()
    assert (done["outcome"], done["result"], done["error"], done["fatal"]) == ("canceled", None, None, False)
    assert UNDONE == ["card", "seat"]  # the checkpoint at the cancel point never ran
    agent.close()


@pytest.mark.parametrize("kind", ["sleep", "step", "wait", "parallel"])
@pytest.mark.parametrize("offset", [1, 0])
def test_the_compensations_take_their_positions_from_the_cancelled_replys_compensate_from(kind, offset):
    # offset 1: the checkpoint left open at 4 keeps its entry there; 0: the log had nothing there.
    UNDONE.clear()
    agent = FakeAgent(books)
    agent.run("books", kind)
    replay_to_the_cancel(agent, kind, compensate_from=4 + offset)
    first = 4 + offset
    agent.reply(agent.step(op="begin", kind="compensate", position=first, name="compensate:refund"), "run")
    agent.reply(agent.step(op="commit", kind="compensate", position=first, name="compensate:refund"), "done")
    agent.reply(agent.step(op="begin", kind="compensate", position=first + 1, name="compensate:release_seat"),
                "run")
    agent.reply(agent.step(op="commit", kind="compensate", position=first + 1), "done")
    assert agent.done()["outcome"] == "canceled"
    assert UNDONE == ["card", "seat"]
    agent.close()


@workflow
def two_undos(ctx, input):
    ctx.on_cancel(undo, "first", name="first")
    ctx.on_cancel(input_failure, input, name="second")
    ctx.sleep("wait", "1h")


def input_failure(kind):
    UNDONE.append(f"second:{kind}")
    if kind == "fatal":
        raise FatalError("the refund was already reversed")
    raise ConnectionError("the bank is down")


def test_a_compensation_failing_fatally_is_committed_failed_and_the_others_still_run():
    UNDONE.clear()
    agent = FakeAgent(two_undos)
    agent.run("two_undos", "fatal")
    agent.reply(agent.step(kind="on_cancel", name="first", position=0), "done")
    agent.reply(agent.step(kind="on_cancel", name="second", position=1), "done")
    agent.reply(agent.step(kind="sleep", position=2), "cancelled")
    agent.reply(agent.step(op="begin", kind="compensate", name="compensate:second", position=2), "run")
    commit = agent.step(op="commit", kind="compensate", name="compensate:second", position=2, result=None,
                        fatal=True)
    assert (commit["error"]["error_class"], commit["error"]["message"]) == ("FatalError",
                                                                           "the refund was already reversed")
    agent.reply(commit, "done")
    agent.reply(agent.step(op="begin", kind="compensate", name="compensate:first", position=3), "run")
    agent.reply(agent.step(op="commit", kind="compensate", position=3, fatal=False), "done")
    assert agent.done()["outcome"] == "canceled"
    assert UNDONE == ["second:fatal", "first"]
    agent.close()


def test_a_compensation_failing_retryably_fails_the_activation_retryably_before_the_next_one():
    UNDONE.clear()
    agent = FakeAgent(two_undos)
    agent.run("two_undos", "retry")
    agent.reply(agent.step(kind="on_cancel", position=0), "done")
    agent.reply(agent.step(kind="on_cancel", position=1), "done")
    agent.reply(agent.step(kind="sleep", position=2), "cancelled")
    agent.reply(agent.step(op="begin", kind="compensate", name="compensate:second", position=2), "run")
    commit = agent.step(op="commit", kind="compensate", position=2, fatal=False)
    assert commit["error"]["error_class"] == "ConnectionError"
    agent.reply(commit, "done")
    done = agent.done()  # "first" is not begun: the next activation runs what is unfinished, in order
    assert (done["outcome"], done["fatal"], done["error"]["error_class"]) == ("failed", False, "ConnectionError")
    assert UNDONE == ["second:retry"]
    agent.close()


def test_a_replay_registers_again_and_skips_the_compensations_the_log_holds():
    UNDONE.clear()
    agent = FakeAgent(books)
    agent.run("books", "sleep", attempt=2)
    # The earlier activation ran "refund" at position 4 and failed before "release_seat": the
    # log's COMPENSATE row at 4 is why the sleep there answers cancelled.
    replay_to_the_cancel(agent, "sleep")
    agent.reply(agent.step(op="begin", kind="compensate", position=4, name="compensate:refund"), "done",
                result='{"undone":"card","times":1}')
    agent.reply(agent.step(op="begin", kind="compensate", position=5, name="compensate:release_seat"), "run",
                attempt=2)
    agent.reply(agent.step(op="commit", kind="compensate", position=5), "done")
    assert agent.done()["outcome"] == "canceled"
    assert UNDONE == ["seat"]  # refund is not run twice
    agent.close()


@pytest.mark.parametrize(("status", "fields", "outcome", "fatal", "error_class"), [
    ("lost", {"message": "lease 2 is not current"}, "failed", False, "LeaseLost"),
    ("error", {"message": "dispatcher unreachable"}, "failed", False, "StepUnavailable"),
    ("mismatch", {"logged_name": "ship", "logged_kind": "step"}, "failed", True, "WorkflowVersionError"),
    ("cancelled", {}, "failed", False, "StepUnavailable"),  # never expected at a compensation
])
def test_the_platform_stopping_a_compensation_decides_the_activation(status, fields, outcome, fatal, error_class):
    UNDONE.clear()
    agent = FakeAgent(two_undos)
    agent.run("two_undos", "fatal")
    agent.reply(agent.step(kind="on_cancel", position=0), "done")
    agent.reply(agent.step(kind="on_cancel", position=1), "done")
    agent.reply(agent.step(kind="sleep", position=2), "cancelled")
    agent.reply(agent.step(op="begin", kind="compensate", position=2), status, **fields)
    done = agent.done()
    assert (done["outcome"], done["fatal"], done["error"]["error_class"]) == (outcome, fatal, error_class)
    assert UNDONE == []
    agent.close()


@workflow
def nothing_to_undo(ctx, input):
    ctx.step("only", lambda: 1)


def test_a_cancelled_reply_with_nothing_registered_ends_canceled_and_a_cancelled_commit_is_unexpected():
    agent = FakeAgent(nothing_to_undo)
    agent.run("nothing_to_undo")
    agent.reply(agent.step(kind="step", position=0), "cancelled")
    assert agent.done()["outcome"] == "canceled"
    agent.run("nothing_to_undo", task_id="w2")
    agent.reply(agent.step(op="begin", task_id="w2"), "run")
    agent.reply(agent.step(op="commit", task_id="w2"), "cancelled")
    done = agent.done()
    assert (done["outcome"], done["fatal"], done["error"]["error_class"]) == ("failed", False, "StepUnavailable")
    agent.close()


async def _async_undo():
    return None


@workflow
def bad_registrations(ctx, input):
    problems = []
    for args, kwargs in [(("not callable",), {}), ((_async_undo,), {}), ((undo,), {"name": "no spaces"}),
                         ((undo,), {"name": ""})]:
        try:
            ctx.on_cancel(*args, **kwargs)
        except (TypeError, ValueError) as e:
            problems.append(f"{type(e).__name__}: {e}")
    return problems


def test_bad_registrations_are_refused_before_anything_is_sent():
    agent = FakeAgent(bad_registrations)
    agent.run("bad_registrations")
    done = agent.done()  # no step frame came before it
    problems = json.loads(done["result"])
    assert len(problems) == 4
    assert problems[0].startswith("TypeError: ctx.on_cancel(fn): fn must be callable")
    assert "async function" in problems[1]
    assert problems[2].startswith("ValueError: ctx.on_cancel() name must be 1..200 characters")
    assert "got ''" in problems[3]
    agent.close()


@workflow
def long_name(ctx, input):
    ctx.on_cancel(undo, "x", name="n" * 200)
    ctx.sleep("s", "1s")


def test_a_compensation_of_a_200_character_name_runs_under_a_name_cut_to_200():
    UNDONE.clear()
    agent = FakeAgent(long_name)
    agent.run("long_name")
    agent.reply(agent.step(kind="on_cancel", name="n" * 200), "done")
    agent.reply(agent.step(kind="sleep", position=1), "cancelled")
    agent.reply(agent.step(kind="compensate", position=1, name=("compensate:" + "n" * 200)[:200]), "run")
    agent.reply(agent.step(op="commit", kind="compensate", position=1), "done")
    assert agent.done()["outcome"] == "canceled"
    assert UNDONE == ["x"]
    agent.close()
