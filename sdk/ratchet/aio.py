"""The asyncio client: enqueue, inspect and cancel tasks from async code.

    async with AsyncClient("127.0.0.1:7233", api_key) as client:
        task_id = await client.enqueue("greet", {"name": "Ada"}, delay="30s")
        info = await client.wait(task_id, timeout=60)

Enqueues and batch enqueues travel as messages on one long-lived stream to
the gateway (`TaskService.EnqueueTaskStream`, libs/rpc/callstream): each call
is answered with exactly what `EnqueueTask` (or `EnqueueTasks`) would have
answered; calls made while the previous message was being written share the
next one, so many coroutines enqueue at once on one connection for a fraction
of a unary call's cost each. Against an endpoint that does not serve the stream
(a proxy without bidirectional streams, say) a call fails UNIMPLEMENTED and
says so; `stream=False` sends unary calls, with the same messages.

As with `Client`, every enqueue carries the caller's idempotency key or a task
id minted here, resent unchanged on the client's own retries of ambiguous
failures (UNAVAILABLE, DEADLINE_EXCEEDED, a stream that ended before
answering), so a lost acknowledgement never creates a second task. Errors are
the same typed exceptions `Client` raises.
"""

from __future__ import annotations

import asyncio
import random
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import grpc

from ratchet import _workflows as wf
from ratchet._transport import (
    TRANSIENT,
    UNSENT,
    DeadlineExceeded,
    RatchetError,
    Unavailable,
    error_from_rpc,
    error_from_status,
    status_code,
)
from ratchet._wire import task_info
from ratchet.api.tasks.v1 import tasks_pb2, tasks_pb2_grpc
from ratchet.api.workflows.v1 import workflows_pb2, workflows_pb2_grpc
from ratchet.client import Poll, batch_request, enqueue_request
from ratchet.libs.rpc.callstream import CallStream, StreamBroken
from ratchet.libs.rpc.client import aio_channel
from ratchet.models import ChildPage, ChildRun, TaskInfo, WorkflowInfo, WorkflowPage, WorkflowStep

__all__ = ["AsyncClient"]


