"""Client calls for workflow runs and events (ratchet.api.workflows.v1).

Mixed into ratchet.Client; uses its transport (`_t`) and WorkflowService stub (`_workflows`).
The requests are built by the functions here, which AsyncClient shares.

Retries: a start carries the caller's idempotency key, else a workflow id minted per call
(no key row kept for 24 h), so a lost answer resent returns the same run; reads and cancels
are safe to repeat. An event to one run carries an event id minted per call, which history
keeps once per run, so it is resent as a start is. A broadcast has no id (a resend wakes the
waits opened since), so it is resent only after UNAVAILABLE (the call never reached the
gateway, or a shard could not be reached, and the gateway says so).
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator
from typing import Any

from ratchet._transport import UNSENT, DeadlineExceeded, Unavailable, invalid
from ratchet._wire import child_run, duration, event_data, task_state, to_value, workflow_info
from ratchet.api.tasks.v1 import tasks_pb2
from ratchet.api.workflows.v1 import workflows_pb2
from ratchet.libs.shardmap import new_task_id
from ratchet.models import ChildPage, ChildRun, TaskInfo, WorkflowInfo, WorkflowPage, WorkflowStep


def start_request(workflow_type: str, input: Any = None, *, idempotency_key: str | None = None,
                  delay: Any = None, queue: str | None = None) -> workflows_pb2.StartWorkflowRequest:
    """StartWorkflow's request; the run's id minted here when the caller gives no key (resends
    of this request then name the same run)."""
    if not isinstance(workflow_type, str) or not workflow_type:
        raise invalid("workflow_type must be the name of a @workflow handler")
    req = workflows_pb2.StartWorkflowRequest(workflow_type=workflow_type, queue=queue or "")
    if idempotency_key:
        req.idempotency_key = idempotency_key
    else:
        req.workflow_id = new_task_id()
    if input is not None:
        req.input.CopyFrom(to_value(input, "input"))
    if delay is not None:
        req.delay.CopyFrom(duration(delay, "delay"))
    return req


def get_request(workflow_id: str, step_page_size: int | None = None,
                step_page_token: str | None = None) -> workflows_pb2.GetWorkflowRequest:
    return workflows_pb2.GetWorkflowRequest(workflow_id=workflow_id, step_page_size=step_page_size or 0,
                                            step_page_token=step_page_token or "")


def list_request(state: str | None = None, workflow_type: str | None = None, page_size: int | None = None,
                 page_token: str | None = None) -> workflows_pb2.ListWorkflowsRequest:
    if state is not None and not isinstance(state, str):
        raise invalid("list_workflows takes a single state name, e.g. state='WAITING'")
    req = workflows_pb2.ListWorkflowsRequest(workflow_type=workflow_type or "", page_size=page_size or 0,
                                             page_token=page_token or "")
    if state is not None:
        req.state = task_state(state)
    return req


def event_request(name: str, data: Any = None) -> workflows_pb2.SendEventRequest:
    return workflows_pb2.SendEventRequest(name=name, data=event_data(data))


def run_event_request(workflow_id: str, name: str, data: Any = None) -> workflows_pb2.SendWorkflowEventRequest:
    """SendWorkflowEvent's request with an event id minted per call: its resends are kept once."""
    return workflows_pb2.SendWorkflowEventRequest(workflow_id=workflow_id, name=name, data=event_data(data),
                                                  event_id=f"sdk-{uuid.uuid4().hex}")


def children_request(workflow_id: str, position: int, page_size: int | None = None,
                     page_token: str | None = None) -> workflows_pb2.ListWorkflowChildrenRequest:
    if not isinstance(position, int) or isinstance(position, bool) or position < 0:
        raise invalid("position must be a fan-out's position in the run's step log (an int >= 0, as "
                      "get_workflow's steps give it)")
    return workflows_pb2.ListWorkflowChildrenRequest(workflow_id=workflow_id, position=position,
                                                     page_size=page_size or 0, page_token=page_token or "")


def children_of(resp: workflows_pb2.ListWorkflowChildrenResponse) -> ChildPage:
    return ChildPage([child_run(c) for c in resp.children], resp.next_page_token or None)


def page_of(resp: workflows_pb2.ListWorkflowsResponse) -> WorkflowPage:
    return WorkflowPage([workflow_info(w) for w in resp.workflows], resp.next_page_token or None)


def run_of(resp: workflows_pb2.GetWorkflowResponse) -> WorkflowInfo:
    return workflow_info(resp.workflow, resp.steps, resp.next_step_page_token)


def state_name(state: int) -> str:
    return tasks_pb2.TaskState.Name(state).removeprefix("TASK_STATE_")


class Poll:
    """The bookkeeping of a wait for a terminal state (wait and wait_workflow, on Client and
    AsyncClient; here, below client.py's imports): reads 50 ms apart growing to max_interval,
    within the caller's timeout. A wait outlives a restarting shard or gateway: failed reads go
    on until the deadline, then the last error."""

    def __init__(self, task_id: str, timeout: float, max_interval: float, noun: str = "task"):
        self.task_id, self.timeout, self.max_interval, self.noun = task_id, timeout, max_interval, noun
        self.deadline = time.monotonic() + timeout
        self.interval = 0.05

    def out_of_time(self) -> bool:
        return time.monotonic() >= self.deadline

    def pause(self, info: TaskInfo | WorkflowInfo | None) -> float:
        """Seconds to wait before the next read; TimeoutError once the time is up."""
        left = self.deadline - time.monotonic()
        if left <= 0:
            state = info.state if info is not None else "unknown (platform unavailable)"
            raise TimeoutError(f"{self.noun} {self.task_id} is still {state} after {self.timeout:g}s")
        pause = min(self.interval, left)
        self.interval = min(self.interval * 1.5, self.max_interval)
        return pause


