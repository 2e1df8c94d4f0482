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

Fan-outs (kind "parallel"/"child"): history's RUN names the children's ids;
the agent then starts them with the gateway's ControlService.StartChildren
(idempotent: the ids are minted by history, an existing child is not created
twice) within the same retry budget, and tells the stub to suspend. A refusal
of the children (an unknown handler, a bad input) cannot be helped by a retry:
the reply is "error" with `fatal: true`; a parent that has ended
(FAILED_PRECONDITION) is "lost". A DONE carries every child's outcome
by index in the reply's "children".

Reading ahead: a DONE answer carries StepResponse.ahead, the completed entries logged
right after its position (history's page: at most 500, 1 MiB of results); the reply
passes them on as "ahead" so a resuming stub answers its next checkpoint calls itself,
a round trip per page of the log instead of one per step. `fitted` drops the tail of
"ahead" that would take the frame past the limit: the stub then asks for those entries
as before, so trimming costs only round trips, never correctness.

Compensations: kind "on_cancel" (begin only: it logs a registration) and
"compensate" (begin/commit like "step"); a cancelled run that has compensations
is answered "cancelled" (StepStatus CANCELLED) at the checkpoint where it stops.
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
from ratchet.internal.gateway.v1 import control_pb2, control_pb2_grpc
from ratchet.internal.worker.v1 import worker_pb2, worker_pb2_grpc
from ratchet.sandbox.execute import MAX_MESSAGE_CHARS, MAX_RESULT_BYTES, MAX_STACK_CHARS
from ratchet.sandbox.protocol import HEADER, MAX_FRAME_BYTES, ProtocolError, encode

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
# encode()'s limit when only measuring a frame.
UNLIMITED = 2**62

OPS = {"begin": worker_pb2.STEP_OP_BEGIN, "commit": worker_pb2.STEP_OP_COMMIT}
KINDS = {"step": worker_pb2.STEP_KIND_STEP, "version": worker_pb2.STEP_KIND_VERSION,
         "sleep": worker_pb2.STEP_KIND_SLEEP, "wait": worker_pb2.STEP_KIND_WAIT,
         "parallel": worker_pb2.STEP_KIND_PARALLEL, "child": worker_pb2.STEP_KIND_CHILD,
         "on_cancel": worker_pb2.STEP_KIND_ON_CANCEL, "compensate": worker_pb2.STEP_KIND_COMPENSATE}
FAN_OUT = {worker_pb2.STEP_KIND_PARALLEL, worker_pb2.STEP_KIND_CHILD}
# Kinds that are only begun: a fan-out (its children's ends complete it) and an on_cancel
# (registering a compensation logs it at once; the compensation runs as a COMPENSATE step).
BEGIN_ONLY = FAN_OUT | {worker_pb2.STEP_KIND_ON_CANCEL}
ON_FAILURE = {"collect": worker_pb2.PARALLEL_FAILURE_COLLECT, "fail_fast": worker_pb2.PARALLEL_FAILURE_FAIL_FAST}
# History's bound on one fan-out (workflows-protocol.md); the frame limit bounds the bytes.
MAX_CHILDREN = 10_000
MAX_TASK_TYPE_CHARS = 200
# StartChildren refusals that a retry cannot help: the code names a handler or input that is
# wrong, or an input over the gateway's payload limit (RESOURCE_EXHAUSTED).
CHILDREN_REFUSED = (grpc.StatusCode.INVALID_ARGUMENT, grpc.StatusCode.NOT_FOUND,
                    grpc.StatusCode.RESOURCE_EXHAUSTED)
KIND_NAMES = {number: name for name, number in KINDS.items()}
STATUSES = {worker_pb2.STEP_STATUS_RUN: "run", worker_pb2.STEP_STATUS_DONE: "done",
            worker_pb2.STEP_STATUS_SUSPEND: "suspend", worker_pb2.STEP_STATUS_MISMATCH: "mismatch",
            worker_pb2.STEP_STATUS_ABSENT: "absent", worker_pb2.STEP_STATUS_CANCELLED: "cancelled"}


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

    status: str  # run | done | suspend | mismatch | absent | cancelled | lost | error
    attempt: int = 0
    result: str | None = None
    error: dict | None = None
    wake_after_s: float | None = None
    logged_name: str | None = None
    logged_kind: str | None = None
    message: str | None = None
    # DONE of a fan-out: [{index, child_id, state, result, error}] by index.
    children: list[dict] | None = None
    # With "error": retrying cannot help (the stub fails the activation fatally).
    fatal: bool = False
    # With "cancelled": the position the compensations take from.
    compensate_from: int | None = None
    # With "done": the completed entries logged right after it, [{position, name, kind,
    # attempt, result}] in order (StepResponse.ahead); None when there are none.
    ahead: list[dict] | None = None

    def frame(self, task_id: str, call: int) -> dict:
        """The step_reply frame answering `call` of `task_id`."""
        return {"type": "step_reply", "task_id": task_id, "call": call, "status": self.status,
                "attempt": self.attempt, "result": self.result, "error": self.error,
                "wake_after_s": self.wake_after_s, "logged_name": self.logged_name,
                "logged_kind": self.logged_kind, "message": self.message, "children": self.children,
                "fatal": self.fatal, "compensate_from": self.compensate_from, "ahead": self.ahead}


def fitted(reply: Reply, task_id: str, call: int, limit: int = MAX_FRAME_BYTES) -> dict:
    """reply's frame, with as much of its "ahead" as fits within `limit` bytes (the tail
    dropped: the stub asks for those entries itself); every other field is left as it is."""
    frame = reply.frame(task_id, call)
    if not reply.ahead:
        return frame
    room = limit - _body_bytes({**frame, "ahead": []})
    kept = 0
    for entry in reply.ahead:
        room -= _body_bytes(entry) + 1  # (its body, and the comma that separates it)
        if room < 0:
            break
        kept += 1
    if kept < len(reply.ahead):
        log.info("task %s: %d of %d entries read ahead do not fit the step reply's frame; dropped",
                 task_id, len(reply.ahead) - kept, len(reply.ahead))
    frame["ahead"] = reply.ahead[:kept] or None
    return frame


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
    if op == worker_pb2.STEP_OP_COMMIT and kind == worker_pb2.STEP_KIND_ON_CANCEL:
        raise ProtocolError("an on_cancel step is only begun (it registers a compensation), never committed")
    _optional_fields(message, request)
    _fan_out_fields(message, request)
    return StepFrame(task_id, call, request)


def _fan_out_fields(message: dict, request: worker_pb2.StepRequest) -> None:
    """children and on_failure: a fan-out's BEGIN needs its children; no other frame has any."""
    children, on_failure = message.get("children"), message.get("on_failure")
    if request.kind not in FAN_OUT:
        if children not in (None, []) or on_failure is not None:
            raise ProtocolError(f"a step frame of kind {message.get('kind')!r} carries no children or on_failure")
        return
    if request.op != worker_pb2.STEP_OP_BEGIN:
        raise ProtocolError("a parallel or child step is only begun (its children's ends complete it), "
                            "never committed")
    most = 1 if request.kind == worker_pb2.STEP_KIND_CHILD else MAX_CHILDREN
    if not isinstance(children, list) or not 1 <= len(children) <= most:
        raise ProtocolError(f"a {message.get('kind')} step frame's children must be a list of 1..{most}, got "
                            f"{len(children) if isinstance(children, list) else repr(children)[:40]}")
    request.children.extend(_child(child, i) for i, child in enumerate(children))
    if on_failure is not None:
        if str(on_failure) not in ON_FAILURE:
            raise ProtocolError(f"a step frame's on_failure must be one of {sorted(ON_FAILURE)} or null, "
                                f"got {on_failure!r}")
        request.on_failure = ON_FAILURE[str(on_failure)]


def _child(raw: object, index: int) -> worker_pb2.ChildSpec:
    if not isinstance(raw, dict):
        raise ProtocolError(f"a step frame's children[{index}] must be an object {{task_type, payload}}")
    task_type = raw.get("task_type")
    if not isinstance(task_type, str) or not 0 < len(task_type) <= MAX_TASK_TYPE_CHARS:
        raise ProtocolError(f"a step frame's children[{index}].task_type must be a handler name of "
                            f"1..{MAX_TASK_TYPE_CHARS} characters, got {task_type!r:.60}")
    return worker_pb2.ChildSpec(task_type=task_type,
                                payload_json=_json_text(raw.get("payload"), f"children[{index}].payload"))


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
    wake = response.wake_after.ToNanoseconds() / 1e9 if response.HasField("wake_after") else None
    return Reply(status, attempt=response.attempt,
                 result=response.result_json.decode("utf-8", "replace") if response.result_json else None,
                 error=_error_of(response.error) if response.HasField("error") else None,
                 wake_after_s=wake, logged_name=response.logged_name or None,
                 logged_kind=KIND_NAMES.get(response.logged_kind),
                 children=[_outcome(c) for c in response.children] if response.children else None,
                 compensate_from=response.compensate_from if status == "cancelled" else None,
                 ahead=_ahead(response) if status == "done" else None)


def _body_bytes(message: dict) -> int:
    """How many bytes message takes in a frame body (as the frame encodes it)."""
    return len(encode(message, limit=UNLIMITED)) - HEADER.size


def _ahead(response: worker_pb2.StepResponse) -> list[dict] | None:
    """StepResponse.ahead as the reply names it: kinds lower-case, as frames name them; the
    list ends before an entry of a kind this agent does not know (the stub asks for it)."""
    out: list[dict] = []
    for entry in response.ahead:
        kind = KIND_NAMES.get(entry.kind)
        if kind is None:
            break
        out.append({"position": entry.position, "name": entry.name, "kind": kind, "attempt": entry.attempt,
                    "result": entry.result_json.decode("utf-8", "replace") if entry.result_json else None})
    return out or None


def _error_of(error: tasks_pb2.TaskError) -> dict:
    return {"error_class": error.error_class, "message": error.message, "stack": error.stack}


def _outcome(child: worker_pb2.ChildOutcome) -> dict:
    """One child's end as the reply names it: the state without its TASK_STATE_ prefix."""
    try:
        state = tasks_pb2.TaskState.Name(child.state).removeprefix("TASK_STATE_")
    except ValueError:  # a state newer than this agent: pass its number on, the stub treats it as failed
        state = str(child.state)
    return {"index": child.index, "child_id": child.child_id, "state": state,
            "result": child.result_json.decode("utf-8", "replace") if child.result_json else None,
            "error": _error_of(child.error) if child.HasField("error") else None}


def reply_of_refusal(err: grpc.aio.AioRpcError) -> Reply:
    """The reply for a Step the platform refused (not worth retrying)."""
    code, details = err.code(), err.details() or ""
    if code == grpc.StatusCode.FAILED_PRECONDITION:
        return lost(details or "the run's lease is not current")
    if code == grpc.StatusCode.INVALID_ARGUMENT:
        return Reply("error", message=details or "the platform refused the step as invalid")
    if code == grpc.StatusCode.RESOURCE_EXHAUSTED:
        # An answer over the message limits (a fan-out's outcomes) is as large on every try.
        return Reply("error", fatal=True, message=f"the step's answer is too large to deliver ({details}): "
                                                  "keep the children's results small")
    return Reply("error", message=f"the platform refused the step: {code.name}: {details}")


def reply_of_start_refusal(err: grpc.aio.AioRpcError) -> Reply:
    """The reply for a StartChildren the gateway refused. FAILED_PRECONDITION: the parent
    run has ended (cancelled, expired), so this activation's outcome no longer counts."""
    code, details = err.code(), err.details() or ""
    if code == grpc.StatusCode.FAILED_PRECONDITION:
        return lost(details or "the run has ended: its fan-out starts no children")
    if code in CHILDREN_REFUSED:
        return Reply("error", fatal=True, message=details or f"the platform refused the children ({code.name})")
    return Reply("error", message=f"the platform refused to start the children: {code.name}: {details}")


def too_large(reply: Reply, problem: str) -> Reply:
    """The reply sent instead of one that does not fit in a frame to the sandbox (a fan-out's
    outcomes: every child's result travels in the one reply). The log answers alike next time."""
    count = len(reply.children or [])
    return Reply("error", fatal=True,
                 message=f"the step's answer ({count} children's outcomes) does not fit in a frame to the "
                         f"sandbox ({problem}); keep each child's result small (store large data elsewhere "
                         "and return a reference)")


@dataclasses.dataclass(frozen=True)
class Owner:
    """Whose run a step belongs to: the tenant and app its children are started under."""

    tenant_id: str
    app_id: str


class StepClient:
    """Sends step operations to the dispatcher with the agent's credential, each try
    bounded by rpc_timeout_s and all of them by retry_budget_s; a fan-out's children go
    to the gateway's ControlService (same credential) within the same budget."""

    def __init__(self, *, stub: worker_pb2_grpc.DispatchServiceStub, metadata, rpc_timeout_s: float,
                 retry_budget_s: float, control: control_pb2_grpc.ControlServiceStub | None = None):
        self._stub, self._metadata, self._control = stub, metadata, control
        self._rpc_timeout_s, self._retry_budget_s = rpc_timeout_s, retry_budget_s

    async def step(self, request: worker_pb2.StepRequest, held: Callable[[], bool],
                   owner: Owner | None = None) -> Reply:
        """The reply for one operation; `held` says whether the agent still holds the lease
        (a lease lost between tries ends them: "lost"); `owner` names the run's tenant and app
        (needed to start a fan-out's children)."""
        give_up_at = asyncio.get_running_loop().time() + self._retry_budget_s
        try:
            response = await self._retrying(
                lambda timeout: self._stub.Step(request, timeout=timeout, metadata=self._metadata),
                give_up_at, held, "the step", request)
        except grpc.aio.AioRpcError as err:
            return reply_of_refusal(err)
        except _GaveUp as e:
            return e.reply
        if request.kind in FAN_OUT and response.status == worker_pb2.STEP_STATUS_RUN:
            return await self._start_children(request, response, give_up_at, held, owner)
        return reply_of(response)

    async def _start_children(self, request: worker_pb2.StepRequest, response: worker_pb2.StepResponse,
                              give_up_at: float, held: Callable[[], bool], owner: Owner | None) -> Reply:
        """RUN of a fan-out: create the children history named, then the run suspends until
        their barrier wakes it."""
        ids = list(response.child_ids)
        if len(ids) != len(request.children):
            return Reply("error", message=f"the platform answered the fan-out at position {request.position} with "
                                          f"{len(ids)} child ids for {len(request.children)} children")
        if self._control is None or owner is None:
            return Reply("error", message="this host agent cannot start children (no control service)")
        start = control_pb2.StartChildrenRequest(tenant_id=owner.tenant_id, app_id=owner.app_id,
                                                 parent_id=request.lease.task_id, position=request.position,
                                                 child_ids=ids, children=request.children)
        control = self._control
        try:
            await self._retrying(lambda timeout: control.StartChildren(start, timeout=timeout,
                                                                       metadata=self._metadata),
                                 give_up_at, held, "the children's start", request)
        except grpc.aio.AioRpcError as err:
            return reply_of_start_refusal(err)
        except _GaveUp as e:
            return e.reply
        return Reply("suspend", attempt=response.attempt)

    async def _retrying(self, send: Callable[[float], Any], give_up_at: float, held: Callable[[], bool],
                        what: str, request: worker_pb2.StepRequest) -> Any:
        """send(timeout)'s answer, retried on UNAVAILABLE/DEADLINE_EXCEEDED until give_up_at;
        _GaveUp ("lost" or "error") when the lease goes or the time does; other codes raise."""
        loop = asyncio.get_running_loop()
        backoff = BACKOFF_FIRST_S
        while True:
            if not held():
                raise _GaveUp(lost("the agent no longer holds the run's lease"))
            timeout = max(MIN_TRY_S, min(self._rpc_timeout_s, give_up_at - loop.time()))
            try:
                return await send(timeout)
            except grpc.aio.AioRpcError as err:
                if err.code() not in RETRYABLE:
                    raise
                pause = random.uniform(backoff / 2, backoff)
                if loop.time() + pause >= give_up_at:
                    log.warning("task %s: %s at position %d not answered within %.3gs (%s: %s)",
                                request.lease.task_id, what, request.position, self._retry_budget_s,
                                err.code().name, err.details())
                    raise _GaveUp(Reply("error", message=f"the platform did not answer {what} within "
                                                         f"{self._retry_budget_s:g}s ({err.code().name}: "
                                                         f"{err.details()})")) from None
                await asyncio.sleep(pause)
                backoff = min(BACKOFF_MAX_S, backoff * 2)


class _GaveUp(Exception):
    """The retries of one call ended without an answer; `reply` is what the stub is told."""

    def __init__(self, reply: Reply):
        super().__init__(reply.message)
        self.reply = reply
