"""Conversions between the client's Python values and the wire messages.

Inputs are forgiving (durations as "30s", seconds or timedeltas; times as
datetimes, epoch seconds or ISO 8601; states by short name) and every refusal
is an InvalidArgument naming the argument. Outputs are the records in
ratchet.models.
"""

from __future__ import annotations

import datetime as dt
import json
from collections.abc import Iterable
from typing import Any, cast

from google.protobuf import duration_pb2, json_format, struct_pb2, timestamp_pb2

from ratchet._transport import invalid
from ratchet.api.schedules.v1 import schedules_pb2
from ratchet.api.tasks.v1 import breakers_pb2, tasks_pb2
from ratchet.api.workflows.v1 import workflows_pb2
from ratchet.libs.durations import parse_duration
from ratchet.models import (
    OVERLAP_POLICIES,
    AttemptInfo,
    BreakerCrash,
    BreakerInfo,
    ChildRun,
    ItemFailure,
    OperationInfo,
    PendingWait,
    ScheduleInfo,
    TaskError,
    TaskInfo,
    WorkflowInfo,
    WorkflowStep,
)


# -- in ----------------------------------------------------------------------
def seconds(value: Any, what: str) -> float:
    """Seconds in a duration given as a timedelta, a number or text like "30s"."""
    if isinstance(value, dt.timedelta):
        return value.total_seconds()
    try:
        return parse_duration(value)
    except ValueError as e:
        raise invalid(f"{what}: {e}") from None


def duration(value: Any, what: str) -> duration_pb2.Duration:
    d = duration_pb2.Duration()
    d.FromNanoseconds(round(seconds(value, what) * 1e9))
    return d


def timestamp(value: Any, what: str = "run_at") -> timestamp_pb2.Timestamp:
    """A time as a datetime (naive means local time), epoch seconds or ISO 8601."""
    if isinstance(value, str):
        try:
            value = dt.datetime.fromisoformat(value)
        except ValueError:
            raise invalid(f"{what} {value!r} is not an ISO 8601 time") from None
    if isinstance(value, bool) or not isinstance(value, (dt.datetime, int, float)):
        raise invalid(f"{what} must be a datetime, epoch seconds or ISO 8601 text, got {value!r}")
    secs = value.timestamp() if isinstance(value, dt.datetime) else float(value)
    ts = timestamp_pb2.Timestamp()
    ts.FromNanoseconds(round(secs * 1e9))
    return ts


def moment(value: Any, what: str, now: dt.datetime | None = None) -> timestamp_pb2.Timestamp:
    """A bound of a search: what timestamp() takes, or a time ago (a timedelta, or "2h")."""
    now = now or dt.datetime.now(dt.UTC)
    if isinstance(value, dt.timedelta):
        return timestamp(now - value, what)
    if isinstance(value, str):
        try:
            dt.datetime.fromisoformat(value)
        except ValueError:
            try:
                return timestamp(now - dt.timedelta(seconds=parse_duration(value)), what)
            except ValueError:
                raise invalid(f"{what} {value!r} is neither an ISO 8601 time nor a duration ago like "
                              f"'2h' or '7d'") from None
    return timestamp(value, what)


# One encoder for every call: json.dumps with any non-default argument builds a new one per call.
_COMPACT = json.JSONEncoder(separators=(",", ":"), ensure_ascii=False, allow_nan=False)
# Its C core called directly (what _COMPACT.encode reaches through two Python frames): 1/3 of
# the cost for a small payload. No circular check (a cycle ends in RecursionError instead).
# (c_make_encoder is the C accelerator json.encoder uses itself; typeshed leaves it out.)
_C_MAKE_ENCODER = getattr(json.encoder, "c_make_encoder", None)
_C_COMPACT = (_C_MAKE_ENCODER(None, _COMPACT.default, json.encoder.encode_basestring, None, ":", ",",
                              False, False, False)
              if _C_MAKE_ENCODER is not None else None)


def to_json(payload: Any, what: str = "payload") -> str:
    """Any JSON value as compact JSON text (EnqueueTaskRequest.payload_json): one json.dumps,
    where a protobuf Value costs a dumps, a loads and a ParseDict."""
    try:
        if _C_COMPACT is not None and not isinstance(payload, str):
            return "".join(_C_COMPACT(payload, 0))
        return _COMPACT.encode(payload)
    except RecursionError:
        raise invalid(f"{what} nests too deeply or contains itself") from None
    except (TypeError, ValueError) as e:
        raise invalid(f"{what} must be JSON-serializable: {e}") from None


