"""The workflow API's domain (ratchet.api.workflows.v1): a run is a task of a workflow
handler (docs/design/workflows-protocol.md), so StartWorkflow is an ordinary enqueue on
the task API's one pipeline, and reads, cancels and events go to the run's shard as a
task's calls do.

Which tasks are runs: the gateway knows a handler's kind from the app's active deployment
(Handler.kind, held by the deployment cache), and history does not tell. So a run whose
type the active deployment no longer declares a workflow (removed, or redeclared as a
task) is NOT_FOUND to this API and missing from ListWorkflows, while TaskService still
shows it as a task; a deploy that declares the type a workflow again brings it back.
"""

from __future__ import annotations

import asyncio
import re
import uuid
from collections.abc import Awaitable
from typing import TypeVar

from google.protobuf import struct_pb2

from ratchet.api.tasks.v1 import tasks_pb2
from ratchet.api.workflows.v1 import workflows_pb2 as wpb
from ratchet.internal.history.v1 import history_pb2
from ratchet.libs.rpc import errors
from ratchet.libs.rpc.errors import InvalidArgument, NotFound, TooLarge
from ratchet.libs.shardmap import ShardMap, parse_task_id
from ratchet.services.gateway import filters, listing, validation, workflow_pages
from ratchet.services.gateway.auth import Principal
from ratchet.services.gateway.deployments import Deployments, Handlers
from ratchet.services.gateway.fanout import each_shard
from ratchet.services.gateway.history_client import HistoryClient
from ratchet.services.gateway.tasks import TaskApi

EVENT_NAME = re.compile(r"^[A-Za-z0-9_.:\-]{1,200}$")
EVENT_ID = re.compile(r"^[\x20-\x7e]{1,200}$")
T = TypeVar("T")
U = TypeVar("U")


def workflow_types(handlers: Handlers | None) -> list[str]:
    """The app's workflow handlers by name, sorted."""
    return sorted(name for name, h in (handlers or {}).items() if h.workflow)


def is_workflow(handlers: Handlers | None, task_type: str) -> bool:
    h = (handlers or {}).get(task_type)
    return h is not None and h.workflow


def to_workflow(task: tasks_pb2.Task) -> wpb.Workflow:
    """A run as the API shows it, from its task (no step count or pending wait: GetWorkflow
    adds them from the step log)."""
    w = wpb.Workflow(workflow_id=task.task_id, workflow_type=task.task_type, state=task.state,
                     activations=task.attempt, idempotency_key=task.idempotency_key,
                     cancel_requested=task.cancel_requested)
    for src, dst in (("payload", "input"), ("result", "result"), ("error", "error"), ("created_at", "created_at"),
                     ("updated_at", "updated_at"), ("finished_at", "finished_at")):
        if task.HasField(src):
            getattr(w, dst).CopyFrom(getattr(task, src))
    return w


def check_event(name: str, data: struct_pb2.Struct | None, max_bytes: int, where: str = "") -> bytes:
    """The event's data as compact JSON (an object; none sent: {}), or INVALID_ARGUMENT /
    RESOURCE_EXHAUSTED naming the field."""
    if not EVENT_NAME.match(name):
        raise InvalidArgument(f"{where}name must be 1..200 characters of [A-Za-z0-9_.:-] (the name the workflow "
                              f"waits for with ctx.wait_for_event), got {name[:80]!r}")
    if data is None:
        return b"{}"
    value = struct_pb2.Value()
    value.struct_value.CopyFrom(data)
    text = validation.payload_json(value, f"{where}data").encode()
    if len(text) > max_bytes:
        raise TooLarge(f"{where}data is {len(text)} bytes as compact JSON; the limit is {max_bytes} bytes: "
                       f"send a reference to large data instead")
    return text


def _start_id(req: wpb.StartWorkflowRequest) -> str:
    """StartWorkflow's caller-minted id, canonical ("" for none), under EnqueueTaskRequest.task_id's
    rules: an id the SDK minted (a UUIDv8 carrying its slot), exclusive with a key."""
    if not req.workflow_id:
        return ""
    if req.idempotency_key:
        raise InvalidArgument("workflow_id and idempotency_key are exclusive: send the key for deduplication by "
                              "content, or a workflow_id minted per start for retries")
    canonical = parse_task_id(req.workflow_id)
    if canonical is None:
        raise InvalidArgument(f"workflow_id {req.workflow_id[:80]!r} is not a Ratchet id (a UUIDv8 carrying its "
                              f"routing slot): mint it with the SDK, or leave it empty")
    return canonical


