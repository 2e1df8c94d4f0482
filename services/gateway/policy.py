"""Retry policy and timeouts: range checks and the resolution order
enqueue override > the handler's policy from the deployment > platform defaults.

The resolved policy is what history stores, so a task keeps the policy it was
enqueued with even if a later deploy changes its handler's. Unset timeouts in
a resolved Timeouts mean unlimited.

Per error class: `non_retryable` (class names) and `rules` (class
name -> ErrorRule) are resolved as wholes, not field by field: an enqueue that
gives either replaces the handler's. The handler's non_retryable is the union
of Handler.non_retryable (where older SDKs put it) and Handler.retry's. A class
may not be both non_retryable and ruled in one policy (which would win is not
obvious); across sources the more specific one wins: a class the enqueue rules
leaves the handler's non_retryable, and one the enqueue lists as non_retryable
leaves the handler's rules.
"""

from __future__ import annotations

import re

from google.protobuf import duration_pb2

from ratchet.api.apps.v1 import apps_pb2
from ratchet.api.tasks.v1 import tasks_pb2
from ratchet.libs.rpc.errors import InvalidArgument

MAX_DURATION_S = 315_576_000_000  # the range of google.protobuf.Duration


def seconds(d: duration_pb2.Duration) -> float:
    return d.seconds + d.nanos / 1e9


def duration(s: float) -> duration_pb2.Duration:
    d = duration_pb2.Duration()
    d.FromNanoseconds(round(s * 1e9))
    return d


DEFAULT_RETRY = tasks_pb2.RetryPolicy(max_attempts=5, base=duration(1), factor=2.0, cap=duration(3600),
                                      jitter=True)
DEFAULT_TIMEOUTS = tasks_pb2.Timeouts(start_to_close=duration(600))

_RETRY_FIELDS = ("max_attempts", "base", "factor", "cap", "jitter")
_RULE_FIELDS = ("max_attempts", "base", "factor", "cap", "jitter")
# Exception class names: a bare name or a dotted "module.Class" path.
CLASS_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_.]{0,199}$")
MAX_CLASSES = 100
_TIMEOUT_FIELDS = ("schedule_to_start", "start_to_close", "schedule_to_close")


def check_duration(d: duration_pb2.Duration, where: str) -> float:
    """Seconds of a well-formed Duration, else InvalidArgument naming the field."""
    if not -999_999_999 <= d.nanos <= 999_999_999 or (d.seconds > 0 > d.nanos) or (d.seconds < 0 < d.nanos) \
            or abs(d.seconds) > MAX_DURATION_S:
        raise InvalidArgument(f"{where} is not a valid duration (seconds={d.seconds}, nanos={d.nanos})")
    return seconds(d)


def _check_backoff(p: tasks_pb2.RetryPolicy | tasks_pb2.ErrorRule, where: str) -> None:
    if p.HasField("max_attempts") and not 1 <= p.max_attempts <= 100:
        raise InvalidArgument(f"{where}.max_attempts must be 1..100, got {p.max_attempts}")
    if p.HasField("factor") and not 1.0 <= p.factor <= 10.0:
        raise InvalidArgument(f"{where}.factor must be 1.0..10.0, got {p.factor}")
    for name in ("base", "cap"):
        if p.HasField(name) and check_duration(getattr(p, name), f"{where}.{name}") <= 0:
            raise InvalidArgument(f"{where}.{name} must be > 0")
    if p.HasField("base") and p.HasField("cap") and seconds(p.cap) < seconds(p.base):
        raise InvalidArgument(f"{where}.cap ({seconds(p.cap)}s) must be >= {where}.base ({seconds(p.base)}s)")


def check_class_name(name: str, where: str) -> None:
    """An exception class name, bare or dotted, else InvalidArgument naming the field."""
    if not CLASS_NAME.match(name):
        raise InvalidArgument(f"{where} holds {name[:80]!r}, which is not an exception class name "
                              f"(e.g. 'ValueError' or 'billing.errors.CardDeclined')")


def check_rule(r: tasks_pb2.ErrorRule, where: str) -> None:
    """An ErrorRule: the policy's ranges; a non_retryable rule sets nothing else."""
    _check_backoff(r, where)
    if r.non_retryable:
        given = [n for n in _RULE_FIELDS if r.HasField(n)]
        if given:
            raise InvalidArgument(f"{where} is non_retryable, so its {', '.join(given)} would never apply: "
                                  f"drop them or set non_retryable to false")


