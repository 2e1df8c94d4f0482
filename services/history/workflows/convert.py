"""Workflow requests checked (INVALID_ARGUMENT with what to fix, before anything is read or
written) and the step log in the public shapes."""

from __future__ import annotations

import dataclasses
import json
import re
from typing import Any

from google.protobuf import json_format, struct_pb2

from ratchet.api.tasks.v1 import tasks_pb2
from ratchet.api.workflows.v1 import workflows_pb2
from ratchet.internal.worker.v1 import worker_pb2
from ratchet.services.history import convert, policy
from ratchet.services.history.errors import InvalidArgument
from ratchet.services.history.model import CompletionIn, ErrorInfo, SuspendIn
from ratchet.services.history.store.rows import PendingRow, StepRow

MAX_JSON_BYTES = 256 * 1024
NAME = re.compile(r"[A-Za-z0-9_.:-]{1,200}")
DEFAULT_STEP_PAGE = 100
MAX_STEP_PAGE = 1000

_OPS = {worker_pb2.STEP_OP_BEGIN: "BEGIN", worker_pb2.STEP_OP_COMMIT: "COMMIT"}
KINDS = {worker_pb2.STEP_KIND_STEP: "STEP", worker_pb2.STEP_KIND_VERSION: "VERSION",
         worker_pb2.STEP_KIND_SLEEP: "SLEEP", worker_pb2.STEP_KIND_WAIT: "WAIT",
         worker_pb2.STEP_KIND_PARALLEL: "PARALLEL", worker_pb2.STEP_KIND_CHILD: "CHILD",
         worker_pb2.STEP_KIND_ON_CANCEL: "ON_CANCEL", worker_pb2.STEP_KIND_COMPENSATE: "COMPENSATE"}
MAX_CHILDREN = 10_000
_ON_FAILURE = {worker_pb2.PARALLEL_FAILURE_UNSPECIFIED: "COLLECT", worker_pb2.PARALLEL_FAILURE_COLLECT: "COLLECT",
               worker_pb2.PARALLEL_FAILURE_FAIL_FAST: "FAIL_FAST"}
KIND_VALUES = {v: k for k, v in KINDS.items()}
_PUBLIC_KINDS = {"STEP": workflows_pb2.STEP_KIND_STEP, "VERSION": workflows_pb2.STEP_KIND_VERSION,
                 "SLEEP": workflows_pb2.STEP_KIND_SLEEP, "WAIT": workflows_pb2.STEP_KIND_WAIT,
                 "PARALLEL": workflows_pb2.STEP_KIND_PARALLEL, "CHILD": workflows_pb2.STEP_KIND_CHILD,
                 "ON_CANCEL": workflows_pb2.STEP_KIND_ON_CANCEL, "COMPENSATE": workflows_pb2.STEP_KIND_COMPENSATE}
_PUBLIC_STATES = {"RUNNING": workflows_pb2.STEP_STATE_RUNNING, "COMPLETED": workflows_pb2.STEP_STATE_COMPLETED,
                  "FAILED": workflows_pb2.STEP_STATE_FAILED}


@dataclasses.dataclass(frozen=True)
class StepOp:
    """One checked StepRequest."""

    shard_id: int
    task_id: str
    lease_epoch: int
    op: str  # BEGIN | COMMIT
    position: int
    name: str
    kind: str  # STEP | VERSION | SLEEP | WAIT | PARALLEL | CHILD | ON_CANCEL | COMPENSATE
    result: bytes | None = None  # COMMIT: the value (JSON), when no error; ON_CANCEL: its args (or None)
    error: ErrorInfo | None = None
    fatal: bool = False
    duration_s: float | None = None  # SLEEP: how long; WAIT: the timeout (None: none)
    match_json: str = "{}"  # WAIT: the fields an event's data must contain
    version: int = 0  # VERSION: the branch a first pass records
    child_types: tuple[str, ...] = ()  # PARALLEL/CHILD: each child's task_type, in order
    on_failure: str = "COLLECT"  # PARALLEL/CHILD: COLLECT | FAIL_FAST


@dataclasses.dataclass(frozen=True)
class Event:
    """One checked DeliverEventRequest."""

    shard_id: int
    tenant_id: str
    name: str
    data_json: str  # a JSON object, as text
    workflow_id: str | None  # None: a broadcast to the shard's waits
    event_id: str | None = None  # with workflow_id: a resend with this id is kept once


def name(value: str, where: str) -> str:
    """A step or event name: 1..200 characters of [A-Za-z0-9_.:-]."""
    if not NAME.fullmatch(value):
        raise InvalidArgument(f"{where} must be 1..200 characters of [A-Za-z0-9_.:-], got {value[:240]!r}")
    return value


