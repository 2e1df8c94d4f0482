"""Query parameters of GET routes: read generically from the request descriptor."""

from __future__ import annotations

import pytest
from google.protobuf import json_format
from multidict import MultiDict

from ratchet.api.schedules.v1 import schedules_pb2
from ratchet.api.tasks.v1 import tasks_pb2
from ratchet.libs.rpc.errors import InvalidArgument
from ratchet.services.gateway.rest import query
from ratchet.services.gateway.rest.openapi import generate, public_services

LIST = tasks_pb2.ListTasksRequest.DESCRIPTOR


def parse(pairs, descriptor=LIST, bound=()) -> tasks_pb2.ListTasksRequest:
    data = query.parse_query(MultiDict(pairs), descriptor, bound)
    cls = tasks_pb2.ListTasksRequest if descriptor is LIST else schedules_pb2.ListSchedulesRequest
    query.check_values(data, cls())
    return json_format.ParseDict(data, cls())


def test_scalars_enums_and_timestamps():
    msg = parse([("state", "FAILED"), ("task_type", "billing.charge"), ("since", "2026-11-30T02:00:00Z"),
                 ("until", "2026-11-30T03:00:00.5+01:00"), ("page_size", "50"), ("page_token", "abc")])
    assert msg.state == tasks_pb2.TASK_STATE_FAILED and msg.task_type == "billing.charge"
    assert msg.since.ToJsonString() == "2026-11-30T02:00:00Z"
    assert msg.until.ToJsonString() == "2026-11-30T02:00:00.500Z"
    assert msg.page_size == 50 and msg.page_token == "abc"


@pytest.mark.parametrize("text", ["FAILED", "TASK_STATE_FAILED", "failed", "task_state_failed"])
def test_enum_by_short_or_full_name_any_case(text):
    assert parse([("state", text)]).state == tasks_pb2.TASK_STATE_FAILED


def test_repeated_fields_come_from_repeated_parameters():
    data = query.parse_query(MultiDict([("states", "FAILED"), ("states", "EXPIRED")]),
                             tasks_pb2.TaskFilter.DESCRIPTOR, ())
    f = json_format.ParseDict(data, tasks_pb2.TaskFilter())
    assert list(f.states) == [tasks_pb2.TASK_STATE_FAILED, tasks_pb2.TASK_STATE_EXPIRED]


def test_nested_message_fields_by_dotted_path():
    d = tasks_pb2.RetryTasksRequest.DESCRIPTOR
    data = query.parse_query(MultiDict([("filter.task_type", "t"), ("dry_run", "true")]), d, ())
    msg = json_format.ParseDict(data, tasks_pb2.RetryTasksRequest())
    assert msg.filter.task_type == "t" and msg.dry_run is True
    names = [n for n, _ in query.query_fields(d)]
    assert "filter.states" in names and "filter.since" in names and "request_id" in names


@pytest.mark.parametrize("pairs, needle", [
    ([("bogus", "1")], "unknown query parameter 'bogus'; accepted: state, task_type"),
    ([("state", "NOPE")], "state='NOPE' is not one of TASK_STATE_UNSPECIFIED"),
    ([("page_size", "ten")], "page_size='ten' must be an integer"),
    ([("page_size", "99999999999")], "page_size='99999999999' is not valid"),
    ([("since", "yesterday")], "since='yesterday' is not valid: expected an RFC 3339 instant"),
    ([("task_type", "a"), ("task_type", "b")], "task_type is given 2 times"),
    ([("since.seconds", "1")], "unknown query parameter 'since.seconds'"),
])
def test_bad_parameters_are_400_naming_them(pairs, needle):
    with pytest.raises(InvalidArgument) as e:
        parse(pairs)
    assert needle in e.value.message


def test_path_bound_fields_are_not_query_parameters():
    d = tasks_pb2.GetTaskRequest.DESCRIPTOR
    with pytest.raises(InvalidArgument, match="unknown query parameter 'task_id'; accepted: none"):
        query.parse_query(MultiDict([("task_id", "x")]), d, {"task_id"})


def test_booleans():
    d = tasks_pb2.RetryTasksRequest.DESCRIPTOR
    for text, want in (("true", True), ("FALSE", False), ("1", True), ("0", False)):
        assert query.parse_query(MultiDict([("dry_run", text)]), d, ())["dry_run"] is want
    with pytest.raises(InvalidArgument, match="must be true or false"):
        query.parse_query(MultiDict([("dry_run", "yes please")]), d, ())


def test_openapi_lists_query_parameters_with_short_enum_names():
    doc = generate(public_services())
    params = {p["name"]: p for p in doc["paths"]["/v1/tasks"]["get"]["parameters"]}
    assert set(params) == {"state", "task_type", "queue", "error_class", "since", "until", "page_size", "page_token"}
    assert {"FAILED", "TASK_STATE_FAILED"} <= set(params["state"]["schema"]["enum"])
    assert params["since"]["schema"]["format"] == "date-time"
    assert all(p["in"] == "query" and not p["required"] for p in params.values())
    sched = {p["name"] for p in doc["paths"]["/v1/schedules"]["get"]["parameters"]}
    assert sched == {"page_size", "page_token"}


def test_an_unencoded_plus_in_a_time_offset_is_forgiven():
    msg = parse([("since", "2026-11-30T03:00:00 01:00")])
    assert msg.since.ToJsonString() == "2026-11-30T02:00:00Z"
