"""The workflow API's pure parts: a handler's kind as the deployment cache holds it, the kind
checks on every enqueue form, the page tokens, event checks and the mapping of a run."""

from __future__ import annotations

import time

import pytest
from google.protobuf import struct_pb2

from ratchet.api.apps.v1 import apps_pb2
from ratchet.api.tasks.v1 import tasks_pb2
from ratchet.libs.rpc.errors import InvalidArgument, TooLarge
from ratchet.libs.shardmap import new_task_id
from ratchet.services.gateway import validation, workflow_pages, workflows
from ratchet.services.gateway.deployments import check_handlers, register

WF = apps_pb2.HANDLER_KIND_WORKFLOW
HANDLERS = {"send": register(apps_pb2.Handler(name="send")),
            "flow": register(apps_pb2.Handler(name="flow", kind=WF, resume=apps_pb2.WORKFLOW_RESUME_LATEST))}
LIMIT = 262144


def test_the_cache_holds_each_handlers_kind():
    assert HANDLERS["flow"].workflow and not HANDLERS["send"].workflow
    assert not register(apps_pb2.Handler(name="t", kind=apps_pb2.HANDLER_KIND_TASK)).workflow
    bad_policy = apps_pb2.Handler(name="w", kind=WF, retry=tasks_pb2.RetryPolicy())
    bad_policy.retry.base.FromSeconds(10)
    bad_policy.retry.cap.FromSeconds(1)
    assert register(bad_policy).workflow  # (a policy resolved per call keeps its kind too)
    check_handlers([apps_pb2.Handler(name="flow", kind=WF, resume=apps_pb2.WORKFLOW_RESUME_LATEST)], "app")


def _check(req, workflow=False):
    return validation.validate_task(req, HANDLERS, max_payload_bytes=LIMIT, now_s=time.time(), workflow=workflow)


def test_each_edge_takes_only_its_kind():
    with pytest.raises(InvalidArgument, match="task_type 'flow' is a workflow; start it with POST /v1/workflows"):
        _check(tasks_pb2.EnqueueTaskRequest(task_type="flow"))
    with pytest.raises(InvalidArgument, match="task_type 'send' is a task handler; enqueue it with POST /v1/tasks"):
        _check(tasks_pb2.EnqueueTaskRequest(task_type="send"), workflow=True)
    assert _check(tasks_pb2.EnqueueTaskRequest(task_type="flow"), workflow=True).task_type == "flow"
    items = tasks_pb2.EnqueueTasksRequest(tasks=[tasks_pb2.EnqueueTaskRequest(
        task_type="flow", task_id=new_task_id(), payload_json="1") for _ in range(3)])
    assert validation.plain_batch(items, HANDLERS, max_payload_bytes=LIMIT) is None  # (the per-task path names it)
    cols = tasks_pb2.EnqueueTasksRequest()
    cols.columns.task_type = "flow"
    cols.columns.payloads_json.append("1")
    with pytest.raises(InvalidArgument, match=r"columns\.task_type 'flow' is a workflow"):
        validation.columns_batch(cols, HANDLERS, max_payload_bytes=LIMIT)


def test_step_tokens_are_bound_to_their_run():
    token = workflow_pages.encode_step_token("run-a", 100)
    assert workflow_pages.decode_step_token(token, "run-a") == 100
    with pytest.raises(InvalidArgument, match="belongs to workflow run-a, not run-b"):
        workflow_pages.decode_step_token(token, "run-b")
    for bad in ("", "!!", "x" * 70000, workflow_pages._encode({"v": 1, "w": "run-a", "p": -1}),
                workflow_pages._encode({"v": 2, "w": "run-a", "p": 1}),
                workflow_pages._encode({"v": 1, "w": "run-a", "p": True})):
        with pytest.raises(InvalidArgument, match="step_page_token is not valid"):
            workflow_pages.decode_step_token(bad, "run-a")


def test_list_tokens_keep_the_streams_still_listed():
    streams = [(0, "a"), (0, "b:x"), (1, "a"), (1, "b:x")]
    token = workflow_pages.encode_list_token("h", {(0, "b:x"): "c1", (1, "a"): "c2"})
    assert workflow_pages.decode_list_token(token, "h", streams) == {(0, "b:x"): "c1", (1, "a"): "c2"}
    assert workflow_pages.decode_list_token(token, "h", [(0, "a"), (1, "a")]) == {(1, "a"): "c2"}  # b:x is gone
    assert workflow_pages.encode_list_token("h", {}) == ""
    with pytest.raises(InvalidArgument, match="does not match the request"):
        workflow_pages.decode_list_token(token, "other", streams)
    with pytest.raises(InvalidArgument, match="names shard 1, which this gateway does not serve"):
        workflow_pages.decode_list_token(token, "h", [(0, "a"), (0, "b:x")])
    with pytest.raises(InvalidArgument, match="page_token is not valid"):
        workflow_pages.decode_list_token(workflow_pages._encode({"v": 1, "f": "h", "c": {"x:a": "c"}}), "h", streams)


def test_page_sizes():
    assert workflow_pages.page_size(0, "page_size") == 100 and workflow_pages.page_size(1000, "page_size") == 1000
    for bad in (-1, 1001):
        with pytest.raises(InvalidArgument, match=r"step_page_size must be 1\.\.1000"):
            workflow_pages.page_size(bad, "step_page_size")


def test_event_data_is_an_object_within_the_limit():
    data = struct_pb2.Struct()
    data.update({"b": 1, "a": "x"})
    assert workflows.check_event("order.paid:v1", data, 100) == b'{"a":"x","b":1}'
    assert workflows.check_event("go", None, 100) == b"{}"
    with pytest.raises(TooLarge, match="data is 15 bytes as compact JSON; the limit is 10 bytes"):
        workflows.check_event("go", data, 10)
    nan = struct_pb2.Struct()
    nan.update({"x": float("nan")})
    with pytest.raises(InvalidArgument, match=r"data\.x holds NaN"):
        workflows.check_event("go", nan, 100)
    for name in ("", "has space", "é", "x" * 201):
        with pytest.raises(InvalidArgument, match=r"name must be 1\.\.200 characters"):
            workflows.check_event(name, None, 100)


def test_a_run_is_its_task_under_the_workflow_names():
    task = tasks_pb2.Task(task_id="t", task_type="flow", state=tasks_pb2.TASK_STATE_WAITING, attempt=3,
                          idempotency_key="k", cancel_requested=True)
    task.payload.struct_value.update({"u": 1})
    task.error.error_class = "E"
    task.created_at.FromSeconds(5)
    w = workflows.to_workflow(task)
    assert (w.workflow_id, w.workflow_type, w.state, w.activations, w.idempotency_key, w.cancel_requested) == \
        ("t", "flow", tasks_pb2.TASK_STATE_WAITING, 3, "k", True)
    assert dict(w.input.struct_value) == {"u": 1} and w.error.error_class == "E" and w.created_at.seconds == 5
    assert not w.HasField("result") and not w.HasField("finished_at")
    assert workflows.workflow_types(HANDLERS) == ["flow"] and workflows.workflow_types(None) == []