def check_retry(p: tasks_pb2.RetryPolicy, where: str) -> None:
    """Range checks on the fields that are set (an override may set only some), its
    non_retryable class names and its rules."""
    _check_backoff(p, where)
    if len(p.non_retryable) > MAX_CLASSES:
        raise InvalidArgument(f"{where}.non_retryable lists {len(p.non_retryable)} classes; at most {MAX_CLASSES}")
    for i, name in enumerate(p.non_retryable):
        check_class_name(name, f"{where}.non_retryable[{i}]")
    if len(p.rules) > MAX_CLASSES:
        raise InvalidArgument(f"{where}.rules holds {len(p.rules)} rules; at most {MAX_CLASSES}")
    listed = set(p.non_retryable)
    for name in sorted(p.rules):
        check_class_name(name, f"{where}.rules key")
        if name in listed:
            raise InvalidArgument(f"{where}: {name} is both in non_retryable and in rules; keep one of them")
        check_rule(p.rules[name], f"{where}.rules[{name!r}]")


def check_timeouts(t: tasks_pb2.Timeouts, where: str) -> None:
    for name in _TIMEOUT_FIELDS:
        if t.HasField(name) and check_duration(getattr(t, name), f"{where}.{name}") <= 0:
            raise InvalidArgument(f"{where}.{name} must be > 0 (leave it unset for the default)")


def _pick(name: str, *candidates):
    for msg in candidates:
        if msg is not None and msg.HasField(name):
            return getattr(msg, name)
    return None


def _resolve_classes(out: tasks_pb2.RetryPolicy, retry: tasks_pb2.RetryPolicy | None,
                     handler: apps_pb2.Handler | None) -> None:
    """non_retryable and rules: the enqueue's (when given) replace the handler's, as wholes."""
    h_retry = handler.retry if handler is not None else tasks_pb2.RetryPolicy()
    h_names = list(dict.fromkeys([*(handler.non_retryable if handler is not None else ()),
                                  *h_retry.non_retryable]))
    own_names = retry is not None and len(retry.non_retryable) > 0
    own_rules = retry is not None and len(retry.rules) > 0
    names = list(dict.fromkeys(retry.non_retryable)) if own_names else h_names
    rules = retry.rules if own_rules else h_retry.rules
    if own_rules and not own_names:
        names = [n for n in names if n not in rules]
    skip = set(names) if own_names and not own_rules else set()
    out.non_retryable.extend(names)
    for name in sorted(rules):
        if name not in skip:
            out.rules[name].CopyFrom(rules[name])


def _check_merged_rules(out: tasks_pb2.RetryPolicy, where: str) -> None:
    """A rule inherits the fields it leaves unset: the merge must still have cap >= base."""
    for name in sorted(out.rules):
        r = out.rules[name]
        base = seconds(r.base) if r.HasField("base") else seconds(out.base)
        cap = seconds(r.cap) if r.HasField("cap") else seconds(out.cap)
        if cap < base:
            raise InvalidArgument(f"{where}.rules[{name!r}]: cap ({cap:g}s) would be smaller than base ({base:g}s) "
                                  f"once the policy's fields are inherited; set both on the rule")


def resolve(retry: tasks_pb2.RetryPolicy | None, timeouts: tasks_pb2.Timeouts | None,
            handler: apps_pb2.Handler | None, where: str = "retry"
            ) -> tuple[tasks_pb2.RetryPolicy, tasks_pb2.Timeouts]:
    """The effective policy, field by field: override, then handler, then default;
    non_retryable and rules as wholes (see the module docstring).

    Raises InvalidArgument when the merge is inconsistent (cap below base). Each call merges
    anew: what an enqueue without overrides gets is resolved once per deployed handler, by the
    deployment cache (deployments.register).
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
    _resolve_classes(out_r, retry, handler)
    _check_merged_rules(out_r, where)
    out_t = tasks_pb2.Timeouts()
    for name in _TIMEOUT_FIELDS:
        value = _pick(name, timeouts, h_timeouts, DEFAULT_TIMEOUTS)
        if value is not None:
            getattr(out_t, name).CopyFrom(value)
    return out_r, out_t
