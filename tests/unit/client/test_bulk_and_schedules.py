"""Client calls of issue 4 against a fake gateway: searching dead letters
page by page, bulk operations whose request id survives transport retries,
schedules and circuit breakers."""

from __future__ import annotations

import datetime as dt

import grpc
import pytest
from google.protobuf import struct_pb2, timestamp_pb2

from ratchet.api.schedules.v1 import schedules_pb2
from ratchet.api.tasks.v1 import tasks_pb2
from ratchet.client import Client, DeadlineExceeded, InvalidArgument, NotFound
from ratchet.retry import RetryPolicy
from tests.unit.client.fake_server import FakeServer

U, D = grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.DEADLINE_EXCEEDED
SLOT = timestamp_pb2.Timestamp(seconds=1_767_225_600)  # 2026-01-01T00:00:00Z


@pytest.fixture
def server():
    s = FakeServer()
    yield s
    s.stop()


@pytest.fixture
def client(server):
    c = Client(server.endpoint, "rk_test", timeout=5.0)
    c._t.sleep = lambda seconds: None
    yield c
    c.close()


def _failed_task(n: int) -> tasks_pb2.Task:
    return tasks_pb2.Task(task_id=f"t-{n}", task_type="report", queue="default", state=tasks_pb2.TASK_STATE_FAILED,
                          error=tasks_pb2.TaskError(error_class="KeyError", message="k"),
                          schedule_id="sch-1", scheduled_time=SLOT, retried_as=f"t-{n}-again" if n == 0 else "",
                          checkpoint=struct_pb2.Value(number_value=n * 100) if n else None)


def test_iter_tasks_follows_every_page_with_one_filter(server, client):
    server.tasks.listable = [_failed_task(n) for n in range(5)]
    tasks = list(client.iter_tasks(state="FAILED", error_class="KeyError", since="2h", page_size=2))
    assert [t.task_id for t in tasks] == [f"t-{n}" for n in range(5)]
    requests = [r for r in server.tasks.requests if isinstance(r, tasks_pb2.ListTasksRequest)]
    # Three pages, one filter: the relative "2h" was resolved once (the fake refuses a changed filter).
    assert len(requests) == 3 and len({r.since.seconds for r in requests}) == 1
    first = requests[0]
    assert (first.state, first.error_class, first.page_size, first.page_token) == (
        tasks_pb2.TASK_STATE_FAILED, "KeyError", 2, "")
    ago = dt.datetime.now(dt.UTC) - first.since.ToDatetime(tzinfo=dt.UTC)
    assert abs(ago.total_seconds() - 7200) < 60
    t0, t1 = tasks[0], tasks[1]
    assert (t0.schedule_id, t0.scheduled_time, t0.retried_as, t0.retry_of, t0.checkpoint) == (
        "sch-1", dt.datetime(2026, 1, 1, tzinfo=dt.UTC), "t-0-again", None, None)
    assert t1.checkpoint == 100 and t1.error.error_class == "KeyError"
    assert t1.to_dict()["scheduled_time"] == "2026-01-01T00:00:00+00:00"


def test_list_tasks_returns_one_page_and_its_token(server, client):
    server.tasks.listable = [_failed_task(n) for n in range(3)]
    since = dt.datetime(2026, 1, 1, tzinfo=dt.UTC)
    page = client.list_tasks(state="task_state_failed", task_type="report", queue="q", since=since,
                             until="2026-01-02T00:00:00+00:00", page_size=2)
    assert [t.task_id for t in page.tasks] == ["t-0", "t-1"] and page.next_page_token
    rest = client.list_tasks(state="FAILED", task_type="report", queue="q", since=since,
                             until="2026-01-02T00:00:00+00:00", page_size=2, page_token=page.next_page_token)
    assert [t.task_id for t in rest.tasks] == ["t-2"] and rest.next_page_token is None
    with pytest.raises(InvalidArgument, match="different filter"):
        client.list_tasks(state="FAILED", page_token=page.next_page_token)


@pytest.mark.parametrize("kwargs, fragment", [
    (dict(state=["FAILED", "EXPIRED"]), "single state"),
    (dict(state="DEAD"), "unknown task state 'DEAD'; use one of ENQUEUED, LEASED"),
    (dict(since="yesterday"), "neither an ISO 8601 time nor a duration ago"),
    (dict(until=[1]), "until must be a datetime"),
])
def test_bad_search_arguments_are_refused_before_sending(server, client, kwargs, fragment):
    with pytest.raises(InvalidArgument, match=fragment):
        client.list_tasks(**kwargs)
    assert server.tasks.requests == []


def test_bulk_retry_reuses_its_request_id_across_transport_retries(server, client):
    server.tasks.fail_with = [U, D]
    result = client.retry_tasks(state="FAILED", task_type="report", error_class="KeyError")
    sent = server.tasks.requests
    assert len(sent) == 3 and len({r.request_id for r in sent}) == 1 and sent[0].request_id.startswith("sdk-")
    assert list(sent[0].filter.states) == [tasks_pb2.TASK_STATE_FAILED] and sent[0].filter.task_type == "report"
    assert result.matched == 3 and result.operation.operation_id == f"op-{sent[0].request_id}"
    assert (result.operation.kind, result.operation.state) == ("RETRY", "RUNNING")
    assert len(server.tasks.operations) == 1
    again = client.retry_tasks(state="FAILED")
    assert again.operation.operation_id != result.operation.operation_id  # a new logical call, a new id


