"""The Ratchet client: enqueue, inspect, search, cancel and retry tasks,
manage schedules and circuit breakers, over gRPC.

    client = Client("127.0.0.1:7233", api_key)
    task_id = client.enqueue("greet", {"name": "Ada"}, delay="30s")
    info = client.wait(task_id, timeout=60)
    for dead in client.iter_tasks(state="FAILED", since="1d"):
        print(dead.task_id, dead.error)
    op = client.retry_tasks(state="FAILED", error_class="KeyError").operation
    client.wait_operation(op.operation_id)

Every enqueue carries either the caller's idempotency key or a task id the
client mints per logical call, and every bulk or create call a request id
(minted when the caller gives none); each is reused across the client's own
transport retries (UNAVAILABLE, DEADLINE_EXCEEDED), so a lost acknowledgement
never creates a second task, operation or schedule (design follow-up Q1). A
minted task id dedupes on the task's own primary key; a key also detects a
different request reusing it and costs a key row for 24 h. Server errors
surface as typed exceptions (`NotFound`, `InvalidArgument`, `Conflict`...)
carrying the server's message. Conversions live in ratchet._wire, records in ratchet.models.

Enqueues travel as calls on the gateway's enqueue stream from a thread of the
client's own (ratchet._sync_stream), so threads that enqueue at once share
messages; `stream=False` sends each as a unary EnqueueTask call.
"""

from __future__ import annotations

import json
import os
import pathlib
import time
from typing import Any

import grpc

from ratchet._bulk import TaskSearchCalls
from ratchet._schedules import ScheduleCalls
from ratchet._sync_stream import StreamEnqueuer
from ratchet._transport import (
    Conflict,
    DeadlineExceeded,
    InvalidArgument,
    NotFound,
    PayloadTooLarge,
    PermissionDenied,
    RatchetError,
    Unauthenticated,
    Unavailable,
    _Transport,
    error_from_rpc,
    invalid,
    new_idempotency_key,
    new_request_id,
)
from ratchet._wire import duration, from_value, retry_message, task_info, timeouts_message, timestamp, to_json, to_value
from ratchet._workflows import Poll, WorkflowCalls
from ratchet.api.apps.v1 import apps_pb2, apps_pb2_grpc
from ratchet.api.schedules.v1 import schedules_pb2_grpc
from ratchet.api.tasks.v1 import breakers_pb2_grpc, tasks_pb2, tasks_pb2_grpc
from ratchet.api.tenants.v1 import tenants_pb2, tenants_pb2_grpc
from ratchet.api.workflows.v1 import workflows_pb2_grpc
from ratchet.libs.shardmap import new_task_id, new_task_ids
from ratchet.models import (
    TERMINAL_STATES,
    AttemptInfo,
    BreakerInfo,
    BulkResult,
    OperationInfo,
    ScheduleInfo,
    SchedulePage,
    TaskError,
    TaskInfo,
    TaskPage,
    TriggerResult,
    WorkflowInfo,
    WorkflowPage,
    WorkflowStep,
)

__all__ = [
    "TERMINAL_STATES",
    "AdminClient",
    "AttemptInfo",
    "BreakerInfo",
    "BulkResult",
    "Client",
    "Conflict",
    "DeadlineExceeded",
    "InvalidArgument",
    "NotFound",
    "OperationInfo",
    "PayloadTooLarge",
    "PermissionDenied",
    "RatchetError",
    "ScheduleInfo",
    "SchedulePage",
    "TaskError",
    "TaskInfo",
    "TaskPage",
    "TriggerResult",
    "Unauthenticated",
    "Unavailable",
    "WorkflowInfo",
    "WorkflowPage",
    "WorkflowStep",
    "error_from_rpc",
    "from_value",
    "new_idempotency_key",
    "new_request_id",
    "retry_message",
    "task_info",
    "timeouts_message",
    "to_value",
]


