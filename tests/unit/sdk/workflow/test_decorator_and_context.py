"""@workflow's declaration checks and what deploy sees; WorkflowContext's client-side checks
(names, durations, where ctx calls may be made), each before anything reaches the platform."""

from __future__ import annotations

import datetime as dt
import json
import subprocess
import sys
import textwrap
import threading
import types

import pytest

import ratchet
from ratchet.errors import TaskDefinitionError
from ratchet.retry import RetryPolicy
from ratchet.task import SPEC_ATTR, find_tasks, spec_of, task
from ratchet.workflow import WorkflowContext, workflow


def test_bare_and_configured_workflows_describe_kind_and_resume():
    @workflow
    def onboard(ctx, input):
        return None

    @workflow(name="billing.run", resume="pinned", retries=RetryPolicy(max_attempts=9), timeout="2m",
              schedule_to_close="30d")
    def bill(ctx, input):
        return None

    d = spec_of(onboard).describe()
    assert (d["name"], d["kind"], d["resume"]) == ("onboard", "workflow", "latest")
    assert d["timeouts"] == {"start_to_close_s": 600.0, "schedule_to_start_s": None, "schedule_to_close_s": None}
    d = spec_of(bill).describe()
    assert (d["name"], d["kind"], d["resume"], d["retry"]["max_attempts"]) == ("billing.run", "workflow", "pinned", 9)
    assert d["timeouts"]["start_to_close_s"] == 120.0 and d["timeouts"]["schedule_to_close_s"] == 30 * 86400.0
    assert onboard(None, None) is None and ratchet.workflow is workflow  # still a plain function; exported

    @task
    def plain(ctx, payload):
        return None

    assert spec_of(plain).describe()["kind"] == "task" and "resume" not in spec_of(plain).describe()


@pytest.mark.parametrize("kwargs, fragment", [
    (dict(resume="sometimes"), "'latest' or 'pinned'"),
    (dict(timeout="forever"), "@workflow timeout"),
    (dict(timeout=0), "greater than zero"),
    (dict(retries=3), "RetryPolicy"),
    (dict(name="no spaces"), "@workflow name"),
])
def test_bad_arguments_fail_at_import_time(kwargs, fragment):
    with pytest.raises(TaskDefinitionError, match=fragment):
        @workflow(**kwargs)
        def w(ctx, input):
            return None


def test_an_async_def_or_a_wrong_signature_is_refused_with_what_to_write():
    with pytest.raises(TaskDefinitionError, match=r"def fetch_all\(ctx, input\):.*inside a step"):
        @workflow
        async def fetch_all(ctx, input):
            return None

    with pytest.raises(TaskDefinitionError, match="generator"):
        @workflow
        def gen(ctx, input):
            yield 1

    with pytest.raises(TaskDefinitionError, match=r"\(ctx, input\)"):
        @workflow
        def one(ctx):
            return None


def test_discovery_finds_workflows_beside_tasks_under_the_same_attribute():
    mod = types.ModuleType("m")

    @workflow
    def w(ctx, input):
        return None

    @task
    def t(ctx, payload):
        return None

    mod.w, mod.t = w, t
    assert [(s.name, s.kind) for s in find_tasks(mod)] == [("t", "task"), ("w", "workflow")]
    assert getattr(w, SPEC_ATTR).kind == "workflow"