def to_value(payload: Any, what: str = "payload") -> struct_pb2.Value:
    """Any JSON value as a protobuf Value (tuples become lists)."""
    try:
        plain = json.loads(json.dumps(payload, allow_nan=False))
    except (TypeError, ValueError) as e:
        raise invalid(f"{what} must be JSON-serializable: {e}") from None
    return json_format.ParseDict(plain, struct_pb2.Value())


def _field(policy: Any, name: str) -> Any:
    """policy[name] / policy.name, also accepting the `<name>_s` spelling."""
    for key in (name, f"{name}_s"):
        value = policy.get(key) if isinstance(policy, dict) else getattr(policy, key, None)
        if value is not None:
            return value
    return None


def _backoff_fields(msg: Any, policy: Any, where: str) -> None:
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
            getattr(msg, name).CopyFrom(duration(v, f"{where}.{name}"))


def error_rule(rule: Any, where: str) -> tasks_pb2.ErrorRule:
    """An ErrorRule from "fatal", a RetryPolicy, or describe's dict form."""
    if isinstance(rule, str):
        if rule.strip().lower() != "fatal":
            raise invalid(f"{where} must be 'fatal', a RetryPolicy or a dict, got {rule!r}")
        return tasks_pb2.ErrorRule(non_retryable=True)
    if hasattr(rule, "describe_rule"):
        rule = rule.describe_rule()
    if not isinstance(rule, dict):
        raise invalid(f"{where} must be 'fatal', a RetryPolicy or a dict, got {rule!r}")
    msg = tasks_pb2.ErrorRule(non_retryable=bool(rule.get("non_retryable")))
    _backoff_fields(msg, rule, where)
    return msg


def retry_message(policy: Any) -> tasks_pb2.RetryPolicy:
    """A RetryPolicy proto from a dict or a ratchet.RetryPolicy; unset fields stay unset.

    Carries non_retryable and rules (error class -> "fatal", a RetryPolicy, or
    the dict describe prints) too.
    """
    if hasattr(policy, "describe"):
        policy = policy.describe()
    msg = tasks_pb2.RetryPolicy()
    _backoff_fields(msg, policy, "retry")
    names = _field(policy, "non_retryable") or ()
    msg.non_retryable.extend([names] if isinstance(names, str) else list(names))
    rules = _field(policy, "rules") or {}
    if not isinstance(rules, dict):
        raise invalid(f"retry.rules must be a dict of error class -> rule, got {rules!r}")
    for name, rule in rules.items():
        key = name.__name__ if isinstance(name, type) else str(name)
        msg.rules[key].CopyFrom(error_rule(rule, f"retry.rules[{key!r}]"))
    return msg


def timeouts_message(timeouts: Any) -> tasks_pb2.Timeouts:
    """A Timeouts proto from a dict of durations (`start_to_close` or `start_to_close_s`)."""
    msg = tasks_pb2.Timeouts()
    for name in ("schedule_to_start", "start_to_close", "schedule_to_close"):
        if (v := _field(timeouts, name)) is not None:
            getattr(msg, name).CopyFrom(duration(v, f"timeouts.{name}"))
    return msg


# (The generated stubs type an enum's Value() as int, its fields as the enum: hence the casts.)
def task_state(name: Any) -> tasks_pb2.TaskState:
    """A TaskState from "FAILED", "failed" or "TASK_STATE_FAILED"."""
    text = str(name).strip().upper()
    try:
        value = tasks_pb2.TaskState.Value(text if text.startswith("TASK_STATE_") else f"TASK_STATE_{text}")
        return cast(tasks_pb2.TaskState, value)
    except ValueError:
        names = [n.removeprefix("TASK_STATE_") for n in tasks_pb2.TaskState.keys()][1:]  # noqa: SIM118 - a protobuf enum wrapper is not iterable
        raise invalid(f"unknown task state {name!r}; use one of {', '.join(names)}") from None