class Client(TaskSearchCalls, ScheduleCalls, WorkflowCalls):
    """A connection to a Ratchet gateway ("host:port") with an app's API key.

    Tasks: enqueue, enqueue_batch, get, cancel, wait. Dead letters and bulk
    operations: list_tasks, iter_tasks, retry_tasks, cancel_tasks,
    get_operation, cancel_operation, wait_operation. Schedules:
    create_schedule, get_schedule, list_schedules, iter_schedules,
    pause_schedule, resume_schedule, delete_schedule, trigger_schedule.
    Circuit breakers: list_breakers, reset_breaker. Workflows: start_workflow,
    get_workflow, wait_workflow, iter_workflow_steps, list_workflow_children,
    iter_workflow_children, list_workflows, iter_workflows, cancel_workflow,
    send_event, send_workflow_event.
    """

    def __init__(self, endpoint: str, api_key: str, *, timeout: float = 10.0, max_retries: int = 4,
                 stream: bool = True):
        self._t = _Transport(endpoint, api_key, timeout, max_retries)
        # Enqueues go as calls on the gateway's enqueue stream, from a thread of the client's own
        # (ratchet._sync_stream); stream=False makes each a unary EnqueueTask call.
        self._stream = StreamEnqueuer(self._t.endpoint, api_key, timeout, max_retries) if stream else None
        self._tasks = tasks_pb2_grpc.TaskServiceStub(self._t.channel)
        self._apps = apps_pb2_grpc.AppServiceStub(self._t.channel)
        self._schedules = schedules_pb2_grpc.ScheduleServiceStub(self._t.channel)
        self._breakers = breakers_pb2_grpc.BreakerServiceStub(self._t.channel)
        self._workflows = workflows_pb2_grpc.WorkflowServiceStub(self._t.channel)

    @property
    def endpoint(self) -> str:
        return self._t.endpoint

    @classmethod
    def from_env(cls, **kwargs: Any) -> Client:
        """From RATCHET_ENDPOINT and RATCHET_API_KEY."""
        endpoint, key = os.environ.get("RATCHET_ENDPOINT"), os.environ.get("RATCHET_API_KEY")
        if not endpoint or not key:
            raise ValueError("set RATCHET_ENDPOINT (host:port) and RATCHET_API_KEY")
        return cls(endpoint, key, **kwargs)

    @classmethod
    def from_state_dir(cls, state_dir: str | os.PathLike = ".ratchet", **kwargs: Any) -> Client:
        """From the endpoints.json that `ratchet dev up` wrote in state_dir."""
        path = pathlib.Path(state_dir) / "endpoints.json"
        try:
            data = json.loads(path.read_text())
        except FileNotFoundError:
            raise ValueError(f"{path} not found: start the platform with `ratchet dev up`") from None
        return cls(data["grpc"], data["api_key"], **kwargs)

    def __enter__(self) -> Client:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def close(self) -> None:
        if self._stream is not None:
            self._stream.close()
        self._t.close()

    def enqueue(self, task_type: str, payload: Any = None, *, queue: str | None = None,
                delay: Any = None, run_at: Any = None, idempotency_key: str | None = None,
                retry: Any = None, timeouts: Any = None) -> str:
        """Enqueue one task; returns its id once it is durably committed.

        delay: seconds, "30s"/"5m" or a timedelta. run_at: a datetime, epoch
        seconds or ISO 8601 (exclusive with delay). retry: a RetryPolicy or a
        dict (max_attempts, base, factor, cap, jitter, non_retryable, rules).
        timeouts: a dict of schedule_to_start, start_to_close, schedule_to_close.
        """
        req = enqueue_request(task_type, payload, queue=queue, delay=delay, run_at=run_at,
                            idempotency_key=idempotency_key, retry=retry, timeouts=timeouts)
        if self._stream is not None and self._stream.available():
            return self._stream.send(req).task_id
        return self._t.call(self._tasks.EnqueueTask, req).task_id

    def enqueue_batch(self, tasks: list[dict]) -> list[str]:
        """Enqueue up to 1,000 tasks (dicts with enqueue's arguments); ids in order."""
        return list(self.send_enqueue_batch(batch_request(tasks, columns=True)).task_ids)

    def send_enqueue_batch(self, req: tasks_pb2.EnqueueTasksRequest) -> tasks_pb2.EnqueueTasksResponse:
        """Send a prepared EnqueueTasksRequest (every task with an idempotency_key or a task_id,
        as batch_request makes them: it is resent unchanged on retries)."""
        return self._t.call(self._tasks.EnqueueTasks, req)

    def get(self, task_id: str) -> TaskInfo:
        """The task's state, timings, result or error, checkpoint, and every attempt."""
        resp = self._t.call(self._tasks.GetTask, tasks_pb2.GetTaskRequest(task_id=task_id))
        return task_info(resp.task)

    def cancel(self, task_id: str) -> str:
        """Cancel; returns the state after the request ("CANCELED", "LEASED" while stopping, or terminal)."""
        resp = self._t.call(self._tasks.CancelTask, tasks_pb2.CancelTaskRequest(task_id=task_id))
        return tasks_pb2.TaskState.Name(resp.state).removeprefix("TASK_STATE_")

    def wait(self, task_id: str, timeout: float = 60.0, *, max_interval: float = 1.0) -> TaskInfo:
        """Poll until the task is terminal; raises TimeoutError after timeout seconds."""
        poll = Poll(task_id, timeout, max_interval)
        while True:
            try:
                info = self.get(task_id)
            except (Unavailable, DeadlineExceeded):
                if poll.out_of_time():
                    raise
                info = None
            if info is not None and info.terminal:
                return info
            time.sleep(poll.pause(info))

    def create_deployment(self, app: str, bundle: bytes, digest: str, module: str,
                          handlers: list[apps_pb2.Handler], *,
                          allow_dropping_live_handlers: bool = False) -> apps_pb2.Deployment:
        """Upload an app bundle and make it active (safe to retry: same bundle, same answer).

        A bundle that drops handlers live tasks or runs still use is refused (FailedPrecondition
        naming them and their counts) unless allow_dropping_live_handlers: then those tasks and
        runs fail with UnknownTaskType when they next run."""
        req = apps_pb2.CreateDeploymentRequest(app=app, bundle=bundle, digest=digest, module=module,
                                               handlers=handlers,
                                               allow_dropping_live_handlers=allow_dropping_live_handlers)
        return self._t.call(self._apps.CreateDeployment, req).deployment