def test_sandbox_describe_reports_a_workflow(tmp_path):
    (tmp_path / "app.py").write_text(textwrap.dedent("""
        from ratchet import task, workflow

        @workflow(resume="latest", timeout="1m")
        def onboard(ctx, input):
            return ctx.step("a", lambda: 1)

        @task
        def send(ctx, payload):
            return None
    """))
    out = subprocess.run([sys.executable, "-m", "ratchet.sandbox", "describe", "--app-dir", str(tmp_path)],
                         capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    handlers = {h["name"]: h for h in json.loads(out.stdout)["handlers"]}
    assert (handlers["onboard"]["kind"], handlers["onboard"]["resume"]) == ("workflow", "latest")
    assert handlers["send"]["kind"] == "task" and "resume" not in handlers["send"]


class Recorder:
    """A channel that records requests and answers from a script (one reply per call)."""

    def __init__(self, *replies):
        self.requests: list = []
        self.replies = list(replies)

    def call(self, request):
        self.requests.append(request)
        return self.replies.pop(0) if self.replies else {"status": "error", "message": "script ran out"}


def _ctx(channel) -> WorkflowContext:
    return WorkflowContext(channel=channel, task_id="r1", attempt=1, max_attempts=5, lease_epoch=1,
                           task_type="w")


@pytest.mark.parametrize("call, fragment", [
    (lambda c: c.step("", lambda: 1), r"ctx\.step\(\) name"),
    (lambda c: c.step("x" * 201, lambda: 1), "1..200"),
    (lambda c: c.step("a/b", lambda: 1), r"\[A-Za-z0-9_.:-\]"),
    (lambda c: c.version("v", latest=0), "at least 1"),
    (lambda c: c.version("v", latest=True), "integer"),
    (lambda c: c.sleep("s"), "needs how long"),
    (lambda c: c.sleep("s", "1d", hours=1), "not both"),
    (lambda c: c.sleep("s", minutes=float("nan")), "finite number"),
    (lambda c: c.sleep("s", float("inf")), "finite number"),
    (lambda c: c.sleep("s", "soon"), "invalid duration"),
    (lambda c: c.sleep("s", days=1e12), "10,000 years"),
    (lambda c: c.wait_for_event("e", match=["x"]), "match must be a dict"),
    (lambda c: c.wait_for_event("e", match={"x": {1}}), "match must be JSON"),
    (lambda c: c.wait_for_event("bad name"), r"ctx\.wait_for_event\(\) name"),
    (lambda c: c.wait_for_event("e", timeout=-5), "negative"),
])
def test_bad_calls_are_refused_before_anything_is_sent(call, fragment):
    channel = Recorder()
    ctx = _ctx(channel)
    with pytest.raises(ValueError, match=fragment):
        call(ctx)
    assert channel.requests == [] and ctx.position == 0


def test_sleep_takes_a_duration_or_units_and_sends_seconds():
    channel = Recorder(*[{"status": "done"}] * 3)
    ctx = _ctx(channel)
    ctx.sleep("a", "1d")
    ctx.sleep("b", 90)
    ctx.sleep("c", days=1, hours=2, minutes=3, seconds=4.5)
    assert [r["duration_s"] for r in channel.requests] == [86400.0, 90.0, 86400 + 7200 + 180 + 4.5]
    assert [r["position"] for r in channel.requests] == [0, 1, 2] and ctx.position == 3


def test_a_sleep_of_zero_or_less_is_sent_as_zero_and_only_no_duration_at_all_is_an_error():
    channel = Recorder(*[{"status": "done"}] * 6)
    ctx = _ctx(channel)
    ctx.sleep("zero", seconds=0)
    ctx.sleep("past", seconds=-30)  # e.g. seconds=deadline - now, with the deadline passed
    ctx.sleep("sum", minutes=1, seconds=-90)
    ctx.sleep("n", 0)
    ctx.sleep("neg", -2.5)
    ctx.sleep("td", dt.timedelta(seconds=-1))
    assert [r["duration_s"] for r in channel.requests] == [0.0] * 6
    assert [r["position"] for r in channel.requests] == list(range(6)) and ctx.position == 6
    with pytest.raises(ValueError, match="needs how long"):
        ctx.sleep("none")
    ctx2 = _ctx(Recorder({"status": "done"}))
    ctx2.sleep("td", dt.timedelta(hours=1))
    assert ctx2._channel.requests[0]["duration_s"] == 3600.0


def test_ctx_calls_are_refused_from_another_thread_inside_a_step_and_after_the_end():
    channel = Recorder({"status": "run", "attempt": 1}, {"status": "done"})
    ctx = _ctx(channel)
    errors: list = []
    thread = threading.Thread(target=lambda: errors.append(_raised(lambda: ctx.step("t", lambda: 1))))
    thread.start()
    thread.join(5)
    assert "another thread" in errors[0]

    def nested():
        return ctx.sleep("inner", seconds=1)

    with pytest.raises(RuntimeError, match="steps do not nest"):
        ctx.step("outer", nested)
    assert channel.requests[1]["op"] == "commit" and channel.requests[1]["error"]["error_class"] == "RuntimeError"
    ctx._end()
    with pytest.raises(RuntimeError, match="after activation 1"):
        ctx.step("late", lambda: 1)
    assert len(channel.requests) == 2


def _raised(fn) -> str:
    try:
        fn()
    except RuntimeError as e:
        return str(e)
    return ""


def test_an_unexpected_or_malformed_reply_stops_the_activation():
    from ratchet.errors import StepUnavailable

    ctx = _ctx(Recorder({"status": "suspend"}))
    with pytest.raises(StepUnavailable, match="does not expect"):
        ctx.step("a", lambda: 1)
    with pytest.raises(StepUnavailable):  # and stays stopped
        ctx.version("v")
    ctx = _ctx(Recorder({"status": "done", "result": "{not json"}))
    with pytest.raises(StepUnavailable, match="not JSON"):
        ctx.step("a", lambda: 1)
    assert isinstance(ctx.halted, StepUnavailable)
