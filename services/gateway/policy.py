"""Retry policy and timeouts: range checks and the resolution order
enqueue override > the handler's policy from the deployment > platform defaults.

The resolved policy is what history stores, so a task keeps the policy it was
enqueued with even if a later deploy changes its handler's. Unset timeouts in
a resolved Timeouts mean unlimited.
"""

from __future__ import annotations

from google.protobuf import duration_pb2

from ratchet.api.apps.v1 import apps_pb2
from ratchet.api.tasks.v1 import tasks_pb2
from ratchet.services.gateway.errors import InvalidArgument

MAX_DURATION_S = 315_576_000_000  # the range of google.protobuf.Duration


def seconds(d: duration_pb2.Duration) -> float:
    return d.seconds + d.nanos / 1e9


def duration(s: float) -> duration_pb2.Duration:
    d = duration_pb2.Duration()
    d.FromNanoseconds(int(round(s * 1e9)))
    return d


DEFAULT_RETRY = tasks_pb2.RetryPolicy(max_attempts=5, base=duration(1), factor=2.0, cap=duration(3600),
                                      jitter=True)
DEFAULT_TIMEOUTS = tasks_pb2.Timeouts(start_to_close=duration(600))

_RETRY_FIELDS = ("max_attempts", "base", "factor", "cap", "jitter")
_TIMEOUT_FIELDS = ("schedule_to_start", "start_to_close", "schedule_to_close")


def check_duration(d: duration_pb2.Duration, where: str) -> float:
    """Seconds of a well-formed Duration, else InvalidArgument naming the field."""
    if not -999_999_999 <= d.nanos <= 999_999_999 or (d.seconds > 0 > d.nanos) or (d.seconds < 0 < d.nanos) \
            or abs(d.seconds) > MAX_DURATION_S:
        raise InvalidArgument(f"{where} is not a valid duration (seconds={d.seconds}, nanos={d.nanos})")
    return seconds(d)


def check_retry(p: tasks_pb2.RetryPolicy, where: str) -> None:
    """Range checks on the fields that are set (an override may set only some)."""
    if p.HasField("max_attempts") and not 1 <= p.max_attempts <= 100:
        raise InvalidArgument(f"{where}.max_attempts must be 1..100, got {p.max_attempts}")
    if p.HasField("factor") and not 1.0 <= p.factor <= 10.0:
        raise InvalidArgument(f"{where}.factor must be 1.0..10.0, got {p.factor}")
    for name in ("base", "cap"):
        if p.HasField(name) and check_duration(getattr(p, name), f"{where}.{name}") <= 0:
            raise InvalidArgument(f"{where}.{name} must be > 0")
    if p.HasField("base") and p.HasField("cap") and seconds(p.cap) < seconds(p.base):
        raise InvalidArgument(f"{where}.cap ({seconds(p.cap)}s) must be >= {where}.base ({seconds(p.base)}s)")


def check_timeouts(t: tasks_pb2.Timeouts, where: str) -> None:
    for name in _TIMEOUT_FIELDS:
        if t.HasField(name) and check_duration(getattr(t, name), f"{where}.{name}") <= 0:
            raise InvalidArgument(f"{where}.{name} must be > 0 (leave it unset for the default)")


def _pick(name: str, *candidates):
    for msg in candidates:
        if msg is not None and msg.HasField(name):
            return getattr(msg, name)
    return None


def resolve(retry: tasks_pb2.RetryPolicy | None, timeouts: tasks_pb2.Timeouts | None,
            handler: apps_pb2.Handler | None, where: str = "retry"
            ) -> tuple[tasks_pb2.RetryPolicy, tasks_pb2.Timeouts]:
    """The effective policy, field by field: override, then handler, then default.

    Raises InvalidArgument when the merge is inconsistent (cap below base).
    """
    h_retry = handler.retry if handler is not None and handler.HasField("retry") else None
    h_timeouts = handler.timeouts if handler is not None and handler.HasField("timeouts") else None
    out_r = tasks_pb2.RetryPolicy()
    for name in _RETRY_FIELDS:
        value = _pick(name, retry, h_retry, DEFAULT_RETRY)
        if isinstance(value, duration_pb2.Duration):
            getattr(out_r, name).CopyFrom(value)
        else:
            setattr(out_r, name, value)
    if seconds(out_r.cap) < seconds(out_r.base):
        raise InvalidArgument(
            f"{where}: cap ({seconds(out_r.cap)}s) must be >= base ({seconds(out_r.base)}s) once the task "
            f"type's policy and the defaults are applied; set both")
    out_t = tasks_pb2.Timeouts()
    for name in _TIMEOUT_FIELDS:
        value = _pick(name, timeouts, h_timeouts, DEFAULT_TIMEOUTS)
        if value is not None:
            getattr(out_t, name).CopyFrom(value)
    return out_r, out_t