def event_data(data: Any, what: str = "data") -> struct_pb2.Struct:
    """An event's data: a dict of JSON values (None: {}), as a Struct."""
    if data is None:
        return struct_pb2.Struct()
    if not isinstance(data, dict):
        raise invalid(f"{what} must be a dict (a JSON object), got {type(data).__name__}")
    return to_value(data, what).struct_value


def task_filter(state: Any = None, task_type: str | None = None, queue: str | None = None,
                error_class: str | None = None, since: Any = None, until: Any = None) -> tasks_pb2.TaskFilter:
    """A TaskFilter; `state` is one name or several."""
    states: Iterable[Any] = () if state is None else [state] if isinstance(state, str) else state
    msg = tasks_pb2.TaskFilter(states=[task_state(s) for s in states], task_type=task_type or "",
                               queue=queue or "", error_class=error_class or "")
    if since is not None:
        msg.since.CopyFrom(moment(since, "since"))
    if until is not None:
        msg.until.CopyFrom(moment(until, "until"))
    return msg


def overlap_policy(name: str) -> schedules_pb2.OverlapPolicy:
    """An OverlapPolicy from "allow", "skip", "cancel_previous" or "buffer_one"."""
    text = str(name).strip().lower().replace("-", "_")
    if text not in OVERLAP_POLICIES:
        raise invalid(f"overlap_policy must be one of {', '.join(OVERLAP_POLICIES)}, got {name!r}")
    return cast(schedules_pb2.OverlapPolicy, schedules_pb2.OverlapPolicy.Value(f"OVERLAP_POLICY_{text.upper()}"))


# -- out ---------------------------------------------------------------------
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


def _when(msg: Any, name: str) -> dt.datetime | None:
    return getattr(msg, name).ToDatetime(tzinfo=dt.UTC) if msg.HasField(name) else None


def _value(msg: Any, name: str) -> Any:
    return from_value(getattr(msg, name)) if msg.HasField(name) else None


def _error(msg: Any) -> TaskError | None:
    if not msg.HasField("error"):
        return None
    return TaskError(msg.error.error_class, msg.error.message, msg.error.stack)


def _dict(msg: Any) -> dict:
    return json_format.MessageToDict(msg, preserving_proto_field_name=True)


def _enum(enum: Any, number: int, prefix: str) -> str:
    return enum.Name(number).removeprefix(prefix)


def task_info(t: tasks_pb2.Task) -> TaskInfo:
    """TaskInfo from the wire form."""
    attempts = [AttemptInfo(a.attempt, a.lease_epoch, a.worker_id,
                            _enum(tasks_pb2.AttemptOutcome, a.outcome, "ATTEMPT_OUTCOME_"),
                            _when(a, "started_at"), _when(a, "finished_at"), _error(a)) for a in t.attempts]
    return TaskInfo(
        task_id=t.task_id, task_type=t.task_type, queue=t.queue,
        state=_enum(tasks_pb2.TaskState, t.state, "TASK_STATE_"),
        attempt=t.attempt, max_attempts=t.max_attempts, version=t.version,
        payload=_value(t, "payload"), result=_value(t, "result"),
        error=_error(t), idempotency_key=t.idempotency_key, cancel_requested=t.cancel_requested,
        created_at=_when(t, "created_at"), run_at=_when(t, "run_at"), updated_at=_when(t, "updated_at"),
        started_at=_when(t, "started_at"), finished_at=_when(t, "finished_at"),
        retry=_dict(t.retry), timeouts=_dict(t.timeouts), attempts=attempts,
        schedule_id=t.schedule_id or None, scheduled_time=_when(t, "scheduled_time"),
        checkpoint=_value(t, "checkpoint"), retried_as=t.retried_as or None, retry_of=t.retry_of or None,
        parent_workflow_id=t.parent_workflow_id or None)


def operation_info(op: tasks_pb2.BulkOperation) -> OperationInfo:
    """OperationInfo from the wire form."""
    return OperationInfo(
        operation_id=op.operation_id, kind=_enum(tasks_pb2.BulkOperationKind, op.kind, "BULK_OPERATION_KIND_"),
        state=_enum(tasks_pb2.BulkOperationState, op.state, "BULK_OPERATION_STATE_"), filter=_dict(op.filter),
        matched=op.matched, processed=op.processed, succeeded=op.succeeded, failed=op.failed,
        skipped=op.skipped, failures=[ItemFailure(f.task_id, f.reason) for f in op.failures],
        created_at=_when(op, "created_at"), finished_at=_when(op, "finished_at"))