def json_text(raw: bytes, where: str) -> bytes:
    """One JSON value as sent, at most MAX_JSON_BYTES."""
    if len(raw) > MAX_JSON_BYTES:
        raise InvalidArgument(f"{where} is {len(raw)} bytes; at most {MAX_JSON_BYTES} bytes are stored "
                              "(keep large data outside the workflow and pass a reference)")
    try:
        json.loads(raw.decode())  # (str: no encoding sniffing)
    except (UnicodeDecodeError, json.JSONDecodeError):
        raise InvalidArgument(f"{where} must be JSON text (use null for no value)") from None
    return raw


def json_object(raw: bytes, where: str, *, empty_ok: bool) -> str:
    """A JSON object as text (empty: {} when allowed), at most MAX_JSON_BYTES."""
    if not raw:
        if empty_ok:
            return "{}"
        raise InvalidArgument(f"{where} is required (a JSON object)")
    if not isinstance(json.loads(json_text(raw, where).decode()), dict):
        raise InvalidArgument(f"{where} must be a JSON object, like {{\"order_id\": 7}}")
    return raw.decode()


def _error(p: tasks_pb2.TaskError, where: str) -> ErrorInfo:
    if not p.error_class:
        raise InvalidArgument(f"{where}.error_class is required with an error")
    cut = convert.MAX_ERROR_TEXT
    return ErrorInfo(convert.name(p.error_class, f"{where}.error_class"), p.message[:cut], p.stack[:cut])


def step_request(p: worker_pb2.StepRequest) -> StepOp:
    """Check a StepRequest: its lease, op, kind, position, name and the fields the op needs."""
    op, kind = _OPS.get(p.op), KINDS.get(p.kind)
    if op is None:
        raise InvalidArgument("step.op must be STEP_OP_BEGIN or STEP_OP_COMMIT")
    if kind is None:
        raise InvalidArgument("step.kind must be STEP_KIND_STEP, _VERSION, _SLEEP, _WAIT, _PARALLEL, _CHILD, "
                              "_ON_CANCEL or _COMPENSATE")
    if p.position < 0:
        raise InvalidArgument(f"step.position must be 0 or more, got {p.position}")
    base: dict[str, Any] = dict(
        shard_id=p.lease.shard_id, task_id=convert.task_id(p.lease.task_id, "step.lease.task_id"),
        lease_epoch=p.lease.lease_epoch, op=op, position=p.position, name=name(p.name, "step.name"), kind=kind)
    if op == "COMMIT":
        return _commit(p, base)
    return StepOp(**base, **_begin_fields(p, kind))


def _commit(p: worker_pb2.StepRequest, base: dict[str, Any]) -> StepOp:
    if base["kind"] not in ("STEP", "COMPENSATE"):
        raise InvalidArgument("only a STEP or COMPENSATE is committed: a version, sleep, wait, fan-out or "
                              "on_cancel is decided by its BEGIN")
    if p.HasField("error"):
        return StepOp(**base, error=_error(p.error, "step.error"), fatal=p.fatal)
    return StepOp(**base, result=json_text(p.result_json or b"", "step.result_json"))


def _begin_fields(p: worker_pb2.StepRequest, kind: str) -> dict[str, Any]:
    duration = policy.seconds(p.duration) if p.HasField("duration") else None
    if kind == "SLEEP":
        if duration is None:
            raise InvalidArgument("step.duration is required for a SLEEP (how long to sleep)")
        return {"duration_s": duration}
    if kind == "WAIT":
        if duration is not None and duration < 0:
            raise InvalidArgument("step.duration (the wait's timeout) must not be negative")
        return {"duration_s": duration, "match_json": json_object(p.match_json, "step.match_json", empty_ok=True)}
    if kind == "VERSION":
        if p.version < 0:
            raise InvalidArgument(f"step.version must be 0 or more, got {p.version}")
        return {"version": p.version}
    if kind in ("PARALLEL", "CHILD"):
        return _fanout_fields(p, kind)
    if kind == "ON_CANCEL":  # the args, as JSON text when they are JSON: shown in the log only
        return {"result": json_text(p.result_json, "step.result_json") if p.result_json else None}
    return {}


def _fanout_fields(p: worker_pb2.StepRequest, kind: str) -> dict[str, Any]:
    """A fan-out's children: 1..10,000 (one for a CHILD), each a valid task type and JSON input.
    The payloads are checked, not stored: the gateway creates the children (StartChildren)."""
    n = len(p.children)
    if kind == "CHILD" and n != 1:
        raise InvalidArgument(f"step.children of a CHILD step must hold exactly one child, got {n}")
    if not 1 <= n <= MAX_CHILDREN:
        raise InvalidArgument(f"step.children must hold 1..{MAX_CHILDREN} children, got {n} "
                              "(split a larger fan-out into several steps, or skip an empty one)")
    on_failure = _ON_FAILURE.get(p.on_failure)
    if on_failure is None:
        raise InvalidArgument("step.on_failure must be PARALLEL_FAILURE_COLLECT or _FAIL_FAST")
    types = []
    for i, c in enumerate(p.children):
        types.append(convert.task_type_name(c.task_type, f"step.children[{i}].task_type"))
        json_text(c.payload_json or b"", f"step.children[{i}].payload_json")
    return {"child_types": tuple(types), "on_failure": on_failure}


