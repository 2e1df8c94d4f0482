"""Client behaviour a user sees: error types, conversions, TaskInfo, wait."""

from __future__ import annotations

import datetime as dt

import grpc
import pytest

from ratchet.api.tasks.v1 import tasks_pb2
from ratchet.client import (
    Client,
    Conflict,
    InvalidArgument,
    NotFound,
    PayloadTooLarge,
    PermissionDenied,
    RatchetError,
    Unauthenticated,
    Unavailable,
    enqueue_request,
    error_from_rpc,
    from_value,
    retry_message,
    task_info,
    timeouts_message,
    to_value,
)
from ratchet.retry import RetryPolicy
from tests.unit.client.fake_server import FakeServer


class _Err(grpc.RpcError):
    def __init__(self, code, details, trailers=()):
        self._code, self._details, self._trailers = code, details, trailers

    def code(self):
        return self._code

    def details(self):
        return self._details

    def trailing_metadata(self):
        return self._trailers


@pytest.mark.parametrize("code, cls, http", [
    (grpc.StatusCode.INVALID_ARGUMENT, InvalidArgument, 400),
    (grpc.StatusCode.NOT_FOUND, NotFound, 404),
    (grpc.StatusCode.ALREADY_EXISTS, Conflict, 409),
    (grpc.StatusCode.UNAUTHENTICATED, Unauthenticated, 401),
    (grpc.StatusCode.PERMISSION_DENIED, PermissionDenied, 403),
    (grpc.StatusCode.RESOURCE_EXHAUSTED, PayloadTooLarge, 413),
    (grpc.StatusCode.UNAVAILABLE, Unavailable, 503),
    (grpc.StatusCode.INTERNAL, RatchetError, 500),
])
def test_status_codes_map_to_typed_errors(code, cls, http):
    err = error_from_rpc(_Err(code, "what to fix"))
    assert type(err) is cls and err.message == "what to fix" and str(err) == "what to fix"
    assert err.code == code.name and err.http_status == http


def test_conflict_carries_the_original_task_id():
    tid = "0190c7a1-0000-8000-8000-000000000001"
    err = error_from_rpc(_Err(grpc.StatusCode.ALREADY_EXISTS, "key reused",
                              (("ratchet-original-task-id", tid),)))
    assert isinstance(err, Conflict) and err.task_id == tid
    from_message = error_from_rpc(_Err(grpc.StatusCode.ALREADY_EXISTS, f"key reused by task {tid.upper()}"))
    assert from_message.task_id == tid


def test_payload_round_trip_keeps_ints_and_refuses_non_json():
    value = {"n": 3, "x": 2.5, "l": [1, None, "s", True], "t": (1, 2)}
    assert from_value(to_value(value)) == {"n": 3, "x": 2.5, "l": [1, None, "s", True], "t": [1, 2]}
    with pytest.raises(InvalidArgument, match="JSON-serializable"):
        to_value({"when": dt.datetime.now()})
    with pytest.raises(InvalidArgument, match="JSON-serializable"):
        to_value(float("nan"))


def test_retry_from_policy_object_and_from_dict():
    msg = retry_message(RetryPolicy(max_attempts=3, base="500ms", cap="1m", jitter=False))
    assert (msg.max_attempts, msg.base.ToMilliseconds(), msg.cap.seconds, msg.jitter) == (3, 500, 60, False)
    partial = retry_message({"max_attempts": 2})
    assert partial.max_attempts == 2 and not partial.HasField("base") and not partial.HasField("factor")


def test_timeouts_accept_strings_numbers_and_timedeltas():
    msg = timeouts_message({"start_to_close": "2m", "schedule_to_start": 5,
                            "schedule_to_close": dt.timedelta(hours=1)})
    assert (msg.start_to_close.seconds, msg.schedule_to_start.seconds, msg.schedule_to_close.seconds) == (
        120, 5, 3600)
    with pytest.raises(InvalidArgument, match=r"timeouts\.start_to_close"):
        timeouts_message({"start_to_close": "soon"})


