"""The stub runs a workflow against a fake host agent over a socketpair: the step frames
it sends, and what each step_reply makes the workflow do (docs/design/workflows-protocol.md)."""

from __future__ import annotations

import json
import socket
import threading

from ratchet.errors import FatalError, StepFailed, WorkflowVersionError
from ratchet.retry import RetryPolicy
from ratchet.sandbox.protocol import encode, recv_frame
from ratchet.sandbox.runner import Stub
from ratchet.task import spec_of, task
from ratchet.workflow import workflow

STEP_KEYS = {"type", "task_id", "call", "op", "position", "name", "kind", "result", "error", "fatal",
             "duration_s", "match", "version", "children", "on_failure"}


class BadInput(Exception):
    pass


class FakeAgent:
    """The agent's end of the socket: sends run/step_reply/cancel frames, reads what the stub sends."""

    def __init__(self, *handlers, step_timeout_s: float = 10.0):
        self.sock, stub_end = socket.socketpair()
        self.sock.settimeout(10)
        self.stub = Stub(stub_end, "app", [spec_of(h) for h in handlers], concurrency=2,
                         step_timeout_s=step_timeout_s)
        self.thread = threading.Thread(target=self.stub.serve, daemon=True)
        self.thread.start()
        self.ready = self.recv()

    def recv(self) -> dict:
        frame = recv_frame(self.sock)
        assert frame is not None, "the stub hung up"
        return frame

    def run(self, task_type: str, payload=None, task_id: str = "w1", attempt: int = 1) -> None:
        self.sock.sendall(encode({"type": "run", "task_id": task_id, "attempt": attempt, "max_attempts": 5,
                                  "lease_epoch": attempt, "task_type": task_type, "payload": json.dumps(payload)}))

    def reply(self, step: dict, status: str, **fields) -> None:
        self.sock.sendall(encode({"type": "step_reply", "task_id": step["task_id"], "call": step["call"],
                                  "status": status, "attempt": fields.pop("attempt", 1), **fields}))

    def step(self, **expect) -> dict:
        frame = self.recv()
        assert frame["type"] == "step", frame
        assert set(frame) == STEP_KEYS
        for key, value in expect.items():
            assert frame[key] == value, (key, frame)
        return frame

    def done(self) -> dict:
        frame = self.recv()
        assert frame["type"] == "done", frame
        return frame

    def close(self) -> None:
        self.sock.sendall(encode({"type": "shutdown"}))
        self.thread.join(5)
        assert not self.thread.is_alive()
        self.sock.close()


CALLED: list = []


def record(value):
    CALLED.append(value)
    return {"value": value}


@workflow
def one_step(ctx, input):
    got = ctx.step("fetch", record, input)
    return {"got": got, "attempt_after": ctx.step_attempt}


def test_a_step_done_in_the_log_answers_from_it_without_calling_fn():
    CALLED.clear()
    agent = FakeAgent(one_step)
    assert agent.ready["handlers"] == ["one_step"]
    agent.run("one_step", 5)
    begin = agent.step(op="begin", position=0, name="fetch", kind="step", result=None, fatal=False)
    agent.reply(begin, "done", result='{"value":"from the log"}')
    done = agent.done()
    assert done["outcome"] == "succeeded"
    assert json.loads(done["result"]) == {"got": {"value": "from the log"}, "attempt_after": None}
    assert CALLED == []
    agent.close()


@workflow
def attempt_aware(ctx, input):
    return ctx.step("charge", lambda: {"step_attempt": ctx.step_attempt, "items": (1, 2)})


def test_run_executes_the_step_and_commits_its_json_with_the_step_attempt_from_the_reply():
    agent = FakeAgent(attempt_aware)
    agent.run("attempt_aware")
    begin = agent.step(op="begin", position=0, name="charge")
    agent.reply(begin, "run", attempt=3)
    commit = agent.step(op="commit", position=0, name="charge", kind="step", error=None, fatal=False)
    assert commit["call"] > begin["call"]
    assert json.loads(commit["result"]) == {"step_attempt": 3, "items": [1, 2]}
    agent.reply(commit, "done", attempt=3)
    done = agent.done()
    assert done["outcome"] == "succeeded" and json.loads(done["result"]) == {"step_attempt": 3, "items": [1, 2]}
    agent.close()


@workflow(retries=RetryPolicy(non_retryable=[BadInput]))
def raising(ctx, input):
    def boom():
        raise {"value": ValueError, "fatal": FatalError, "listed": BadInput}[input]("no luck")
    return ctx.step("boom", boom)