def completion(p: worker_pb2.Completion, i: int, shard_id: int) -> CompletionIn:
    """One Completion, SUSPENDED ones included (convert.completion takes the four others: the
    ordinary completion path never looks for a suspension)."""
    if p.outcome != worker_pb2.COMPLETION_OUTCOME_SUSPENDED:
        if p.outcome not in (worker_pb2.COMPLETION_OUTCOME_SUCCEEDED, worker_pb2.COMPLETION_OUTCOME_FAILED,
                             worker_pb2.COMPLETION_OUTCOME_CANCELED, worker_pb2.COMPLETION_OUTCOME_CRASHED):
            raise InvalidArgument(f"completions[{i}].outcome must be SUCCEEDED, FAILED, CANCELED, CRASHED "
                                  "or SUSPENDED")
        return convert.completion(p, i, shard_id)
    w = f"completions[{i}]"
    if p.shard_id and p.shard_id != shard_id:
        raise InvalidArgument(f"{w}.shard_id is {p.shard_id} but the request is for shard {shard_id}")
    if p.suspend_position < 0:
        raise InvalidArgument(f"{w}.suspend_position must be 0 or more, got {p.suspend_position}")
    wake = policy.seconds(p.wake_after) if p.HasField("wake_after") else None
    if wake is not None and wake < 0:
        raise InvalidArgument(f"{w}.wake_after must not be negative")
    cp = convert.checkpoint(p.checkpoint_json, f"{w}.checkpoint_json") if p.HasField("checkpoint_json") else None
    return SuspendIn(task_id=convert.task_id(p.task_id, f"{w}.task_id"), lease_epoch=p.lease_epoch,
                     outcome="SUSPENDED", checkpoint=cp, suspend_position=p.suspend_position, wake_after_s=wake)


def event(p) -> Event:
    """Check a DeliverEventRequest."""
    if not p.tenant_id:
        raise InvalidArgument("tenant_id is required")
    wid = convert.task_id(p.workflow_id, "workflow_id") if p.workflow_id else None
    event_id = p.event_id or None
    if event_id is not None:
        if wid is None:
            raise InvalidArgument("event_id is only for an event to one run (set workflow_id)")
        if len(event_id) > 200:
            raise InvalidArgument(f"event_id must be 1..200 characters, got {len(event_id)}")
    return Event(shard_id=p.shard_id, tenant_id=convert.name(p.tenant_id, "tenant_id"), name=name(p.name, "name"),
                 data_json=json_object(p.data_json, "data_json", empty_ok=False), workflow_id=wid,
                 event_id=event_id)


def step_page_size(value: int) -> int:
    """A GetWorkflowSteps page size: 0 means the default."""
    if value == 0:
        return DEFAULT_STEP_PAGE
    if not 1 <= value <= MAX_STEP_PAGE:
        raise InvalidArgument(f"page_size must be 1..{MAX_STEP_PAGE}, got {value}")
    return value


def step_to_proto(s: StepRow) -> workflows_pb2.Step:
    """A step-log row in the public Step shape."""
    out = workflows_pb2.Step(position=s.position, name=s.name, kind=_PUBLIC_KINDS[s.kind],
                             state=_PUBLIC_STATES[s.state], attempt=s.attempt, fatal=s.fatal,
                             started_at=convert.timestamp(s.started_at), finished_at=convert.timestamp(s.finished_at),
                             wake_at=convert.timestamp(s.wake_at))
    result = convert.json_value(s.result)
    if result is not None:
        out.result.CopyFrom(result)
    if s.error_class:
        out.error.CopyFrom(tasks_pb2.TaskError(error_class=s.error_class, message=s.error_message or "",
                                               stack=s.error_stack or ""))
    return out


def pending_to_proto(p: PendingRow) -> workflows_pb2.PendingWait:
    """What a suspended run waits on, in the public shape."""
    out = workflows_pb2.PendingWait(position=p.position, kind=_PUBLIC_KINDS[p.kind], name=p.name,
                                    wake_at=convert.timestamp(p.wake_at))
    if p.match is not None:
        out.match.CopyFrom(json_format.ParseDict(p.match, struct_pb2.Struct()))
    return out