def test_delay_and_run_at_are_exclusive():
    c = Client("127.0.0.1:1", "k")
    with pytest.raises(InvalidArgument, match="delay or run_at"):
        c.enqueue("greet", delay="1s", run_at=dt.datetime.now(dt.UTC))
    req = enqueue_request("greet", delay="1m30s", queue="emails")
    assert (req.delay.seconds, req.queue) == (90, "emails")
    req = enqueue_request("greet", run_at="2030-01-01T00:00:00+00:00")
    assert req.run_at.ToDatetime(tzinfo=dt.UTC).year == 2030
    c.close()


def _task(state=tasks_pb2.TASK_STATE_SUCCEEDED) -> tasks_pb2.Task:
    t = tasks_pb2.Task(task_id="t1", task_type="greet", queue="default", state=state, attempt=2,
                       max_attempts=5, version=4)
    t.result.CopyFrom(to_value({"greeting": "hi", "n": 1}))
    t.created_at.FromSeconds(1_700_000_000)
    a = t.attempts.add(attempt=1, lease_epoch=1, worker_id="w", outcome=tasks_pb2.ATTEMPT_OUTCOME_FAILED)
    a.error.error_class, a.error.message = "RetryableError", "first attempt"
    t.attempts.add(attempt=2, lease_epoch=2, worker_id="w", outcome=tasks_pb2.ATTEMPT_OUTCOME_SUCCEEDED)
    return t


def test_task_info_is_plain_python():
    info = task_info(_task())
    assert info.state == "SUCCEEDED" and info.terminal and info.succeeded
    assert info.result == {"greeting": "hi", "n": 1} and info.payload is None and info.error is None
    assert info.created_at == dt.datetime.fromtimestamp(1_700_000_000, dt.UTC)
    assert info.finished_at is None
    assert [a.outcome for a in info.attempts] == ["FAILED", "SUCCEEDED"]
    assert info.attempts[0].error.error_class == "RetryableError"
    d = info.to_dict()
    assert d["created_at"].startswith("2023-11-14T") and d["attempts"][1]["error"] is None


def test_get_wait_cancel_against_a_server():
    server = FakeServer()
    try:
        server.tasks.tasks["t1"] = _task(tasks_pb2.TASK_STATE_LEASED)
        with Client(server.endpoint, "k") as c:
            with pytest.raises(TimeoutError, match="still LEASED"):
                c.wait("t1", timeout=0.2)
            server.tasks.tasks["t1"] = _task()
            assert c.wait("t1", timeout=5).result["greeting"] == "hi"
            assert c.cancel("t1") == "CANCELED"
            with pytest.raises(NotFound, match="task nope not found"):
                c.get("nope")
    finally:
        server.stop()


def test_from_env_and_state_dir(monkeypatch, tmp_path):
    monkeypatch.delenv("RATCHET_ENDPOINT", raising=False)
    with pytest.raises(ValueError, match="RATCHET_ENDPOINT"):
        Client.from_env()
    monkeypatch.setenv("RATCHET_ENDPOINT", "127.0.0.1:7")
    monkeypatch.setenv("RATCHET_API_KEY", "k")
    assert Client.from_env().endpoint == "127.0.0.1:7"
    (tmp_path / "endpoints.json").write_text('{"grpc": "127.0.0.1:8", "api_key": "k"}')
    assert Client.from_state_dir(tmp_path).endpoint == "127.0.0.1:8"
    with pytest.raises(ValueError, match="ratchet dev up"):
        Client.from_state_dir(tmp_path / "missing")


def test_public_names():
    import ratchet
    from ratchet import Client as C
    from ratchet import FatalError, RetryableError, task
    from ratchet import RetryPolicy as R
    assert C is Client and R is RetryPolicy and callable(task) and not isinstance(task, type(ratchet))
    assert issubclass(FatalError, Exception) and issubclass(RetryableError, Exception)


def test_wait_rides_out_an_unavailable_platform_until_its_deadline():
    server = FakeServer()
    try:
        server.tasks.tasks["t1"] = _task()
        with Client(server.endpoint, "k", timeout=2) as c:
            # More UNAVAILABLE answers than one call's own transport retries absorb.
            server.tasks.fail_with = [grpc.StatusCode.UNAVAILABLE] * 12
            assert c.wait("t1", timeout=30).state == "SUCCEEDED"
            server.tasks.fail_with = [grpc.StatusCode.UNAVAILABLE] * 1000
            with pytest.raises(Unavailable):
                c.wait("t1", timeout=0.5)
    finally:
        server.stop()