def schedule_info(s: schedules_pb2.Schedule) -> ScheduleInfo:
    """ScheduleInfo from the wire form."""
    t = s.task_template
    return ScheduleInfo(
        schedule_id=s.schedule_id, cron=s.cron, timezone=s.timezone, task_type=t.task_type,
        payload=_value(t, "payload"), queue=t.queue, retry=_dict(t.retry), timeouts=_dict(t.timeouts),
        overlap_policy=_enum(schedules_pb2.OverlapPolicy, s.overlap_policy, "OVERLAP_POLICY_").lower(),
        catchup_window_s=(s.catchup_window.ToTimedelta().total_seconds() if s.HasField("catchup_window")
                          else None),
        state=_enum(schedules_pb2.ScheduleState, s.state, "SCHEDULE_STATE_"),
        next_fire_time=_when(s, "next_fire_time"), last_fire_time=_when(s, "last_fire_time"),
        last_task_id=s.last_task_id or None, created_at=_when(s, "created_at"), updated_at=_when(s, "updated_at"))


def breaker_info(b: breakers_pb2.Breaker) -> BreakerInfo:
    """BreakerInfo from the wire form."""
    return BreakerInfo(
        task_type=b.task_type, state=_enum(breakers_pb2.BreakerState, b.state, "BREAKER_STATE_"),
        reason=b.reason, crashes=b.crashes, opened_at=_when(b, "opened_at"), probe_at=_when(b, "probe_at"),
        last_crashes=[BreakerCrash(c.task_id, c.error_class, c.message, _when(c, "at")) for c in b.last_crashes])


def step_info(s: workflows_pb2.Step) -> WorkflowStep:
    """WorkflowStep from the wire form."""
    return WorkflowStep(
        position=s.position, name=s.name, kind=_enum(workflows_pb2.StepKind, s.kind, "STEP_KIND_"),
        state=_enum(workflows_pb2.StepState, s.state, "STEP_STATE_"), attempt=s.attempt,
        result=_value(s, "result"), error=_error(s), fatal=s.fatal, started_at=_when(s, "started_at"),
        finished_at=_when(s, "finished_at"), wake_at=_when(s, "wake_at"), child_count=s.child_count,
        children_done=s.children_done)


def child_run(c: workflows_pb2.ChildRun) -> ChildRun:
    """ChildRun from the wire form (state "" for a child not created yet)."""
    return ChildRun(index=c.index, child_id=c.child_id, task_type=c.task_type,
                    state=_enum(tasks_pb2.TaskState, c.state, "TASK_STATE_") if c.state else "",
                    result=_value(c, "result"), error=_error(c))


def pending_wait(p: workflows_pb2.PendingWait) -> PendingWait:
    """PendingWait from the wire form."""
    return PendingWait(position=p.position, kind=_enum(workflows_pb2.StepKind, p.kind, "STEP_KIND_"), name=p.name,
                       match=_ints(json_format.MessageToDict(p.match)) if p.HasField("match") else None,
                       wake_at=_when(p, "wake_at"))


def workflow_info(w: workflows_pb2.Workflow, steps: Iterable[workflows_pb2.Step] = (),
                  next_step_page_token: str = "") -> WorkflowInfo:
    """WorkflowInfo from the wire form (with a page of its steps, from GetWorkflow)."""
    return WorkflowInfo(
        workflow_id=w.workflow_id, workflow_type=w.workflow_type,
        state=_enum(tasks_pb2.TaskState, w.state, "TASK_STATE_"), input=_value(w, "input"),
        result=_value(w, "result"), error=_error(w), activations=w.activations, idempotency_key=w.idempotency_key,
        cancel_requested=w.cancel_requested, created_at=_when(w, "created_at"), updated_at=_when(w, "updated_at"),
        finished_at=_when(w, "finished_at"), step_count=w.step_count,
        pending=pending_wait(w.pending) if w.HasField("pending") else None,
        steps=[step_info(s) for s in steps], next_step_page_token=next_step_page_token or None)