class AsyncClient:
    """An asyncio connection to a Ratchet gateway ("host:port") with an app's API key.

    enqueue, enqueue_batch, get, cancel, wait; workflows as Client has them (start_workflow,
    get_workflow, wait_workflow, iter_workflow_steps, list_workflow_children,
    iter_workflow_children, list_workflows, cancel_workflow, send_event, send_workflow_event);
    close (or `async with`). `stream=False` sends each enqueue as a unary call instead of a
    message on the enqueue stream.
    """

    def __init__(self, endpoint: str, api_key: str, *, timeout: float = 10.0, max_retries: int = 4,
                 stream: bool = True):
        if not endpoint:
            raise ValueError("endpoint must be 'host:port'")
        self.endpoint = endpoint.split("://", 1)[-1].rstrip("/")
        self.timeout = timeout
        self.max_retries = max_retries
        self._metadata = (("authorization", f"Bearer {api_key}"),)
        # The channel is made on first use, inside the event loop that uses it (a grpc.aio
        # channel belongs to the loop it was made in; a client built at import time would
        # otherwise be tied to no loop, or to the wrong one).
        self._channel: grpc.aio.Channel | None = None
        self._stub: tasks_pb2_grpc.TaskServiceStub | None = None
        self._wf_stub: workflows_pb2_grpc.WorkflowServiceStub | None = None
        self._stream = CallStream(
            lambda metadata: self._tasks.EnqueueTaskStream(metadata=self._metadata + metadata),
            _wrap, _answers, self._enqueue_unary, peer="gateway", method="EnqueueTask", enabled=stream)
        self.sleep: Callable[[float], Awaitable[None]] = asyncio.sleep

    async def __aenter__(self) -> AsyncClient:
        return self

    async def __aexit__(self, *exc: Any) -> None:
        await self.close()

    @property
    def _tasks(self) -> tasks_pb2_grpc.TaskServiceStub:
        if self._stub is None:
            self._channel = aio_channel(self.endpoint)
            self._stub = tasks_pb2_grpc.TaskServiceStub(self._channel)
        return self._stub

    @property
    def _workflows(self) -> workflows_pb2_grpc.WorkflowServiceStub:
        if self._wf_stub is None:
            self._tasks  # noqa: B018 - makes the channel, in this loop
            self._wf_stub = workflows_pb2_grpc.WorkflowServiceStub(self._channel)
        return self._wf_stub

    async def close(self) -> None:
        """End the enqueue stream and the channel; calls still waiting fail Unavailable."""
        await self._stream.close()
        if self._channel is not None:
            await self._channel.close()
            self._channel, self._stub, self._wf_stub = None, None, None

    async def enqueue(self, task_type: str, payload: Any = None, *, queue: str | None = None,
                      delay: Any = None, run_at: Any = None, idempotency_key: str | None = None,
                      retry: Any = None, timeouts: Any = None) -> str:
        """Enqueue one task; returns its id once it is durably committed (see Client.enqueue)."""
        req = enqueue_request(task_type, payload, queue=queue, delay=delay, run_at=run_at,
                              idempotency_key=idempotency_key, retry=retry, timeouts=timeouts)
        return (await self.send_enqueue(req)).task_id

    async def send_enqueue(self, req: tasks_pb2.EnqueueTaskRequest) -> tasks_pb2.EnqueueTaskResponse:
        """Send a prepared EnqueueTaskRequest (it should carry an idempotency_key or a task_id:
        it is resent unchanged on retries); returns the response, with `deduplicated`."""
        return await self._retrying(lambda: self._enqueue_once(req))

    async def enqueue_batch(self, tasks: list[dict]) -> list[str]:
        """Enqueue up to 1,000 tasks (dicts with enqueue's arguments); ids in order."""
        return list((await self.send_enqueue_batch(batch_request(tasks, columns=True))).task_ids)

    async def send_enqueue_batch(self, req: tasks_pb2.EnqueueTasksRequest) -> tasks_pb2.EnqueueTasksResponse:
        """Send a prepared EnqueueTasksRequest (every task with an idempotency_key or a task_id,
        as batch_request makes them: it is resent unchanged on retries)."""
        return await self._retrying(lambda: self._enqueue_once(req))

    async def get(self, task_id: str) -> TaskInfo:
        """The task's state, timings, result or error, checkpoint, and every attempt."""
        req = tasks_pb2.GetTaskRequest(task_id=task_id)
        return task_info((await self._retrying(lambda: self._unary(self._tasks.GetTask, req))).task)

    async def cancel(self, task_id: str) -> str:
        """Cancel; returns the state after the request ("CANCELED", "LEASED" while stopping, or terminal)."""
        req = tasks_pb2.CancelTaskRequest(task_id=task_id)
        resp = await self._retrying(lambda: self._unary(self._tasks.CancelTask, req))
        return tasks_pb2.TaskState.Name(resp.state).removeprefix("TASK_STATE_")

    async def wait(self, task_id: str, timeout: float = 60.0, *, max_interval: float = 1.0) -> TaskInfo:
        """Poll until the task is terminal; raises TimeoutError after timeout seconds."""
        poll = Poll(task_id, timeout, max_interval)
        while True:
            try:
                info = await self.get(task_id)
            except (Unavailable, DeadlineExceeded):
                if poll.out_of_time():
                    raise
                info = None
            if info is not None and info.terminal:
                return info
            await self.sleep(poll.pause(info))

    # -- workflows (ratchet._workflows: the requests, the retry rules) -----------------
    async def _wf(self, rpc: str, req: Any, retry_on: frozenset = TRANSIENT) -> Any:
        return await self._retrying(lambda: self._unary(getattr(self._workflows, rpc), req), retry_on)

    async def start_workflow(self, workflow_type: str, input: Any = None, *,
                             idempotency_key: str | None = None, delay: Any = None, queue: str | None = None) -> str:
        """Start a run of a @workflow handler; returns its id (see Client.start_workflow)."""
        req = wf.start_request(workflow_type, input, idempotency_key=idempotency_key, delay=delay, queue=queue)
        return (await self._wf("StartWorkflow", req)).workflow_id

    async def get_workflow(self, workflow_id: str, step_page_size: int | None = None,
                           step_page_token: str | None = None) -> WorkflowInfo:
        """The run with one page of its step log and its pending wait (see Client.get_workflow)."""
        return wf.run_of(await self._wf("GetWorkflow", wf.get_request(workflow_id, step_page_size, step_page_token)))

    async def iter_workflow_steps(self, workflow_id: str, page_size: int | None = None) -> AsyncIterator[WorkflowStep]:
        """Every entry of the run's step log in position order, following the pages."""
        token = None
        while True:
            run = await self.get_workflow(workflow_id, page_size, token)
            for step in run.steps:
                yield step
            if not run.next_step_page_token:
                return
            token = run.next_step_page_token

    async def wait_workflow(self, workflow_id: str, timeout: float = 60.0, *,
                            max_interval: float = 1.0) -> WorkflowInfo:
        """Poll until the run is terminal and return it; TimeoutError after timeout seconds
        (see Client.wait_workflow)."""
        poll = Poll(workflow_id, timeout, max_interval, noun="workflow")
        while True:
            try:
                # (polls read one step; the answer, once the run has ended, the first page)
                run: WorkflowInfo | None = await self.get_workflow(workflow_id, step_page_size=1)
            except (Unavailable, DeadlineExceeded):
                if poll.out_of_time():
                    raise
                run = None
            if run is not None and run.terminal:
                return await self.get_workflow(workflow_id)
            await self.sleep(poll.pause(run))

    async def list_workflow_children(self, workflow_id: str, position: int, *, page_size: int | None = None,
                                     page_token: str | None = None) -> ChildPage:
        """One page of the children of the fan-out at `position` (see Client.list_workflow_children)."""
        return wf.children_of(await self._wf("ListWorkflowChildren", wf.children_request(
            workflow_id, position, page_size, page_token)))

    async def iter_workflow_children(self, workflow_id: str, position: int,
                                     page_size: int | None = None) -> AsyncIterator[ChildRun]:
        """Every child of the fan-out at `position`, by index, following the pages."""
        token = None
        while True:
            page = await self.list_workflow_children(workflow_id, position, page_size=page_size, page_token=token)
            for child in page.children:
                yield child
            if not page.next_page_token:
                return
            token = page.next_page_token

    async def list_workflows(self, *, state: str | None = None, workflow_type: str | None = None,
                             page_size: int | None = None, page_token: str | None = None) -> WorkflowPage:
        """One page of the app's runs, newest first (see Client.list_workflows)."""
        return wf.page_of(await self._wf("ListWorkflows", wf.list_request(state, workflow_type, page_size,
                                                                          page_token)))

    async def cancel_workflow(self, workflow_id: str) -> str:
        """Cancel a run; its state after the request."""
        resp = await self._wf("CancelWorkflow", workflows_pb2.CancelWorkflowRequest(workflow_id=workflow_id))
        return wf.state_name(resp.state)

    async def send_event(self, name: str, data: Any = None) -> int:
        """Wake the tenant's runs waiting now for this event; how many woke (see Client.send_event)."""
        return (await self._wf("SendEvent", wf.event_request(name, data), UNSENT)).delivered

    async def send_workflow_event(self, workflow_id: str, name: str, data: Any = None) -> bool:
        """Deliver an event to one run: True when a wait took it now, False when kept in its inbox."""
        return (await self._wf("SendWorkflowEvent", wf.run_event_request(workflow_id, name, data))).delivered

    # -- transport -----------------------------------------------------------------
    async def _enqueue_once(self, req):
        """One EnqueueTask (or EnqueueTasks) call on the stream: its response, or its error raised."""
        try:
            out = await self._stream.call(req, self.timeout)
        except StreamBroken as e:
            if e.code == grpc.StatusCode.UNIMPLEMENTED:
                raise RatchetError(f"{self.endpoint} does not serve the enqueue stream ({e.details}); nothing "
                                   "was sent: point the client at a Ratchet gateway, or pass stream=False to "
                                   "send unary calls (e.g. behind a proxy without bidirectional streams)",
                                   "UNIMPLEMENTED") from None
            raise Unavailable(f"the enqueue stream to the gateway ended before the answer ({e.details}); "
                              f"{_what(req)} may or may not have been committed", "UNAVAILABLE") from None
        except TimeoutError:
            raise DeadlineExceeded(f"no answer from the gateway within {self.timeout:g}s; {_what(req)} may "
                                   f"or may not have been committed", "DEADLINE_EXCEEDED") from None
        except grpc.aio.AioRpcError as e:  # a unary call's failure
            raise error_from_rpc(e) from None
        if isinstance(out, tasks_pb2.CallError):
            raise error_from_status(status_code(out.code), out.message, out.fields.get("original_task_id"))
        return out

    async def _enqueue_unary(self, req, timeout: float):
        if type(req) is tasks_pb2.EnqueueTasksRequest:
            return await self._tasks.EnqueueTasks(req, timeout=timeout, metadata=self._metadata)
        return await self._tasks.EnqueueTask(req, timeout=timeout, metadata=self._metadata)

    async def _unary(self, method, req):
        try:
            return await method(req, timeout=self.timeout, metadata=self._metadata)
        except grpc.aio.AioRpcError as e:
            raise error_from_rpc(e) from None

    async def _retrying(self, once: Callable[[], Awaitable[Any]], retry_on: frozenset = TRANSIENT) -> Any:
        """once(), retried on the transient failures (retry_on) with capped, jittered backoff;
        the request is resent unchanged, so an enqueue keeps its key or task id."""
        delay = 0.1
        for attempt in range(self.max_retries + 1):
            try:
                return await once()
            except RatchetError as e:
                if getattr(grpc.StatusCode, e.code, None) not in retry_on or attempt == self.max_retries:
                    raise
            await self.sleep(random.uniform(delay / 2, delay))
            delay = min(delay * 2, 2.0)
        raise AssertionError("unreachable")


def _what(req) -> str:
    return "the tasks" if type(req) is tasks_pb2.EnqueueTasksRequest else "the task"


def _wrap(calls: list[tuple[int, Any, int]]) -> tasks_pb2.EnqueueTaskStreamRequest:
    out = tasks_pb2.EnqueueTaskStreamRequest()
    for c, r, t in calls:
        if type(r) is tasks_pb2.EnqueueTasksRequest:
            out.calls.add(call_id=c, batch=r, timeout_ms=t)
        else:
            out.calls.add(call_id=c, request=r, timeout_ms=t)
    return out


def _answers(reply: tasks_pb2.EnqueueTaskStreamResponse):
    for a in reply.answers:
        yield a.call_id, getattr(a, a.WhichOneof("outcome") or "response")
