"""Workflow step operations between a sandbox and the platform
(docs/design/workflows-protocol.md).

A workflow's stub sends a "step" frame for each checkpoint call of the run
(begin or commit a step, a version marker, a sleep, a wait); the agent adds
the lease it holds for the task, which the stub never sees, calls
DispatchService.Step and answers with a "step_reply" frame carrying the same
`call`. The frame comes from customer code's neighbour, so it is checked like
untrusted input (`parse_frame`): a malformed one is a protocol error and the
sandbox is killed, as for a bad checkpoint frame; only well-formed JSON
within the limits ever reaches history.

Step is fenced by the lease and safe to resend (a begin answers what the log
holds, a commit already applied answers DONE), so UNAVAILABLE and
DEADLINE_EXCEEDED are retried within `retry_budget_s`; then the reply is
"error" (the activation fails, retryable). FAILED_PRECONDITION means the
lease is no longer current: "lost", the activation stops and its outcome is
discarded.
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import logging
import math
import random
from collections.abc import Callable
from typing import Any

import grpc
from google.protobuf import duration_pb2

from ratchet.api.tasks.v1 import tasks_pb2
from ratchet.internal.worker.v1 import worker_pb2, worker_pb2_grpc
from ratchet.sandbox.execute import MAX_MESSAGE_CHARS, MAX_RESULT_BYTES, MAX_STACK_CHARS
from ratchet.sandbox.protocol import ProtocolError

log = logging.getLogger(__name__)

RETRYABLE = (grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.DEADLINE_EXCEEDED)
# Pauses between tries, doubling (with jitter) from the first to the last.
BACKOFF_FIRST_S = 0.05
BACKOFF_MAX_S = 1.0
# The shortest deadline a try gets: below it the call could not even reach the dispatcher.
MIN_TRY_S = 0.05
INT32_MAX = 2**31 - 1
INT64_MAX = 2**63 - 1
# protobuf's Duration covers +-10,000 years.
MAX_DURATION_S = 315_576_000_000
MAX_ERROR_CLASS_CHARS = 200

OPS = {"begin": worker_pb2.STEP_OP_BEGIN, "commit": worker_pb2.STEP_OP_COMMIT}
KINDS = {"step": worker_pb2.STEP_KIND_STEP, "version": worker_pb2.STEP_KIND_VERSION,
         "sleep": worker_pb2.STEP_KIND_SLEEP, "wait": worker_pb2.STEP_KIND_WAIT}
KIND_NAMES = {number: name for name, number in KINDS.items()}
STATUSES = {worker_pb2.STEP_STATUS_RUN: "run", worker_pb2.STEP_STATUS_DONE: "done",
            worker_pb2.STEP_STATUS_SUSPEND: "suspend", worker_pb2.STEP_STATUS_MISMATCH: "mismatch",
            worker_pb2.STEP_STATUS_ABSENT: "absent"}


@dataclasses.dataclass(frozen=True)
class StepFrame:
    """A checked step frame: which task and call it answers, and the request without its lease."""

    task_id: str
    call: int
    request: worker_pb2.StepRequest

    def under(self, lease: worker_pb2.LeaseRef) -> worker_pb2.StepRequest:
        """The request the agent sends: this frame's operation under `lease`."""
        request = worker_pb2.StepRequest()
        request.CopyFrom(self.request)
        request.lease.CopyFrom(lease)
        return request


@dataclasses.dataclass(frozen=True)
class Reply:
    """What the stub is told about one step call (the step_reply frame without its address)."""

    status: str  # run | done | suspend | mismatch | absent | lost | error
    attempt: int = 0
    result: str | None = None
    error: dict | None = None
    wake_after_s: float | None = None
    logged_name: str | None = None
    logged_kind: str | None = None
    message: str | None = None

    def frame(self, task_id: str, call: int) -> dict:
        """The step_reply frame answering `call` of `task_id`."""
        return {"type": "step_reply", "task_id": task_id, "call": call, "status": self.status,
                "attempt": self.attempt, "result": self.result, "error": self.error,
                "wake_after_s": self.wake_after_s, "logged_name": self.logged_name,
                "logged_kind": self.logged_kind, "message": self.message}


