"""The Ratchet client: enqueue, inspect, cancel and wait for tasks over gRPC.

    client = Client("127.0.0.1:7233", api_key)
    task_id = client.enqueue("greet", {"name": "Ada"}, delay="30s")
    info = client.wait(task_id, timeout=60)

Every enqueue carries an idempotency key. When the caller gives none, the
client mints one per logical call and reuses it across its own transport
retries (UNAVAILABLE, DEADLINE_EXCEEDED), so a lost acknowledgement never
creates a second task (design follow-up Q1). Server errors surface as typed
exceptions (`NotFound`, `InvalidArgument`, `Conflict`...) carrying the
server's message.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import json
import os
import pathlib
import random
import re
import time
import uuid
from typing import Any, Callable

import grpc
from google.protobuf import duration_pb2, json_format, struct_pb2, timestamp_pb2

from ratchet.api.apps.v1 import apps_pb2, apps_pb2_grpc
from ratchet.api.tasks.v1 import tasks_pb2, tasks_pb2_grpc
from ratchet.api.tenants.v1 import tenants_pb2, tenants_pb2_grpc
from ratchet.libs.durations import parse_duration
from ratchet.libs.rpc.client import sync_channel
from ratchet.libs.rpc.status import http_status

TERMINAL_STATES = frozenset({"SUCCEEDED", "FAILED", "CANCELED", "EXPIRED"})


# -- errors ------------------------------------------------------------------
class RatchetError(Exception):
    """A request failed. `code` is the gRPC status name, `http_status` its REST twin."""

    def __init__(self, message: str, code: str = "UNKNOWN"):
        super().__init__(message)
        self.message = message
        self.code = code
        self.http_status = http_status(getattr(grpc.StatusCode, code, grpc.StatusCode.UNKNOWN))


class InvalidArgument(RatchetError):
    """The request was refused as invalid and changed nothing; the message says what to fix."""


class NotFound(RatchetError):
    """No such task (or it belongs to another tenant), app or deployment."""


class Conflict(RatchetError):
    """The idempotency key (or name) is taken by a different request; `task_id` is the original."""

    def __init__(self, message: str, code: str = "ALREADY_EXISTS", task_id: str | None = None):
        super().__init__(message, code)
        self.task_id = task_id


class Unauthenticated(RatchetError):
    """The API key (or admin key) is missing, unknown or revoked."""


class PermissionDenied(RatchetError):
    """The key is valid but may not do this (for example, another app's deployment)."""


class PayloadTooLarge(RatchetError):
    """The payload, batch or bundle is over its limit; nothing was written."""


class Unavailable(RatchetError):
    """The platform (or the task's shard) could not be reached; safe to retry with the same key."""


class DeadlineExceeded(RatchetError):
    """No answer in time: the request may or may not have taken effect."""


_ERRORS: dict[grpc.StatusCode, type[RatchetError]] = {
    grpc.StatusCode.INVALID_ARGUMENT: InvalidArgument,
    grpc.StatusCode.FAILED_PRECONDITION: InvalidArgument,
    grpc.StatusCode.OUT_OF_RANGE: InvalidArgument,
    grpc.StatusCode.NOT_FOUND: NotFound,
    grpc.StatusCode.ALREADY_EXISTS: Conflict,
    grpc.StatusCode.ABORTED: Conflict,
    grpc.StatusCode.UNAUTHENTICATED: Unauthenticated,
    grpc.StatusCode.PERMISSION_DENIED: PermissionDenied,
    grpc.StatusCode.RESOURCE_EXHAUSTED: PayloadTooLarge,
    grpc.StatusCode.UNAVAILABLE: Unavailable,
    grpc.StatusCode.DEADLINE_EXCEEDED: DeadlineExceeded,
}
_TRANSIENT = frozenset({grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.DEADLINE_EXCEEDED})
_UUID = re.compile(r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}", re.I)


def error_from_rpc(err: grpc.RpcError) -> RatchetError:
    """The typed exception for a failed call; the one place codes are mapped."""
    code = err.code() if hasattr(err, "code") else grpc.StatusCode.UNKNOWN
    message = (err.details() if hasattr(err, "details") else None) or code.name.lower()
    cls = _ERRORS.get(code, RatchetError)
    if cls is Conflict:
        return Conflict(message, code.name, task_id=_original_task_id(err, message))
    return cls(message, code.name)


def _original_task_id(err: grpc.RpcError, message: str) -> str | None:
    # The gateway names the original task in trailing metadata; fall back to
    # the id quoted in the message so older servers still give it.
    try:
        for key, value in err.trailing_metadata() or ():
            if key.endswith("task-id") and isinstance(value, str):
                return value
    except Exception:  # noqa: BLE001 - a fake or cancelled call may have no trailers
        pass
    m = _UUID.search(message)
    return m.group(0).lower() if m else None


# -- results -----------------------------------------------------------------
@dataclasses.dataclass(frozen=True)
class TaskError:
    """Why an attempt or a task failed."""

    error_class: str
    message: str
    stack: str = ""


@dataclasses.dataclass(frozen=True)
class AttemptInfo:
    """One attempt: who ran it, when, and how it ended (outcome like "FAILED")."""

    attempt: int
    lease_epoch: int
    worker_id: str
    outcome: str
    started_at: dt.datetime | None
    finished_at: dt.datetime | None
    error: TaskError | None


@dataclasses.dataclass(frozen=True)
class TaskInfo:
    """A task as its owner sees it. `state` is a name like "SUCCEEDED"."""

    task_id: str
    task_type: str
    queue: str
    state: str
    attempt: int
    max_attempts: int
    version: int
    payload: Any
    result: Any
    error: TaskError | None
    idempotency_key: str
    cancel_requested: bool
    created_at: dt.datetime | None
    run_at: dt.datetime | None
    updated_at: dt.datetime | None
    started_at: dt.datetime | None
    finished_at: dt.datetime | None
    retry: dict
    timeouts: dict
    attempts: list[AttemptInfo]

    @property
    def terminal(self) -> bool:
        return self.state in TERMINAL_STATES

    @property
    def succeeded(self) -> bool:
        return self.state == "SUCCEEDED"

    def to_dict(self) -> dict:
        """A JSON-ready dict (timestamps as ISO 8601 strings)."""
        return _jsonable(dataclasses.asdict(self))


def _jsonable(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: _jsonable(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_jsonable(v) for v in value]
    if isinstance(value, dt.datetime):
        return value.isoformat()
    return value


# -- conversions -------------------------------------------------------------
def _seconds(value: Any, what: str) -> float:
    if isinstance(value, dt.timedelta):
        return value.total_seconds()
    try:
        return parse_duration(value)
    except ValueError as e:
        raise InvalidArgument(f"{what}: {e}", "INVALID_ARGUMENT") from None


def _duration(value: Any, what: str) -> duration_pb2.Duration:
    d = duration_pb2.Duration()
    d.FromNanoseconds(round(_seconds(value, what) * 1e9))
    return d


def _timestamp(value: Any) -> timestamp_pb2.Timestamp:
    """run_at as a datetime (naive means local time), epoch seconds or ISO 8601."""
    if isinstance(value, str):
        try:
            value = dt.datetime.fromisoformat(value)
        except ValueError:
            raise InvalidArgument(f"run_at {value!r} is not an ISO 8601 time", "INVALID_ARGUMENT") from None
    seconds = value.timestamp() if isinstance(value, dt.datetime) else float(value)
    ts = timestamp_pb2.Timestamp()
    ts.FromNanoseconds(round(seconds * 1e9))
    return ts


def to_value(payload: Any, what: str = "payload") -> struct_pb2.Value:
    """Any JSON value as a protobuf Value (tuples become lists)."""
    try:
        plain = json.loads(json.dumps(payload, allow_nan=False))
    except (TypeError, ValueError) as e:
        raise InvalidArgument(f"{what} must be JSON-serializable: {e}", "INVALID_ARGUMENT") from None
    return json_format.ParseDict(plain, struct_pb2.Value())


def from_value(value: struct_pb2.Value) -> Any:
    """A protobuf Value as plain JSON; whole numbers come back as ints."""
    return _ints(json_format.MessageToDict(value))


def _ints(value: Any) -> Any:
    if isinstance(value, float) and value.is_integer() and abs(value) < 2**53:
        return int(value)
    if isinstance(value, list):
        return [_ints(v) for v in value]
    if isinstance(value, dict):
        return {k: _ints(v) for k, v in value.items()}
    return value


def _field(policy: Any, name: str) -> Any:
    """policy[name] / policy.name, also accepting the `<name>_s` spelling."""
    for key in (name, f"{name}_s"):
        value = policy.get(key) if isinstance(policy, dict) else getattr(policy, key, None)
        if value is not None:
            return value
    return None


def retry_message(policy: Any) -> tasks_pb2.RetryPolicy:
    """A RetryPolicy proto from a dict or a ratchet.RetryPolicy; unset fields stay unset."""
    msg = tasks_pb2.RetryPolicy()
    if (v := _field(policy, "max_attempts")) is not None:
        msg.max_attempts = int(v)
    if (v := _field(policy, "factor")) is not None:
        msg.factor = float(v)
    if _field(policy, "backoff") == "fixed":
        msg.factor = 1.0
    if (v := _field(policy, "jitter")) is not None:
        msg.jitter = bool(v)
    for name in ("base", "cap"):
        if (v := _field(policy, name)) is not None:
            getattr(msg, name).CopyFrom(_duration(v, f"retry.{name}"))
    return msg


def timeouts_message(timeouts: Any) -> tasks_pb2.Timeouts:
    """A Timeouts proto from a dict of durations (`start_to_close` or `start_to_close_s`)."""
    msg = tasks_pb2.Timeouts()
    for name in ("schedule_to_start", "start_to_close", "schedule_to_close"):
        if (v := _field(timeouts, name)) is not None:
            getattr(msg, name).CopyFrom(_duration(v, f"timeouts.{name}"))
    return msg


def _when(ts: timestamp_pb2.Timestamp, msg: Any, name: str) -> dt.datetime | None:
    return ts.ToDatetime(tzinfo=dt.timezone.utc) if msg.HasField(name) else None


def _error(msg: Any) -> TaskError | None:
    if not msg.HasField("error"):
        return None
    return TaskError(msg.error.error_class, msg.error.message, msg.error.stack)


def _dict(msg: Any) -> dict:
    return json_format.MessageToDict(msg, preserving_proto_field_name=True)


def task_info(t: tasks_pb2.Task) -> TaskInfo:
    """TaskInfo from the wire form."""
    attempts = [AttemptInfo(a.attempt, a.lease_epoch, a.worker_id,
                            tasks_pb2.AttemptOutcome.Name(a.outcome).removeprefix("ATTEMPT_OUTCOME_"),
                            _when(a.started_at, a, "started_at"), _when(a.finished_at, a, "finished_at"),
                            _error(a)) for a in t.attempts]
    return TaskInfo(
        task_id=t.task_id, task_type=t.task_type, queue=t.queue,
        state=tasks_pb2.TaskState.Name(t.state).removeprefix("TASK_STATE_"),
        attempt=t.attempt, max_attempts=t.max_attempts, version=t.version,
        payload=from_value(t.payload) if t.HasField("payload") else None,
        result=from_value(t.result) if t.HasField("result") else None,
        error=_error(t), idempotency_key=t.idempotency_key, cancel_requested=t.cancel_requested,
        created_at=_when(t.created_at, t, "created_at"), run_at=_when(t.run_at, t, "run_at"),
        updated_at=_when(t.updated_at, t, "updated_at"), started_at=_when(t.started_at, t, "started_at"),
        finished_at=_when(t.finished_at, t, "finished_at"),
        retry=_dict(t.retry), timeouts=_dict(t.timeouts), attempts=attempts)


# -- transport ---------------------------------------------------------------
class _Transport:
    """A channel plus the one retry loop every call goes through."""

    def __init__(self, endpoint: str, key: str, timeout: float, max_retries: int):
        if not endpoint:
            raise ValueError("endpoint must be 'host:port'")
        self.endpoint = endpoint.split("://", 1)[-1].rstrip("/")
        self.timeout = timeout
        self.max_retries = max_retries
        self.metadata = (("authorization", f"Bearer {key}"),)
        self.channel = sync_channel(self.endpoint)
        self.sleep: Callable[[float], None] = time.sleep

    def call(self, method: Callable, request: Any, retry_on: frozenset = _TRANSIENT) -> Any:
        """Call with a deadline; retry transient failures with capped, jittered backoff.

        The request is resent unchanged, so an enqueue keeps its idempotency key.
        """
        delay = 0.1
        for attempt in range(self.max_retries + 1):
            try:
                return method(request, timeout=self.timeout, metadata=self.metadata)
            except grpc.RpcError as e:
                if e.code() not in retry_on or attempt == self.max_retries:
                    raise error_from_rpc(e) from None
            self.sleep(random.uniform(delay / 2, delay))
            delay = min(delay * 2, 2.0)
        raise AssertionError("unreachable")

    def close(self) -> None:
        self.channel.close()


class Client:
    """A connection to a Ratchet gateway ("host:port") with an app's API key."""

    def __init__(self, endpoint: str, api_key: str, *, timeout: float = 10.0, max_retries: int = 4):
        self._t = _Transport(endpoint, api_key, timeout, max_retries)
        self._tasks = tasks_pb2_grpc.TaskServiceStub(self._t.channel)
        self._apps = apps_pb2_grpc.AppServiceStub(self._t.channel)

    @property
    def endpoint(self) -> str:
        return self._t.endpoint

    @classmethod
    def from_env(cls, **kwargs: Any) -> "Client":
        """From RATCHET_ENDPOINT and RATCHET_API_KEY."""
        endpoint, key = os.environ.get("RATCHET_ENDPOINT"), os.environ.get("RATCHET_API_KEY")
        if not endpoint or not key:
            raise ValueError("set RATCHET_ENDPOINT (host:port) and RATCHET_API_KEY")
        return cls(endpoint, key, **kwargs)

    @classmethod
    def from_state_dir(cls, state_dir: str | os.PathLike = ".ratchet", **kwargs: Any) -> "Client":
        """From the endpoints.json that `ratchet dev up` wrote in state_dir."""
        path = pathlib.Path(state_dir) / "endpoints.json"
        try:
            data = json.loads(path.read_text())
        except FileNotFoundError:
            raise ValueError(f"{path} not found: start the platform with `ratchet dev up`") from None
        return cls(data["grpc"], data["api_key"], **kwargs)

    def __enter__(self) -> "Client":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def close(self) -> None:
        self._t.close()

    def enqueue(self, task_type: str, payload: Any = None, *, queue: str | None = None,
                delay: Any = None, run_at: Any = None, idempotency_key: str | None = None,
                retry: Any = None, timeouts: Any = None) -> str:
        """Enqueue one task; returns its id once it is durably committed.

        delay: seconds, "30s"/"5m" or a timedelta. run_at: a datetime, epoch
        seconds or ISO 8601 (exclusive with delay). retry: a RetryPolicy or a
        dict (max_attempts, base, factor, cap, jitter). timeouts: a dict of
        schedule_to_start, start_to_close, schedule_to_close.
        """
        req = self._request(task_type, payload, queue=queue, delay=delay, run_at=run_at,
                            idempotency_key=idempotency_key, retry=retry, timeouts=timeouts)
        return self._t.call(self._tasks.EnqueueTask, req).task_id

    def enqueue_batch(self, tasks: list[dict]) -> list[str]:
        """Enqueue up to 1,000 tasks (dicts with enqueue's arguments); ids in order."""
        reqs = []
        for i, item in enumerate(tasks):
            if not isinstance(item, dict) or "task_type" not in item:
                raise InvalidArgument(f"tasks[{i}] must be a dict with a task_type", "INVALID_ARGUMENT")
            try:
                reqs.append(self._request(**item))
            except TypeError as e:
                raise InvalidArgument(f"tasks[{i}]: {e}", "INVALID_ARGUMENT") from None
        resp = self._t.call(self._tasks.EnqueueTasks, tasks_pb2.EnqueueTasksRequest(tasks=reqs))
        return list(resp.task_ids)

    def get(self, task_id: str) -> TaskInfo:
        """The task's state, timings, result or error, and every attempt."""
        resp = self._t.call(self._tasks.GetTask, tasks_pb2.GetTaskRequest(task_id=task_id))
        return task_info(resp.task)

    def cancel(self, task_id: str) -> str:
        """Cancel; returns the state after the request ("CANCELED", "LEASED" while stopping, or terminal)."""
        resp = self._t.call(self._tasks.CancelTask, tasks_pb2.CancelTaskRequest(task_id=task_id))
        return tasks_pb2.TaskState.Name(resp.state).removeprefix("TASK_STATE_")

    def wait(self, task_id: str, timeout: float = 60.0, *, max_interval: float = 1.0) -> TaskInfo:
        """Poll until the task is terminal; raises TimeoutError after timeout seconds."""
        deadline = time.monotonic() + timeout
        interval = 0.05
        while True:
            info = self.get(task_id)
            if info.terminal:
                return info
            left = deadline - time.monotonic()
            if left <= 0:
                raise TimeoutError(f"task {task_id} is still {info.state} after {timeout:g}s")
            time.sleep(min(interval, left))
            interval = min(interval * 1.5, max_interval)

    def create_deployment(self, app: str, bundle: bytes, digest: str, module: str,
                          handlers: list[apps_pb2.Handler]) -> apps_pb2.Deployment:
        """Upload an app bundle and make it active (safe to retry: same bundle, same answer)."""
        req = apps_pb2.CreateDeploymentRequest(app=app, bundle=bundle, digest=digest, module=module,
                                               handlers=handlers)
        return self._t.call(self._apps.CreateDeployment, req).deployment

    def _request(self, task_type: str, payload: Any = None, *, queue: str | None = None,
                 delay: Any = None, run_at: Any = None, idempotency_key: str | None = None,
                 retry: Any = None, timeouts: Any = None) -> tasks_pb2.EnqueueTaskRequest:
        if delay is not None and run_at is not None:
            raise InvalidArgument("give delay or run_at, not both", "INVALID_ARGUMENT")
        req = tasks_pb2.EnqueueTaskRequest(task_type=task_type, queue=queue or "",
                                           idempotency_key=idempotency_key or new_idempotency_key())
        if payload is not None:
            req.payload.CopyFrom(to_value(payload))
        if delay is not None:
            req.delay.CopyFrom(_duration(delay, "delay"))
        if run_at is not None:
            req.run_at.CopyFrom(_timestamp(run_at))
        if retry is not None:
            req.retry.CopyFrom(retry_message(retry))
        if timeouts is not None:
            req.timeouts.CopyFrom(timeouts_message(timeouts))
        return req


def new_idempotency_key() -> str:
    """The key the SDK mints for one logical enqueue call."""
    return f"sdk-{uuid.uuid4()}"


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

    def __enter__(self) -> "AdminClient":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()