def test_a_step_that_raises_commits_its_error_fatal_by_class_and_policy_and_re_raises_it():
    agent = FakeAgent(raising)
    for n, (kind, cls, fatal) in enumerate([("value", "ValueError", False), ("fatal", "FatalError", True),
                                            ("listed", "BadInput", True)]):
        agent.run("raising", kind, task_id=f"w{n}")
        agent.reply(agent.step(op="begin"), "run")
        commit = agent.step(op="commit", result=None, fatal=fatal)
        assert commit["error"]["error_class"] == cls and "no luck" in commit["error"]["message"]
        assert "boom" in commit["error"]["stack"] and "context.py" not in commit["error"]["stack"]
        agent.reply(commit, "done")
        done = agent.done()
        assert (done["outcome"], done["fatal"], done["error"]["error_class"]) == ("failed", fatal, cls)
    agent.close()


def test_a_stored_fatal_error_raises_step_failed():
    agent = FakeAgent(raising)
    agent.run("raising", "value")
    agent.reply(agent.step(op="begin", name="boom"), "done",
                error={"error_class": "KeyError", "message": "'sku'", "stack": ""})
    done = agent.done()
    assert (done["outcome"], done["fatal"], done["error"]["error_class"]) == ("failed", True, StepFailed.__name__)
    assert "boom" in done["error"]["message"] and "KeyError" in done["error"]["message"]
    agent.close()


@workflow
def stubborn(ctx, input):
    try:
        ctx.step("first", record, 1)
    except WorkflowVersionError:
        pass
    try:
        ctx.step("second", record, 2)  # must not reach the platform
    except WorkflowVersionError:
        pass
    return "carried on"


def test_a_mismatch_fails_the_activation_fatally_and_no_later_step_is_sent():
    CALLED.clear()
    agent = FakeAgent(stubborn)
    agent.run("stubborn")
    begin = agent.step(op="begin", name="first", position=0)
    agent.reply(begin, "mismatch", logged_name="renamed", logged_kind="sleep")
    done = agent.done()  # the very next frame: no step frame for "second"
    assert (done["outcome"], done["fatal"], done["error"]["error_class"]) == ("failed", True, "WorkflowVersionError")
    assert "'renamed'" in done["error"]["message"] and "ctx.sleep" in done["error"]["message"]
    assert CALLED == []
    agent.close()


@workflow
def sleeper(ctx, input):
    ctx.step("before", record, "x")
    try:
        ctx.sleep("grace", days=1)
    except Exception:  # noqa: BLE001 -- the point: a broad except does not catch the suspension
        return "swallowed"
    return "woke"


@workflow
def swallower(ctx, input):
    try:
        ctx.sleep("grace", "1d")
    except BaseException:  # noqa: BLE001 -- the point: even this cannot turn a suspension into a result
        pass
    return "swallowed"


def test_a_sleep_the_platform_suspends_ends_the_activation_suspended():
    agent = FakeAgent(sleeper, swallower)
    agent.run("sleeper")
    agent.reply(agent.step(op="begin", name="before"), "done", result='{"value":"x"}')
    sleep = agent.step(op="begin", name="grace", kind="sleep", position=1, duration_s=86400.0)
    agent.reply(sleep, "suspend", wake_after_s=86399.5)
    done = agent.done()
    assert done["outcome"] == "suspended" and done["suspend_position"] == 1 and done["wake_after_s"] == 86399.5
    assert done["error"] is None and done["result"] is None
    agent.run("swallower", task_id="w2")
    agent.reply(agent.step(kind="sleep", position=0), "suspend", wake_after_s=5)
    done = agent.done()
    assert (done["outcome"], done["suspend_position"], done["wake_after_s"]) == ("suspended", 0, 5.0)
    agent.close()


@workflow
def approval(ctx, input):
    try:
        decision = ctx.wait_for_event("approved", match={"order": 7}, timeout="2h")
    except TimeoutError as e:
        return {"timed_out": str(e), "then": ctx.step("escalate", record, "boss")}
    return decision


def test_a_wait_that_timed_out_raises_a_catchable_timeout_error():
    agent = FakeAgent(approval)
    agent.run("approval")
    wait = agent.step(op="begin", kind="wait", name="approved", position=0, duration_s=7200.0)
    assert json.loads(wait["match"]) == {"order": 7}
    agent.reply(wait, "done", error={"error_class": "TimeoutError", "message": "no event in 2h", "stack": ""})
    agent.reply(agent.step(op="begin", name="escalate", position=1), "done", result='{"value":"boss"}')
    done = agent.done()
    assert done["outcome"] == "succeeded"
    assert json.loads(done["result"]) == {"timed_out": "no event in 2h", "then": {"value": "boss"}}
    agent.run("approval", task_id="w2")
    agent.reply(agent.step(kind="wait"), "done", result='{"order":7,"ok":true}')
    assert json.loads(agent.done()["result"]) == {"order": 7, "ok": True}
    agent.close()