def enqueue_request(task_type: str, payload: Any = None, *, queue: str | None = None,
                    delay: Any = None, run_at: Any = None, idempotency_key: str | None = None,
                    retry: Any = None, timeouts: Any = None) -> tasks_pb2.EnqueueTaskRequest:
    """The EnqueueTaskRequest of one enqueue call (Client.enqueue's arguments). Without an
    idempotency key, the new task's id is minted here, so the caller's resends of the same
    request (its transport retries) return the original task; a key keeps its own semantics."""
    req = _request(task_type, payload, queue=queue, delay=delay, run_at=run_at, idempotency_key=idempotency_key,
                   retry=retry, timeouts=timeouts)
    if not idempotency_key:
        req.task_id = new_task_id()
    return req


def _request(task_type: str, payload: Any = None, *, queue: str | None = None, delay: Any = None,
             run_at: Any = None, idempotency_key: str | None = None, retry: Any = None,
             timeouts: Any = None) -> tasks_pb2.EnqueueTaskRequest:
    """enqueue_request without the task id."""
    if delay is not None and run_at is not None:
        raise invalid("give delay or run_at, not both")
    req = tasks_pb2.EnqueueTaskRequest(task_type=task_type, queue=queue or "")
    if idempotency_key:
        req.idempotency_key = idempotency_key
    if payload is not None:
        req.payload_json = to_json(payload)
    if delay is not None:
        req.delay.CopyFrom(duration(delay, "delay"))
    if run_at is not None:
        req.run_at.CopyFrom(timestamp(run_at))
    if retry is not None:
        req.retry.CopyFrom(retry_message(retry))
    if timeouts is not None:
        req.timeouts.CopyFrom(timeouts_message(timeouts))
    return req


# The keys of an item that columns can carry (EnqueueTasksRequest.columns).
_COLUMN_KEYS = frozenset({"task_type", "payload", "queue"})