def check_event_id(event_id: str) -> None:
    """SendWorkflowEvent's event_id: empty, or 1..200 printable ASCII characters."""
    if event_id and not EVENT_ID.match(event_id):
        raise InvalidArgument(f"event_id must be 1..200 printable ASCII characters (one id per event, the same on "
                              f"every resend of it), got {len(event_id)} characters")


def _is_uuid(text: str) -> bool:
    try:
        uuid.UUID(text)
    except (ValueError, AttributeError, TypeError):
        return False
    return True


async def _found(call: Awaitable[T], run_id: str) -> T:
    """call's answer; history's NOT_FOUND (unknown, or another tenant's) as this API says it,
    without the shard's wording."""
    try:
        return await call
    except NotFound:
        raise NotFound(f"workflow {run_id} not found") from None


async def _fanout(call: Awaitable[T], run_id: str, position: int) -> T:
    """call's answer; history's NOT_FOUND (no fan-out at the position) as this API says it."""
    try:
        return await call
    except NotFound:
        raise NotFound(f"workflow {run_id} has no fan-out (ctx.parallel or ctx.child) at position {position}: "
                       f"GetWorkflow lists its steps") from None


async def _both(first: Awaitable[T], second: Awaitable[U]) -> tuple[T, U]:
    """first and second at once; first's failure is raised (second's outcome then dropped)."""
    later = asyncio.ensure_future(second)
    try:
        a = await first
    except BaseException:
        later.cancel()
        await asyncio.gather(later, return_exceptions=True)  # (retrieved: no "never retrieved" warning)
        raise
    return a, await later


