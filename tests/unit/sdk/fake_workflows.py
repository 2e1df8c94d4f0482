"""An in-process WorkflowService (the gateway's side of the contract) for the client and CLI
tests: runs and their step logs in memory, failures on cue, every request recorded."""

from __future__ import annotations

import base64
import threading
from concurrent import futures

import grpc
from google.protobuf import json_format, timestamp_pb2

from ratchet.api.tasks.v1 import tasks_pb2
from ratchet.api.workflows.v1 import workflows_pb2 as wpb
from ratchet.api.workflows.v1 import workflows_pb2_grpc

AT = timestamp_pb2.Timestamp(seconds=1_767_225_600)  # 2026-01-01T00:00:00Z


class FakeWorkflows(workflows_pb2_grpc.WorkflowServiceServicer):
    """Starts dedupe by idempotency key or workflow id (the run takes the id when one is sent);
    a started run has `steps_per_run` completed steps and waits on "approved" {"user": "ada"};
    step, list and children tokens are offsets. Events to a run dedupe by event_id. A run in
    `ends_after` ends SUCCEEDED at that many reads more."""

    def __init__(self, steps_per_run: int = 5):
        self.fail_with: list[grpc.StatusCode] = []
        self.requests: list = []
        self.runs: dict[str, wpb.Workflow] = {}
        self.steps: dict[str, list[wpb.Step]] = {}
        self.keys: dict[str, str] = {}
        self.inbox: list[tuple[str, str, dict]] = []
        self.steps_per_run = steps_per_run
        self.event_ids: dict[tuple[str, str], bool] = {}
        self.ends_after: dict[str, int] = {}
        self.children: dict[tuple[str, int], list[wpb.ChildRun]] = {}
        self.lock = threading.Lock()

    def _maybe_fail(self, request, context) -> None:
        with self.lock:
            self.requests.append(request)
            code = self.fail_with.pop(0) if self.fail_with else None
        if code is not None:
            context.abort(code, f"injected {code.name}")

    def StartWorkflow(self, request, context):
        if request.workflow_type == "echo":
            context.abort(grpc.StatusCode.INVALID_ARGUMENT, "workflow_type 'echo' is a task handler; enqueue it "
                                                            "with POST /v1/tasks")
        key = request.idempotency_key or f"id:{request.workflow_id}"
        with self.lock:
            known = self.keys.get(key)
            wid = known or request.workflow_id or f"wf-{len(self.runs) + 1}"
            if known is None:
                self.keys[key] = wid
                self._add(wid, request)
        self._maybe_fail(request, context)  # after the write: a lost answer, the run exists
        return wpb.StartWorkflowResponse(workflow_id=wid, deduplicated=known is not None)

    def _add(self, wid: str, request) -> None:
        run = wpb.Workflow(workflow_id=wid, workflow_type=request.workflow_type, state=tasks_pb2.TASK_STATE_WAITING,
                           input=request.input, activations=2, idempotency_key=request.idempotency_key,
                           created_at=AT, step_count=self.steps_per_run + 1)
        run.pending.CopyFrom(wpb.PendingWait(position=self.steps_per_run, kind=wpb.STEP_KIND_WAIT, name="approved",
                                             wake_at=AT))
        run.pending.match.update({"user": "ada"})
        self.runs[wid] = run
        log = [wpb.Step(position=i, name=f"s{i}", kind=wpb.STEP_KIND_STEP, state=wpb.STEP_STATE_COMPLETED, attempt=1,
                        started_at=AT, finished_at=AT) for i in range(self.steps_per_run)]
        for i, st in enumerate(log):
            st.result.number_value = i
        log.append(wpb.Step(position=self.steps_per_run, name="approved", kind=wpb.STEP_KIND_WAIT,
                            state=wpb.STEP_STATE_RUNNING, attempt=1, wake_at=AT))
        self.steps[wid] = log

    def _run(self, wid: str, context) -> wpb.Workflow:
        run = self.runs.get(wid)
        if run is None:
            context.abort(grpc.StatusCode.NOT_FOUND, f"workflow {wid} not found")
        return run

    def fan_out(self, wid: str, n: int, done: int) -> int:
        """A PARALLEL step of n children appended to the run's log (the first `done` of them
        SUCCEEDED with their index as result); its position."""
        log = self.steps[wid]
        log.append(wpb.Step(position=len(log), name="fan", kind=wpb.STEP_KIND_PARALLEL, state=wpb.STEP_STATE_RUNNING,
                            attempt=1, child_count=n, children_done=done))
        kids = []
        for i in range(n):
            c = wpb.ChildRun(index=i, child_id=f"{wid}-c{i}", task_type="charge",
                             state=tasks_pb2.TASK_STATE_SUCCEEDED if i < done else tasks_pb2.TASK_STATE_ENQUEUED)
            if i < done:
                c.result.number_value = i
            kids.append(c)
        self.children[wid, len(log) - 1] = kids
        self.runs[wid].step_count = len(log)
        return len(log) - 1

    def ListWorkflowChildren(self, request, context):
        self._maybe_fail(request, context)
        self._run(request.workflow_id, context)
        kids = self.children.get((request.workflow_id, request.position))
        if kids is None:
            context.abort(grpc.StatusCode.NOT_FOUND, f"no fan-out at position {request.position}")
        start = int(request.page_token or 0)
        end = start + (request.page_size or 100)
        return wpb.ListWorkflowChildrenResponse(children=kids[start:end],
                                                next_page_token=str(end) if end < len(kids) else "")

    def GetWorkflow(self, request, context):
        self._maybe_fail(request, context)
        run = self._run(request.workflow_id, context)
        left = self.ends_after.get(request.workflow_id)
        if left is not None:
            self.ends_after[request.workflow_id] = left - 1
            if left <= 1:
                run.state = tasks_pb2.TASK_STATE_SUCCEEDED
                run.result.string_value = "done"
                run.ClearField("pending")
        start = int(base64.b64decode(request.step_page_token)) if request.step_page_token else 0
        size = request.step_page_size or 100
        log = self.steps[request.workflow_id]
        end = start + size
        token = base64.b64encode(str(end).encode()).decode() if end < len(log) else ""
        return wpb.GetWorkflowResponse(workflow=run, steps=log[start:end], next_step_page_token=token)

    def ListWorkflows(self, request, context):
        self._maybe_fail(request, context)
        runs = [r for r in reversed(self.runs.values())
                if (not request.state or r.state == request.state)
                and (not request.workflow_type or r.workflow_type == request.workflow_type)]
        start = int(request.page_token or 0)
        size = request.page_size or 100
        page = []
        for r in runs[start:start + size]:
            bare = wpb.Workflow()
            bare.CopyFrom(r)
            bare.ClearField("pending")
            bare.step_count = 0
            page.append(bare)
        more = start + size < len(runs)
        return wpb.ListWorkflowsResponse(workflows=page, next_page_token=str(start + size) if more else "")

    def CancelWorkflow(self, request, context):
        self._maybe_fail(request, context)
        run = self._run(request.workflow_id, context)
        run.state = tasks_pb2.TASK_STATE_CANCELED
        run.ClearField("pending")
        return wpb.CancelWorkflowResponse(state=run.state)

    def SendEvent(self, request, context):
        self._maybe_fail(request, context)
        data = json_format.MessageToDict(request.data)
        woke = [r for r in self.runs.values() if r.state == tasks_pb2.TASK_STATE_WAITING and r.pending.name ==
                request.name and all(data.get(k) == v for k, v in json_format.MessageToDict(r.pending.match).items())]
        for r in woke:
            r.state = tasks_pb2.TASK_STATE_ENQUEUED
        return wpb.SendEventResponse(delivered=len(woke))

    def SendWorkflowEvent(self, request, context):
        run = self._run(request.workflow_id, context)
        data = json_format.MessageToDict(request.data)
        with self.lock:
            seen = self.event_ids.get((request.workflow_id, request.event_id)) if request.event_id else None
            if seen is None:
                self.inbox.append((request.workflow_id, request.name, data))
                seen = run.state == tasks_pb2.TASK_STATE_WAITING and run.pending.name == request.name
                if seen:
                    run.state = tasks_pb2.TASK_STATE_ENQUEUED
                if request.event_id:
                    self.event_ids[request.workflow_id, request.event_id] = seen
        self._maybe_fail(request, context)  # after the write: a lost answer, the event is kept
        return wpb.SendWorkflowEventResponse(delivered=seen)


class FakeGateway:
    """FakeWorkflows on a loopback port for the length of a test."""

    def __init__(self, steps_per_run: int = 5):
        self.workflows = FakeWorkflows(steps_per_run)
        self.server = grpc.server(futures.ThreadPoolExecutor(4))
        workflows_pb2_grpc.add_WorkflowServiceServicer_to_server(self.workflows, self.server)
        self.port = self.server.add_insecure_port("127.0.0.1:0")
        self.server.start()

    @property
    def endpoint(self) -> str:
        return f"127.0.0.1:{self.port}"

    def stop(self) -> None:
        self.server.stop(0)
