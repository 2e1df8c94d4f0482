"""Client calls for workflow runs and events (ratchet.api.workflows.v1).

Mixed into ratchet.Client; uses its transport (`_t`) and WorkflowService stub (`_workflows`).
The requests are built by the functions here, which AsyncClient shares.

Retries: a start carries an idempotency key (the caller's, else one minted per call), so a
lost answer resent returns the same run; reads and cancels are safe to repeat. An event is
not: a resent inbox event would be kept twice, and a resent broadcast wakes the waits opened
since; so events are resent only after UNAVAILABLE (the call never reached the gateway, or a
shard could not be reached, and the gateway says so).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from ratchet._transport import UNSENT, invalid, new_idempotency_key
from ratchet._wire import duration, event_data, task_state, to_value, workflow_info
from ratchet.api.tasks.v1 import tasks_pb2
from ratchet.api.workflows.v1 import workflows_pb2
from ratchet.models import WorkflowInfo, WorkflowPage, WorkflowStep


def start_request(workflow_type: str, input: Any = None, *, idempotency_key: str | None = None,
                  delay: Any = None, queue: str | None = None) -> workflows_pb2.StartWorkflowRequest:
    """StartWorkflow's request; the key minted here when the caller gives none."""
    if not isinstance(workflow_type, str) or not workflow_type:
        raise invalid("workflow_type must be the name of a @workflow handler")
    req = workflows_pb2.StartWorkflowRequest(workflow_type=workflow_type, queue=queue or "",
                                             idempotency_key=idempotency_key or new_idempotency_key())
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
    return workflows_pb2.SendWorkflowEventRequest(workflow_id=workflow_id, name=name, data=event_data(data))


def page_of(resp: workflows_pb2.ListWorkflowsResponse) -> WorkflowPage:
    return WorkflowPage([workflow_info(w) for w in resp.workflows], resp.next_page_token or None)


def run_of(resp: workflows_pb2.GetWorkflowResponse) -> WorkflowInfo:
    return workflow_info(resp.workflow, resp.steps, resp.next_step_page_token)


def state_name(state: int) -> str:
    return tasks_pb2.TaskState.Name(state).removeprefix("TASK_STATE_")


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
        wakes), False when it is kept in the run's inbox for a later wait."""
        return self._t.call(self._workflows.SendWorkflowEvent, run_event_request(workflow_id, name, data),
                            retry_on=UNSENT).delivered