def lost(message: str) -> Reply:
    """The run's lease is gone: the stub stops the activation at once."""
    return Reply("lost", message=message)


def parse_frame(message: dict) -> StepFrame:
    """The step frame in `message`; ProtocolError naming the first field that breaks the protocol."""
    task_id = message.get("task_id")
    if not isinstance(task_id, str) or not task_id:
        raise ProtocolError("a step frame's task_id must be a non-empty string")
    call = _integer(message, "call", INT64_MAX)
    # str(): a list or an object (unhashable) must be a protocol error, not a TypeError.
    op, kind = OPS.get(str(message.get("op"))), KINDS.get(str(message.get("kind")))
    if op is None:
        raise ProtocolError(f"a step frame's op must be 'begin' or 'commit', got {message.get('op')!r}")
    if kind is None:
        raise ProtocolError(f"a step frame's kind must be one of {sorted(KINDS)}, got {message.get('kind')!r}")
    name = message.get("name")
    if not isinstance(name, str):
        raise ProtocolError("a step frame's name must be a string")
    request = worker_pb2.StepRequest(op=op, kind=kind, position=_integer(message, "position", INT32_MAX),
                                     name=name, fatal=_flag(message, "fatal"))
    _optional_fields(message, request)
    return StepFrame(task_id, call, request)


def _optional_fields(message: dict, request: worker_pb2.StepRequest) -> None:
    result = message.get("result")
    if result is not None:
        request.result_json = _json_text(result, "result")
    if message.get("error") is not None:
        request.error.CopyFrom(task_error(message["error"]))
    duration = message.get("duration_s")
    if duration is not None:
        request.duration.CopyFrom(seconds(duration, "duration_s", minimum=-MAX_DURATION_S))
    match = message.get("match")
    if match is not None:
        request.match_json = _json_text(match, "match", want_object=True)
    if message.get("version") is not None:
        request.version = _integer(message, "version", INT32_MAX)


def _integer(message: dict, field: str, maximum: int) -> int:
    value = message.get(field)
    # bool is an int in Python; in the protocol it is not a number.
    if not isinstance(value, int) or isinstance(value, bool) or not 0 <= value <= maximum:
        raise ProtocolError(f"a step frame's {field} must be an integer in 0..{maximum}, got {value!r}")
    return value


def _flag(message: dict, field: str) -> bool:
    value = message.get(field, False)
    if value is None:
        return False
    if not isinstance(value, bool):
        raise ProtocolError(f"a step frame's {field} must be true or false, got {value!r}")
    return value


def _json_text(value: Any, field: str, *, want_object: bool = False) -> bytes:
    """value (JSON text) as UTF-8, checked: valid JSON, no NaN, within MAX_RESULT_BYTES."""
    if not isinstance(value, str):
        raise ProtocolError(f"a step frame's {field} must be JSON text")
    data = value.encode("utf-8")
    if len(data) > MAX_RESULT_BYTES:
        raise ProtocolError(f"a step frame's {field} is {len(data)} bytes, over the {MAX_RESULT_BYTES}-byte "
                            "limit (the stub must refuse it before sending)")
    try:
        parsed = json.loads(value, parse_constant=_no_constant)
    except ValueError as e:  # json.JSONDecodeError is a ValueError
        raise ProtocolError(f"a step frame's {field} is not valid JSON: {e}") from None
    if want_object and not isinstance(parsed, dict):
        raise ProtocolError(f"a step frame's {field} must be a JSON object")
    return data


def _no_constant(name: str) -> None:
    raise ValueError(f"{name} is not JSON")


def task_error(raw: object) -> tasks_pb2.TaskError:
    """{error_class, message, stack} from a frame as a TaskError, truncated to the limits;
    ProtocolError unless it is an object of strings."""
    if not isinstance(raw, dict):
        raise ProtocolError("error must be an object")
    fields = {k: raw.get(k) or "" for k in ("error_class", "message", "stack")}
    if not all(isinstance(v, str) for v in fields.values()):
        raise ProtocolError("error fields must be strings")
    return tasks_pb2.TaskError(error_class=fields["error_class"][:MAX_ERROR_CLASS_CHARS] or "Exception",
                               message=fields["message"][:MAX_MESSAGE_CHARS],
                               stack=fields["stack"][-MAX_STACK_CHARS:])