def test_dry_run_counts_and_explicit_request_ids_are_sent_unchanged(server, client):
    dry = client.cancel_tasks(state=["ENQUEUED", "RETRY_WAIT"], queue="emails", dry_run=True)
    assert dry.matched == 3 and dry.operation is None and server.tasks.operations == {}
    assert list(server.tasks.requests[0].filter.states) == [tasks_pb2.TASK_STATE_ENQUEUED,
                                                            tasks_pb2.TASK_STATE_RETRY_WAIT]
    op = client.cancel_tasks(queue="emails", request_id="cleanup-42").operation
    assert op.operation_id == "op-cleanup-42" and op.kind == "CANCEL"


def test_wait_operation_reports_progress_and_failures(server, client):
    op = client.retry_tasks(request_id="r1").operation
    done = client.wait_operation(op.operation_id, timeout=10, max_interval=0.01)
    assert (done.state, done.matched, done.processed, done.succeeded, done.failed) == ("SUCCEEDED", 3, 3, 2, 1)
    assert done.done and [(f.task_id, f.reason) for f in done.failures] == [
        ("t-2", "task type 'gone' is not registered")]
    assert done.finished_at == dt.datetime(2026, 1, 1, 0, 1, tzinfo=dt.UTC)
    assert done.to_dict()["failures"] == [{"task_id": "t-2", "reason": "task type 'gone' is not registered"}]


def test_operations_can_be_cancelled_and_waiting_times_out(server, client):
    op = client.retry_tasks(request_id="r2").operation
    with pytest.raises(TimeoutError, match="still RUNNING after 0s"):
        client.wait_operation(op.operation_id, timeout=0)
    assert client.cancel_operation(op.operation_id).state == "CANCELED"
    assert client.get_operation(op.operation_id).state == "CANCELED"
    with pytest.raises(NotFound, match="operation nope not found"):
        client.get_operation("nope")


def test_create_schedule_sends_the_template_and_survives_a_lost_answer(server, client):
    server.tasks.fail_with = [U]  # the schedule is written, then the answer is lost
    s = client.create_schedule("*/5 * * * *", "report", {"day": "today"}, timezone="Europe/Paris", queue="cron",
                               retry=RetryPolicy(max_attempts=2, rules={"ValueError": "fatal"}),
                               timeouts={"start_to_close": "1m"}, overlap_policy="buffer_one",
                               catchup_window="10m")
    creates = [r for r in server.tasks.requests if isinstance(r, schedules_pb2.CreateScheduleRequest)]
    assert len(creates) == 2 and creates[0].request_id == creates[1].request_id
    assert list(server.schedules.schedules) == [s.schedule_id]  # one schedule, not two
    req = creates[0]
    assert req.overlap_policy == schedules_pb2.OVERLAP_POLICY_BUFFER_ONE and req.catchup_window.seconds == 600
    assert req.task_template.retry.rules["ValueError"].non_retryable
    assert (s.cron, s.timezone, s.task_type, s.payload, s.queue, s.overlap_policy, s.catchup_window_s, s.state) == (
        "*/5 * * * *", "Europe/Paris", "report", {"day": "today"}, "cron", "buffer_one", 600.0, "ACTIVE")
    assert s.timeouts == {"start_to_close": "60s"} and s.retry["max_attempts"] == 2


def test_bad_schedules_are_refused_with_the_servers_reason(server, client):
    with pytest.raises(InvalidArgument, match="minute 61 is out of range"):
        client.create_schedule("61 * * * *", "report")
    with pytest.raises(InvalidArgument, match="overlap_policy must be one of allow, skip"):
        client.create_schedule("* * * * *", "report", overlap_policy="queue")
    assert server.schedules.schedules == {}


def test_schedule_lifecycle(server, client):
    ids = [client.create_schedule("0 * * * *", f"job{n}").schedule_id for n in range(3)]
    assert [s.schedule_id for s in client.iter_schedules(page_size=2)] == ids
    page = client.list_schedules(page_size=2)
    assert len(page.schedules) == 2 and page.next_page_token == "2"
    paused = client.pause_schedule(ids[0])
    assert paused.state == "PAUSED" and paused.next_fire_time is None
    assert client.resume_schedule(ids[0]).state == "ACTIVE"
    got = client.get_schedule(ids[0])
    assert got.next_fire_time == dt.datetime(2026, 1, 1, tzinfo=dt.UTC) and got.catchup_window_s is None
    assert client.trigger_schedule(ids[1]).task_id == f"task-of-{ids[1]}"
    server.tasks.fail_with = [U]  # deleted, answer lost: the retry's NOT_FOUND means it is done
    assert client.delete_schedule(ids[2]) is None
    with pytest.raises(NotFound, match=f"schedule {ids[2]} not found"):
        client.delete_schedule(ids[2])
    with pytest.raises(NotFound):
        client.get_schedule(ids[2])


def test_a_trigger_is_not_resent_after_an_ambiguous_failure(server, client):
    sid = client.create_schedule("0 * * * *", "job", overlap_policy="skip").schedule_id
    before = len(server.tasks.requests)
    server.tasks.fail_with = [D]
    with pytest.raises(DeadlineExceeded):
        client.trigger_schedule(sid)
    assert len(server.tasks.requests) - before == 1
    server.tasks.fail_with = [U]  # refused before arriving: safe to send again
    result = client.trigger_schedule(sid)
    assert result.skipped and result.task_id is None


def test_breakers_list_and_reset(server, client):
    [b] = client.list_breakers()
    assert (b.task_type, b.state, b.crashes, b.reason) == ("poison", "OPEN", 5, "5 sandbox crashes within 60s")
    assert b.probe_at - b.opened_at == dt.timedelta(minutes=5)
    assert b.last_crashes[0].error_class == "SandboxCrashed" and b.to_dict()["last_crashes"][0]["task_id"] == "t-9"
    assert client.reset_breaker("poison").state == "CLOSED"
    assert client.list_breakers() == []
    with pytest.raises(NotFound, match="no breaker for task type 'fine'"):
        client.reset_breaker("fine")