@workflow
def versioned(ctx, input):
    branch = ctx.version("new-pricing", latest=2)
    ctx.step("price", record, branch)
    return branch


def test_a_version_marker_answered_absent_takes_no_position():
    agent = FakeAgent(versioned)
    agent.run("versioned")
    marker = agent.step(op="begin", kind="version", name="new-pricing", position=0, version=2)
    agent.reply(marker, "absent")
    agent.reply(agent.step(name="price", position=0), "done", result='{"value":0}')
    assert agent.done()["result"] == "0"
    agent.run("versioned", task_id="w2")
    agent.reply(agent.step(kind="version", position=0), "done", result="2")
    agent.reply(agent.step(name="price", position=1), "done", result='{"value":2}')
    assert agent.done()["result"] == "2"
    agent.close()


def test_a_lost_lease_ends_the_activation_at_once():
    CALLED.clear()
    agent = FakeAgent(stubborn, attempt_aware)
    agent.run("stubborn")
    agent.reply(agent.step(name="first"), "lost", message="the run's lease 1 is not current")
    done = agent.done()
    assert (done["outcome"], done["fatal"], done["error"]["error_class"]) == ("failed", False, "LeaseLost")
    # Lost at the commit: the step ran, but nothing after it is sent.
    agent.run("attempt_aware", task_id="w2")
    agent.reply(agent.step(op="begin"), "run")
    agent.reply(agent.step(op="commit"), "lost")
    assert agent.done()["error"]["error_class"] == "LeaseLost"
    agent.close()


def test_an_error_reply_or_no_reply_fails_the_activation_retryably():
    agent = FakeAgent(one_step, step_timeout_s=0.3)
    agent.run("one_step", 1)
    agent.reply(agent.step(), "error", message="history unavailable after 5 tries")
    done = agent.done()
    assert (done["outcome"], done["fatal"], done["error"]["error_class"]) == ("failed", False, "StepUnavailable")
    assert "history unavailable" in done["error"]["message"]
    agent.run("one_step", 2, task_id="w2")
    late = agent.step()  # never answered in time
    done = agent.done()
    assert (done["outcome"], done["fatal"], done["error"]["error_class"]) == ("failed", False, "StepUnavailable")
    assert "did not answer" in done["error"]["message"]
    agent.reply(late, "done", result="1")  # a late reply is dropped; the stub serves on
    agent.run("one_step", 3, task_id="w3")
    agent.reply(agent.step(), "done", result='"ok"')
    assert agent.done()["outcome"] == "succeeded"
    agent.close()


def test_replies_reach_the_workflow_that_waits_for_them():
    agent = FakeAgent(one_step)
    agent.run("one_step", "a", task_id="a")
    agent.run("one_step", "b", task_id="b")
    steps = {f["task_id"]: f for f in (agent.step(), agent.step())}
    agent.reply(steps["b"], "done", result='"for b"')
    agent.reply(steps["a"], "done", result='"for a"')
    results = {f["task_id"]: json.loads(f["result"])["got"] for f in (agent.done(), agent.done())}
    assert results == {"a": "for a", "b": "for b"}
    agent.close()


GATE = threading.Event()


@workflow
def patient(ctx, input):
    ctx.step("start", record, 0)
    GATE.set()
    for _ in range(500):  # at most ~5 s
        if ctx.wait_cancelled(0.01):
            return "stopped"
    return "never cancelled"


@task
def plain(ctx, payload):
    return payload + 1


def test_a_cancel_reaches_a_workflow_and_plain_tasks_run_beside_it():
    GATE.clear()
    agent = FakeAgent(patient, plain)
    assert agent.ready["handlers"] == ["patient", "plain"]
    agent.run("patient")
    agent.reply(agent.step(), "done", result="0")
    assert GATE.wait(5)
    agent.run("plain", 41, task_id="t1")
    task_done = agent.done()
    assert (task_done["task_id"], task_done["result"]) == ("t1", "42")
    agent.sock.sendall(encode({"type": "cancel", "task_id": "w1"}))
    done = agent.done()
    assert (done["task_id"], done["outcome"], done["result"]) == ("w1", "canceled", '"stopped"')
    agent.close()