def _columns_request(tasks: list[dict]) -> tasks_pb2.EnqueueTasksRequest | None:
    """tasks as EnqueueTasksRequest.columns when every item is a dict of one task type, one
    queue (or none) and a payload, else None. A few C-level passes over the list, then one
    to_json per payload: no message per task (the larger part of building a batch)."""
    n = len(tasks)
    if not n or not all(type(item) is dict for item in tasks) or not all(map(_COLUMN_KEYS.issuperset, tasks)):
        return None
    task_type, queue = tasks[0].get("task_type"), tasks[0].get("queue")
    if not isinstance(task_type, str) or not task_type or not isinstance(queue, (str, type(None))):
        return None
    if [item.get("task_type") for item in tasks].count(task_type) != n or \
            [item.get("queue") for item in tasks].count(queue) != n:
        return None
    try:
        texts = [to_json(p) if p is not None else "" for p in [item.get("payload") for item in tasks]]
    except InvalidArgument:
        return None  # the item path names the item
    out = tasks_pb2.EnqueueTasksRequest()
    cols = out.columns
    cols.task_type = task_type
    if queue:
        cols.queue = queue
    cols.task_ids.extend(new_task_ids(n))
    cols.payloads_json.extend(texts)
    return out


def batch_request(tasks: list[dict], *, columns: bool = False) -> tasks_pb2.EnqueueTasksRequest:
    """enqueue_batch's request: its items (dicts of enqueue's arguments) built in place;
    InvalidArgument names the bad one. The ids minted for the unkeyed items share one random
    slot per run of 100 (libs/shardmap.new_task_ids): a call of 100 is then one shard's work
    (one statement and one commit), a bigger one still spreads. columns: as
    EnqueueTasksRequest.columns when every item is a task type and a payload (one type and
    queue for all)."""
    if columns:
        out = _columns_request(tasks)
        if out is not None:
            return out
    for i, item in enumerate(tasks):
        if not isinstance(item, dict) or "task_type" not in item:
            raise invalid(f"tasks[{i}] must be a dict with a task_type")
    next_id = iter(new_task_ids(sum(1 for item in tasks if not item.get("idempotency_key")))).__next__
    out = tasks_pb2.EnqueueTasksRequest()
    add = out.tasks.add
    for i, item in enumerate(tasks):
        try:
            if len(item) <= 2 and ("payload" in item or len(item) == 1):  # (a type and a payload: the usual item)
                payload = item.get("payload")
                add(task_type=item["task_type"], payload_json=to_json(payload) if payload is not None else "",
                    task_id=next_id())
                continue
            req = _request(**item)
        except TypeError as e:  # ("_request() got an unexpected keyword argument 'x'": not the caller's name)
            raise invalid(f"tasks[{i}]: {str(e).split(') ', 1)[-1]}") from None
        except InvalidArgument as e:
            raise invalid(f"tasks[{i}].{e}") from None
        if not req.idempotency_key:
            req.task_id = next_id()
        out.tasks.append(req)
    return out


class AdminClient:
    """Platform administration with the admin key (tenants)."""

    def __init__(self, endpoint: str, admin_key: str, *, timeout: float = 10.0, max_retries: int = 4):
        self._t = _Transport(endpoint, admin_key, timeout, max_retries)
        self._tenants = tenants_pb2_grpc.TenantServiceStub(self._t.channel)

    def create_tenant(self, name: str) -> dict:
        """Create a tenant with app "default"; returns tenant_id, app_id, app and api_key."""
        # Only UNAVAILABLE is retried: a timed-out create may have committed,
        # and its retry would then fail with Conflict.
        resp = self._t.call(self._tenants.CreateTenant, tenants_pb2.CreateTenantRequest(name=name),
                            retry_on=frozenset({grpc.StatusCode.UNAVAILABLE}))
        return {"tenant_id": resp.tenant_id, "app_id": resp.app_id, "app": resp.app, "api_key": resp.api_key}

    def close(self) -> None:
        self._t.close()

    def __enter__(self) -> AdminClient:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()