def seconds(value: object, field: str, *, minimum: float = 0.0) -> duration_pb2.Duration:
    """A number of seconds from a frame as a Duration; ProtocolError unless it is a finite
    number in [minimum, MAX_DURATION_S]."""
    if (not isinstance(value, (int, float)) or isinstance(value, bool) or not math.isfinite(value)
            or not minimum <= value <= MAX_DURATION_S):
        raise ProtocolError(f"{field} must be a number of seconds in [{minimum:g}, {MAX_DURATION_S}], "
                            f"got {value!r}")
    d = duration_pb2.Duration()
    d.FromNanoseconds(round(value * 1e9))
    return d


def reply_of(response: worker_pb2.StepResponse) -> Reply:
    """The reply for the platform's answer."""
    status = STATUSES.get(response.status)
    if status is None:
        return Reply("error", message=f"the platform answered the step with status {response.status}, "
                                      "which this agent does not know")
    error = None
    if response.HasField("error"):
        error = {"error_class": response.error.error_class, "message": response.error.message,
                 "stack": response.error.stack}
    wake = response.wake_after.ToNanoseconds() / 1e9 if response.HasField("wake_after") else None
    return Reply(status, attempt=response.attempt,
                 result=response.result_json.decode("utf-8", "replace") if response.result_json else None,
                 error=error, wake_after_s=wake, logged_name=response.logged_name or None,
                 logged_kind=KIND_NAMES.get(response.logged_kind))


def reply_of_refusal(err: grpc.aio.AioRpcError) -> Reply:
    """The reply for a Step the platform refused (not worth retrying)."""
    code, details = err.code(), err.details() or ""
    if code == grpc.StatusCode.FAILED_PRECONDITION:
        return lost(details or "the run's lease is not current")
    if code == grpc.StatusCode.INVALID_ARGUMENT:
        return Reply("error", message=details or "the platform refused the step as invalid")
    return Reply("error", message=f"the platform refused the step: {code.name}: {details}")


class StepClient:
    """Sends step operations to the dispatcher with the agent's credential, each try
    bounded by rpc_timeout_s and all of them by retry_budget_s."""

    def __init__(self, *, stub: worker_pb2_grpc.DispatchServiceStub, metadata, rpc_timeout_s: float,
                 retry_budget_s: float):
        self._stub, self._metadata = stub, metadata
        self._rpc_timeout_s, self._retry_budget_s = rpc_timeout_s, retry_budget_s

    async def step(self, request: worker_pb2.StepRequest, held: Callable[[], bool]) -> Reply:
        """The reply for one operation; `held` says whether the agent still holds the lease
        (a lease lost between tries ends them: "lost")."""
        loop = asyncio.get_running_loop()
        give_up_at = loop.time() + self._retry_budget_s
        backoff = BACKOFF_FIRST_S
        while True:
            if not held():
                return lost("the agent no longer holds the run's lease")
            timeout = max(MIN_TRY_S, min(self._rpc_timeout_s, give_up_at - loop.time()))
            try:
                return reply_of(await self._stub.Step(request, timeout=timeout, metadata=self._metadata))
            except grpc.aio.AioRpcError as err:
                if err.code() not in RETRYABLE:
                    return reply_of_refusal(err)
                pause = random.uniform(backoff / 2, backoff)
                if loop.time() + pause >= give_up_at:
                    log.warning("task %s: step at position %d not answered within %.3gs (%s: %s)",
                                request.lease.task_id, request.position, self._retry_budget_s,
                                err.code().name, err.details())
                    return Reply("error", message=f"the platform did not answer the step within "
                                                  f"{self._retry_budget_s:g}s ({err.code().name}: {err.details()})")
                await asyncio.sleep(pause)
                backoff = min(BACKOFF_MAX_S, backoff * 2)