class WorkflowCalls:
    """start/get/list/cancel workflow runs; send events to waiting runs."""

    _t: Any
    _workflows: Any

    def start_workflow(self, workflow_type: str, input: Any = None, *,
                       idempotency_key: str | None = None, delay: Any = None, queue: str | None = None) -> str:
        """Start a run of a @workflow handler of the app's active deployment; returns its id
        once it is durably enqueued. input: any JSON value (the workflow's payload). delay:
        seconds, "30s" or a timedelta. A task handler's name raises InvalidArgument (enqueue it).
        With idempotency_key, a repeat of the same start returns the original run (Conflict
        when the key was used for a different start)."""
        req = start_request(workflow_type, input, idempotency_key=idempotency_key, delay=delay, queue=queue)
        return self._t.call(self._workflows.StartWorkflow, req).workflow_id

    def get_workflow(self, workflow_id: str, step_page_size: int | None = None,
                     step_page_token: str | None = None) -> WorkflowInfo:
        """The run: state, input, result or error, its pending sleep or wait, and one page of
        its step log (step_page_size 1..1000, default 100; iter_workflow_steps pages them all)."""
        return run_of(self._t.call(self._workflows.GetWorkflow, get_request(workflow_id, step_page_size,
                                                                            step_page_token)))

    def iter_workflow_steps(self, workflow_id: str, page_size: int | None = None) -> Iterator[WorkflowStep]:
        """Every entry of the run's step log in position order, following the pages."""
        token = None
        while True:
            run = self.get_workflow(workflow_id, page_size, token)
            yield from run.steps
            if not run.next_step_page_token:
                return
            token = run.next_step_page_token

    def wait_workflow(self, workflow_id: str, timeout: float = 60.0, *, max_interval: float = 1.0) -> WorkflowInfo:
        """Poll until the run is terminal and return it (with the first page of its step log);
        raises TimeoutError after timeout seconds. Reads go 50 ms apart, growing to
        max_interval; a gateway or shard briefly unavailable is read again until the deadline."""
        poll = Poll(workflow_id, timeout, max_interval, noun="workflow")
        while True:
            try:
                # (polls read one step; the answer, once the run has ended, the first page)
                run: WorkflowInfo | None = self.get_workflow(workflow_id, step_page_size=1)
            except (Unavailable, DeadlineExceeded):
                if poll.out_of_time():
                    raise
                run = None
            if run is not None and run.terminal:
                return self.get_workflow(workflow_id)
            time.sleep(poll.pause(run))

    def list_workflow_children(self, workflow_id: str, position: int, *, page_size: int | None = None,
                               page_token: str | None = None) -> ChildPage:
        """One page of the children of the fan-out (ctx.parallel, ctx.child) at `position` of the
        run's step log, by index, with their states (page_size 1..1000, default 100). NotFound
        unless that position is a fan-out."""
        return children_of(self._t.call(self._workflows.ListWorkflowChildren,
                                        children_request(workflow_id, position, page_size, page_token)))

    def iter_workflow_children(self, workflow_id: str, position: int,
                               page_size: int | None = None) -> Iterator[ChildRun]:
        """Every child of the fan-out at `position`, by index, following the pages."""
        token = None
        while True:
            page = self.list_workflow_children(workflow_id, position, page_size=page_size, page_token=token)
            yield from page.children
            if not page.next_page_token:
                return
            token = page.next_page_token

    def list_workflows(self, *, state: str | None = None, workflow_type: str | None = None,
                       page_size: int | None = None, page_token: str | None = None) -> WorkflowPage:
        """One page of the app's runs, newest first (no step logs): state like "WAITING",
        workflow_type a @workflow handler. Pass next_page_token back with the same filter."""
        req = list_request(state, workflow_type, page_size, page_token)
        return page_of(self._t.call(self._workflows.ListWorkflows, req))

    def iter_workflows(self, *, state: str | None = None, workflow_type: str | None = None,
                       page_size: int | None = None) -> Iterator[WorkflowInfo]:
        """Every run matching the filter (as list_workflows), following the pages."""
        token = None
        while True:
            page = self.list_workflows(state=state, workflow_type=workflow_type, page_size=page_size,
                                       page_token=token)
            yield from page.workflows
            if not page.next_page_token:
                return
            token = page.next_page_token

    def cancel_workflow(self, workflow_id: str) -> str:
        """Cancel a run; returns its state after the request ("CANCELED", "LEASED" while an
        activation stops, or terminal)."""
        resp = self._t.call(self._workflows.CancelWorkflow, workflows_pb2.CancelWorkflowRequest(
            workflow_id=workflow_id))
        return state_name(resp.state)

    def send_event(self, name: str, data: Any = None) -> int:
        """Wake every run of the tenant waiting now for an event `name` whose match fields the
        data (a dict) holds; returns how many waits it woke. A run not yet at its wait misses
        it: send_workflow_event keeps an event for one run."""
        return self._t.call(self._workflows.SendEvent, event_request(name, data), retry_on=UNSENT).delivered

    def send_workflow_event(self, workflow_id: str, name: str, data: Any = None) -> bool:
        """Deliver an event to one run: True when a wait of the run took it now (the run
        wakes), False when it is kept in the run's inbox for a later wait. Resent on transient
        failures: its event id keeps it once in the run's inbox."""
        return self._t.call(self._workflows.SendWorkflowEvent, run_event_request(workflow_id, name, data)).delivered
