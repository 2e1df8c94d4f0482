"""Edge validation of CreateScheduleRequest (pure, no I/O): every rule that can
refuse a schedule, so a bad one is never stored. Messages say what to fix."""

from __future__ import annotations

import dataclasses
import datetime as dt
import hashlib
import re

from ratchet.api.schedules.v1 import schedules_pb2 as spb
from ratchet.services.cron import convert
from ratchet.services.cron.cronexpr import CronError, CronExpr
from ratchet.services.cron.errors import InvalidArgument
from ratchet.services.cron.occurrences import validate as validate_expression

MAX_PAYLOAD_BYTES = 256 * 1024
MAX_CATCHUP_S = 366 * 86400
_QUEUE = re.compile(r"^[A-Za-z0-9_.\-]{1,64}$")
_PRINTABLE = re.compile(r"^[\x20-\x7e]{1,200}$")


@dataclasses.dataclass(frozen=True)
class ValidSchedule:
    """A create request that passed every check, normalised for storage."""

    cron: str
    timezone: str
    expr: CronExpr
    tz: dt.tzinfo
    template: dict
    overlap_policy: str
    catchup_window_ms: int
    request_id: str | None
    fingerprint: str


def fingerprint(req: spb.CreateScheduleRequest) -> str:
    """sha256 of the request without its request_id: a retry has the same one."""
    copy = spb.CreateScheduleRequest()
    copy.CopyFrom(req)
    copy.request_id = ""
    return hashlib.sha256(copy.SerializeToString(deterministic=True)).hexdigest()


def validate_create(req: spb.CreateScheduleRequest, now: dt.datetime, min_interval_s: float) -> ValidSchedule:
    """Check a create request; InvalidArgument names the field and the fix."""
    if req.request_id and not _PRINTABLE.fullmatch(req.request_id):
        raise InvalidArgument("request_id must be 1..200 printable ASCII characters")
    timezone = req.timezone.strip() or "UTC"
    try:
        expr, tz = validate_expression(req.cron, timezone, now, min_interval_s)
    except CronError as e:
        raise InvalidArgument(str(e)) from None
    policy = _policy(req.overlap_policy)
    window_ms = _catchup_ms(req)
    _check_template(req)
    return ValidSchedule(cron=expr.text, timezone=timezone, expr=expr, tz=tz,
                         template=convert.template_json(req.task_template), overlap_policy=policy,
                         catchup_window_ms=window_ms, request_id=req.request_id or None,
                         fingerprint=fingerprint(req))


def _policy(value: int) -> str:
    if value == spb.OVERLAP_POLICY_UNSPECIFIED:
        return "ALLOW"
    name = convert.POLICY_NAMES.get(value)
    if name is None:
        raise InvalidArgument(f"overlap_policy {value} is not one of OVERLAP_POLICY_ALLOW, "
                              f"OVERLAP_POLICY_SKIP, OVERLAP_POLICY_CANCEL_PREVIOUS, OVERLAP_POLICY_BUFFER_ONE")
    return name


def _catchup_ms(req: spb.CreateScheduleRequest) -> int:
    if not req.HasField("catchup_window"):
        return 0
    d = req.catchup_window
    if d.seconds < 0 or d.nanos < 0:
        raise InvalidArgument(f"catchup_window must be >= 0 (0 means no catch-up), got {d.ToJsonString()}")
    if d.seconds > MAX_CATCHUP_S:
        raise InvalidArgument(f"catchup_window must be at most {MAX_CATCHUP_S // 86400} days, got "
                              f"{d.ToJsonString()}")
    return d.ToMilliseconds()


def _check_template(req: spb.CreateScheduleRequest) -> None:
    t = req.task_template
    if not req.HasField("task_template") or not t.task_type:
        raise InvalidArgument("task_template.task_type is required: name a handler of the app's deployment")
    if not _PRINTABLE.fullmatch(t.task_type):
        raise InvalidArgument("task_template.task_type must be 1..200 printable ASCII characters")
    if t.queue and not _QUEUE.fullmatch(t.queue):
        raise InvalidArgument(f"task_template.queue {t.queue!r} must be 1..64 of A-Z a-z 0-9 _ . -")
    if t.HasField("payload") and t.payload.ByteSize() > MAX_PAYLOAD_BYTES:
        raise InvalidArgument(f"task_template.payload is over {MAX_PAYLOAD_BYTES // 1024} KiB; keep payloads "
                              f"small and pass references to large data")
