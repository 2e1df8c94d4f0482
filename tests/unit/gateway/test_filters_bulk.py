"""Filters of ListTasks and bulk operations, operation ids, and the aggregation of
an operation's per-shard parts."""

from __future__ import annotations

import pytest
from google.protobuf import json_format

from ratchet.api.tasks.v1 import tasks_pb2
from ratchet.libs.rpc.errors import InvalidArgument
from ratchet.services.gateway import bulk, filters

S = tasks_pb2
RETRY, CANCEL = S.BULK_OPERATION_KIND_RETRY, S.BULK_OPERATION_KIND_CANCEL


def f(**data) -> tasks_pb2.TaskFilter:
    return json_format.ParseDict(data, S.TaskFilter())


def test_list_filter_from_flat_fields():
    req = json_format.ParseDict({"state": "TASK_STATE_FAILED", "task_type": "t", "error_class": "ValueError",
                                 "since": "2026-01-01T00:00:00Z"}, S.ListTasksRequest())
    out = filters.list_filter(req)
    assert list(out.states) == [S.TASK_STATE_FAILED] and out.task_type == "t" and out.HasField("since")
    assert list(filters.list_filter(S.ListTasksRequest()).states) == []


@pytest.mark.parametrize("req, needle", [
    ({"task_type": "has space"}, "task_type must be"),
    ({"queue": "q!"}, "queue must be"),
    ({"error_class": "not a class"}, "error_class holds"),
    ({"since": "2026-01-02T00:00:00Z", "until": "2026-01-01T00:00:00Z"},
     "since (2026-01-02T00:00:00Z) must be before until"),
])
def test_bad_list_filters_name_the_flat_field(req, needle):
    with pytest.raises(InvalidArgument) as e:
        filters.list_filter(json_format.ParseDict(req, S.ListTasksRequest()))
    assert e.value.message.startswith(needle.split()[0]) and needle in e.value.message


def test_page_size_bounds():
    assert filters.page_size(0) == 100 and filters.page_size(500) == 500
    for bad in (-1, 501):
        with pytest.raises(InvalidArgument, match=r"page_size must be 1\.\.500"):
            filters.page_size(bad)


def test_bulk_defaults_and_allowed_states():
    assert list(filters.bulk_filter(f(), RETRY).states) == [S.TASK_STATE_FAILED]
    assert list(filters.bulk_filter(f(), CANCEL).states) == [S.TASK_STATE_ENQUEUED, S.TASK_STATE_LEASED,
                                                             S.TASK_STATE_RETRY_WAIT]
    assert list(filters.bulk_filter(f(states=["TASK_STATE_EXPIRED", "TASK_STATE_EXPIRED"]), RETRY).states) == \
        [S.TASK_STATE_EXPIRED]
    with pytest.raises(InvalidArgument, match=r"states\[1\] is SUCCEEDED, but a bulk retry applies only to FAILED, "
                                              r"CANCELED, EXPIRED"):
        filters.bulk_filter(f(states=["TASK_STATE_FAILED", "TASK_STATE_SUCCEEDED"]), RETRY)
    with pytest.raises(InvalidArgument, match="bulk cancel applies only to ENQUEUED, LEASED, RETRY_WAIT"):
        filters.bulk_filter(f(states=["TASK_STATE_FAILED"]), CANCEL)
    with pytest.raises(InvalidArgument, match="must be a task state"):
        filters.bulk_filter(S.TaskFilter(states=[S.TASK_STATE_UNSPECIFIED]), CANCEL)


def test_same_filter_ignores_state_order_and_sub_microsecond_time():
    a = f(states=["TASK_STATE_FAILED", "TASK_STATE_EXPIRED"], since="2026-01-01T00:00:00.123456789Z")
    b = f(states=["TASK_STATE_EXPIRED", "TASK_STATE_FAILED"], since="2026-01-01T00:00:00.123456Z")
    assert filters.same_filter(a, b)
    assert not filters.same_filter(a, f(states=["TASK_STATE_FAILED"], since="2026-01-01T00:00:00.123456Z"))


def test_operation_ids_are_deterministic_per_app_and_random_without_request_id():
    a = bulk.operation_id("t", "app", "req-1")
    assert a == bulk.operation_id("t", "app", "req-1") and bulk.OPERATION_ID.match(a)
    assert len({a, bulk.operation_id("t", "app2", "req-1"), bulk.operation_id("t2", "app", "req-1"),
                bulk.operation_id("t", "app", "req-2")}) == 4
    r1, r2 = bulk.operation_id("t", "app", ""), bulk.operation_id("t", "app", "")
    assert r1 != r2 and bulk.OPERATION_ID.match(r1)
    with pytest.raises(InvalidArgument, match="request_id"):
        bulk.check_request_id("x" * 201)


def part(state: int, n: int, failures: list[str] = (), created: str = "2026-01-01T00:00:00Z",
         finished: str | None = None) -> tasks_pb2.BulkOperation:
    p = S.BulkOperation(operation_id="op", kind=RETRY, state=state, matched=n, processed=n, succeeded=n - len(failures),
                        failed=len(failures), filter=f(states=["TASK_STATE_FAILED"]),
                        failures=[S.BulkItemFailure(task_id=t, reason="gone") for t in failures])
    p.created_at.FromJsonString(created)
    if finished:
        p.finished_at.FromJsonString(finished)
    return p


def test_aggregate_sums_and_states():
    done = S.BULK_OPERATION_STATE_SUCCEEDED
    parts = [part(done, 5, ["a"], finished="2026-01-01T00:00:03Z"),
             part(S.BULK_OPERATION_STATE_RUNNING, 7, ["b", "c"], created="2025-12-31T00:00:00Z"),
             part(done, 0)]
    op = bulk.aggregate("op_x", parts)
    assert op.operation_id == "op_x" and op.kind == RETRY and op.state == S.BULK_OPERATION_STATE_RUNNING
    assert (op.matched, op.processed, op.succeeded, op.failed) == (12, 12, 9, 3)
    assert [x.task_id for x in op.failures] == ["a", "b", "c"]
    assert op.created_at.ToJsonString() == "2025-12-31T00:00:00Z" and not op.HasField("finished_at")
    finished = bulk.aggregate("op_x", [part(done, 1, finished="2026-01-01T00:00:03Z"),
                                       part(S.BULK_OPERATION_STATE_CANCELED, 1, finished="2026-01-01T00:00:09Z")])
    assert finished.state == S.BULK_OPERATION_STATE_CANCELED
    assert finished.finished_at.ToJsonString() == "2026-01-01T00:00:09Z"
    assert bulk.aggregate("op_x", [part(done, 1, finished="2026-01-01T00:00:03Z")]).state == done


def test_aggregate_keeps_the_first_1000_failures():
    parts = [part(S.BULK_OPERATION_STATE_SUCCEEDED, 700, [f"s{s}-{i}" for i in range(700)]) for s in range(3)]
    op = bulk.aggregate("op_x", parts)
    assert op.failed == 2100 and len(op.failures) == 1000
    assert op.failures[699].task_id == "s0-699" and op.failures[999].task_id == "s1-299"
