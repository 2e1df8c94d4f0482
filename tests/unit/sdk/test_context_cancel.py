"""TaskContext's cancel signal (its Event is made on first use) and the stub's per-attempt
shortcuts (a handler asked once whether it is async; a None result encoded without json)."""

from __future__ import annotations

import threading
import time

from ratchet.context import TaskContext
from ratchet.sandbox.execute import encode_result, execute
from ratchet.sandbox.protocol import decode_body, encode
from ratchet.task import spec_of, task


def _ctx(**kw) -> TaskContext:
    return TaskContext(task_id="t1", attempt=1, max_attempts=3, lease_epoch=1, task_type="x", **kw)


def test_an_attempt_nobody_cancels_never_makes_an_event():
    ctx = _ctx()
    assert ctx.cancelled() is False
    assert ctx.cancel_observed is False
    assert ctx._cancel is None  # (the point: no Event, Condition and Lock per attempt)


def test_a_cancel_before_anyone_waits_is_seen_by_cancelled_and_wait():
    ctx = _ctx()
    ctx._request_cancel()
    assert ctx.cancelled() is True and ctx.cancel_observed is True
    t0 = time.monotonic()
    assert ctx.wait_cancelled(5.0) is True
    assert time.monotonic() - t0 < 1.0  # (returned at once, not after the timeout)


def test_a_cancel_from_another_thread_wakes_a_waiting_handler():
    ctx = _ctx()
    threading.Timer(0.05, ctx._request_cancel).start()
    t0 = time.monotonic()
    assert ctx.wait_cancelled(5.0) is True
    assert time.monotonic() - t0 < 2.0


def test_a_wait_without_cancel_times_out_false():
    ctx = _ctx()
    assert ctx.wait_cancelled(0.01) is False
    assert ctx.cancelled() is False


def test_an_event_passed_in_is_the_one_cancel_sets():
    event = threading.Event()
    ctx = _ctx(cancel_event=event)
    ctx._request_cancel()
    assert event.is_set() and ctx.cancelled()


def test_is_async_is_asked_once_and_runs_each_kind():
    @task
    def plain(ctx, payload):
        return {"got": payload}

    @task
    async def coro(ctx, payload):
        return [payload]

    assert spec_of(plain).is_async is False
    assert spec_of(coro).is_async is True
    assert "is_async" in vars(spec_of(coro))  # (cached on the spec after the first ask)
    assert execute(spec_of(plain), _ctx(), '{"a":1}').result == '{"got":{"a":1}}'
    assert execute(spec_of(coro), _ctx(), "2").result == "[2]"


def test_results_and_frames_encode_as_before():
    assert encode_result(None) == "null"
    assert encode_result({"b": 1, "a": "é"}) == '{"b":1,"a":"é"}'
    frame = encode({"type": "done", "task_id": "t", "result": "null", "x": "é"})
    assert decode_body(frame[4:]) == {"type": "done", "task_id": "t", "result": "null", "x": "é"}
    assert frame[4:] == '{"type":"done","task_id":"t","result":"null","x":"é"}'.encode()