class WorkflowApi:
    """StartWorkflow, GetWorkflow, ListWorkflows, CancelWorkflow, SendEvent, SendWorkflowEvent
    for an authenticated app."""

    def __init__(self, tasks: TaskApi, history: HistoryClient, shard_map: ShardMap, shard_ids: list[int],
                 deployments: Deployments, max_payload_bytes: int):
        self.tasks, self.history, self.shard_map = tasks, history, shard_map
        self.shard_ids = sorted(shard_ids)
        self.deployments = deployments
        self.max_payload_bytes = max_payload_bytes

    # -- start -------------------------------------------------------------------
    async def start(self, p: Principal, req: wpb.StartWorkflowRequest, timeout: float) -> wpb.StartWorkflowResponse:
        """An enqueue of the workflow's task type with the input as its payload: the task API's
        validation, policy, idempotency and 409 rules, and its one path to history."""
        handlers = await self.deployments.handlers_for(p.app_id)
        handler = validation.handler_for(req.workflow_type, handlers, "", field="workflow_type")
        validation.check_kind(handler, True, "", field="workflow_type")
        enq = tasks_pb2.EnqueueTaskRequest(task_type=req.workflow_type, queue=req.queue,
                                           idempotency_key=req.idempotency_key, task_id=_start_id(req))
        if req.HasField("input"):
            # (as JSON text, so a too large or non-finite input is named `input`, not `payload`)
            text = validation.payload_json(req.input, "input")
            if len(text.encode()) > self.max_payload_bytes:
                raise TooLarge(f"input is {len(text.encode())} bytes as compact JSON; the limit is "
                               f"{self.max_payload_bytes} bytes: store large data elsewhere and pass a reference")
            enq.payload_json = text
        if req.HasField("delay"):
            enq.delay.CopyFrom(req.delay)
        done = await self.tasks.enqueue(p, enq, timeout, workflow=True)
        return wpb.StartWorkflowResponse(workflow_id=done.task_id, deduplicated=done.deduplicated)

    # -- one run -----------------------------------------------------------------
    def _route(self, workflow_id: str) -> tuple[str, int]:
        """(canonical id, shard). A UUID that is no id this platform mints names no run (404);
        anything else is not an id at all (400)."""
        if not workflow_id:
            raise InvalidArgument("workflow_id is required (the id StartWorkflow returned)")
        canonical = parse_task_id(workflow_id)
        if canonical is None:
            if _is_uuid(workflow_id):
                raise NotFound(f"workflow {workflow_id[:80]} not found")
            raise InvalidArgument(f"workflow_id {workflow_id[:80]!r} is not a workflow id (a UUID as "
                                  f"StartWorkflow returns it)")
        return canonical, self.shard_map.shard_for_task(canonical)

    async def _run(self, p: Principal, run_id: str, shard: int, timeout: float) -> tasks_pb2.Task:
        """The run's task: NOT_FOUND when it is unknown, another tenant's, or a plain task."""
        get = _found(self.history.get_task(shard, run_id, p.tenant_id, timeout), run_id)
        handlers, resp = await asyncio.gather(self.deployments.handlers_for(p.app_id), get)
        return self._check_run(handlers, resp.task, run_id)

    @staticmethod
    def _check_run(handlers: Handlers | None, task: tasks_pb2.Task, run_id: str) -> tasks_pb2.Task:
        if not is_workflow(handlers, task.task_type):
            raise NotFound(f"workflow {run_id} not found: it is a task of type {task.task_type!r}, which the app's "
                           f"active deployment does not declare a workflow (read it with GET /v1/tasks/{run_id})")
        return task

    async def get(self, p: Principal, req: wpb.GetWorkflowRequest, timeout: float) -> wpb.GetWorkflowResponse:
        """The run and one page of its step log, read at once from its shard."""
        run_id, shard = self._route(req.workflow_id)
        size = workflow_pages.page_size(req.step_page_size, "step_page_size")
        start = workflow_pages.decode_step_token(req.step_page_token, run_id) if req.step_page_token else 0
        task, steps = await _both(self._run(p, run_id, shard, timeout), _found(self.history.get_workflow_steps(
            shard, run_id, p.tenant_id, start, size, timeout), run_id))
        w = to_workflow(task)
        w.step_count = steps.step_count
        # (the log's open sleep or wait is what the run waits on only while it is suspended)
        if task.state == tasks_pb2.TASK_STATE_WAITING and steps.HasField("pending"):
            w.pending.CopyFrom(steps.pending)
        out = wpb.GetWorkflowResponse(workflow=w, steps=steps.steps)
        if steps.next_position > start:  # (-1: the last page; a position not past this page ends it too)
            out.next_step_page_token = workflow_pages.encode_step_token(run_id, steps.next_position)
        return out

    async def children(self, p: Principal, req: wpb.ListWorkflowChildrenRequest,
                       timeout: float) -> wpb.ListWorkflowChildrenResponse:
        """A page of the children of the fan-out at (run, position), by index, with their states:
        history's page, read at once with the run (NOT_FOUND unless the position is a fan-out)."""
        run_id, shard = self._route(req.workflow_id)
        if req.position < 0:
            raise InvalidArgument(f"position must be >= 0 (a fan-out's position in the run's step log, as "
                                  f"GetWorkflow's steps give it), got {req.position}")
        size = workflow_pages.page_size(req.page_size, "page_size")
        start = workflow_pages.decode_children_token(req.page_token, run_id, req.position) if req.page_token else 0
        _, page = await _both(self._run(p, run_id, shard, timeout), _fanout(self.history.list_workflow_children(
            history_pb2.ListWorkflowChildrenRequest(shard_id=shard, workflow_id=run_id, tenant_id=p.tenant_id,
                                                    position=req.position, from_index=start, page_size=size),
            timeout), run_id, req.position))
        out = wpb.ListWorkflowChildrenResponse(children=page.children)
        if page.next_index > start:  # (-1: the last page)
            out.next_page_token = workflow_pages.encode_children_token(run_id, req.position, page.next_index)
        return out

    async def cancel(self, p: Principal, req: wpb.CancelWorkflowRequest,
                     timeout: float) -> wpb.CancelWorkflowResponse:
        """History's CancelTask, once the id is known to be a run of the app's."""
        run_id, shard = self._route(req.workflow_id)
        await self._run(p, run_id, shard, timeout)
        resp = await _found(self.history.cancel_task(shard, run_id, p.tenant_id, timeout), run_id)
        return wpb.CancelWorkflowResponse(state=resp.state, cancel_requested=resp.cancel_requested)

    async def send_to_run(self, p: Principal, req: wpb.SendWorkflowEventRequest,
                          timeout: float) -> wpb.SendWorkflowEventResponse:
        """The event into the run's inbox; delivered when a wait of the run consumed it at once."""
        data = check_event(req.name, req.data if req.HasField("data") else None, self.max_payload_bytes)
        check_event_id(req.event_id)
        run_id, shard = self._route(req.workflow_id)
        await self._run(p, run_id, shard, timeout)
        delivered = await _found(self.history.deliver_event(history_pb2.DeliverEventRequest(
            shard_id=shard, tenant_id=p.tenant_id, name=req.name, data_json=data, workflow_id=run_id,
            event_id=req.event_id), timeout), run_id)
        return wpb.SendWorkflowEventResponse(delivered=delivered > 0)

    # -- many runs ---------------------------------------------------------------
    async def broadcast(self, p: Principal, req: wpb.SendEventRequest, timeout: float) -> wpb.SendEventResponse:
        """DeliverEvent without a run on every shard at once, within the call's deadline;
        delivered is the sum. A shard that does not answer fails the call (UNAVAILABLE naming
        it, with what the others woke): a retry reaches it, and wakes on the shards that did
        answer only the waits opened since (a wait takes one event)."""
        data = check_event(req.name, req.data if req.HasField("data") else None, self.max_payload_bytes)

        async def one(shard: int) -> int:
            return await self.history.deliver_event(history_pb2.DeliverEventRequest(
                shard_id=shard, tenant_id=p.tenant_id, name=req.name, data_json=data), timeout)

        outcomes = await asyncio.gather(*(one(s) for s in self.shard_ids), return_exceptions=True)
        woke = sum(o for o in outcomes if isinstance(o, int))
        for o in outcomes:  # (a definitive refusal first, as fanout.each_shard does)
            if isinstance(o, BaseException) and not isinstance(o, (errors.Unavailable, errors.DeadlineExceeded)):
                raise o
        down = [s for s, o in zip(self.shard_ids, outcomes, strict=True) if isinstance(o, BaseException)]
        if down:
            raise errors.Unavailable(
                f"shard(s) {', '.join(map(str, down))} did not answer; the event woke {woke} wait(s) on the others: "
                f"send it again to reach the rest", shard_id=",".join(map(str, down)))
        return wpb.SendEventResponse(delivered=woke)

    async def list_runs(self, p: Principal, req: wpb.ListWorkflowsRequest,
                        timeout: float) -> wpb.ListWorkflowsResponse:
        """One page of the app's runs newest first, merged over every (shard, workflow type)."""
        types = self._list_types(await self.deployments.handlers_for(p.app_id), req.workflow_type)
        f = _state_filter(req.state)
        size = workflow_pages.page_size(req.page_size, "page_size")
        bound = tasks_pb2.TaskFilter(states=f.states, task_type=req.workflow_type)
        fhash = filters.filter_hash(p.tenant_id, p.app_id, bound)
        streams = [(s, t) for s in self.shard_ids for t in types]
        cursors = workflow_pages.decode_list_token(req.page_token, fhash, streams) if req.page_token \
            else dict.fromkeys(streams, "")
        if not cursors:
            return wpb.ListWorkflowsResponse()
        pages = await self._pages(p, f, size, cursors, timeout)
        keys = sorted(cursors)
        tasks, nxt = listing.merge({i: pages[k] for i, k in enumerate(keys)},
                                   {i: cursors[k] for i, k in enumerate(keys)}, size)
        return wpb.ListWorkflowsResponse(workflows=[to_workflow(t) for t in tasks],
                                         next_page_token=workflow_pages.encode_list_token(
                                             fhash, {keys[i]: c for i, c in nxt.items()}))

    @staticmethod
    def _list_types(handlers: Handlers | None, wanted: str) -> list[str]:
        """The workflow types a list reads: the one asked for (a workflow handler), else all."""
        if not wanted:
            return workflow_types(handlers)
        handler = validation.handler_for(wanted, handlers, "", field="workflow_type")
        if not handler.workflow:
            raise InvalidArgument(f"workflow_type {wanted!r} is a task handler, not a workflow: list its tasks with "
                                  f"GET /v1/tasks?task_type={wanted}")
        return [wanted]

    async def _pages(self, p: Principal, f: tasks_pb2.TaskFilter, size: int, cursors: dict[workflow_pages.Stream, str],
                     timeout: float) -> dict[workflow_pages.Stream, history_pb2.ListTasksResponse]:
        """A page of every stream, each shard's at once; all or nothing (fanout.each_shard)."""
        by_shard: dict[int, list[str]] = {}
        for shard, kind in sorted(cursors):
            by_shard.setdefault(shard, []).append(kind)

        async def shard_pages(shard: int) -> list[history_pb2.ListTasksResponse]:
            return list(await asyncio.gather(*(self.history.list_tasks(history_pb2.ListTasksRequest(
                shard_id=shard, tenant_id=p.tenant_id, app_id=p.app_id, page_size=size,
                filter=tasks_pb2.TaskFilter(states=f.states, task_type=kind), cursor=cursors[shard, kind]), timeout)
                for kind in by_shard[shard])))

        answered = await each_shard(sorted(by_shard), shard_pages)
        return {(s, kind): page for s, pages in answered.items() if pages is not None
                for kind, page in zip(by_shard[s], pages, strict=True)}


def _state_filter(state: tasks_pb2.TaskState) -> tasks_pb2.TaskFilter:
    """ListWorkflows' state as a checked filter (unset: every state)."""
    f = tasks_pb2.TaskFilter()
    if state:
        f.states.append(state)
    try:
        return filters.check_filter(f, where="filter")
    except InvalidArgument as e:
        e.message = e.message.replace("filter.states[0]", "state")
        raise
