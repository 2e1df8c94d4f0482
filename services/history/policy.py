"""Retry policy and timeouts: their stored form (jsonb in seconds), the
platform defaults, conversion from/to the public protos, and backoff math."""

from __future__ import annotations

import dataclasses
import random
from collections.abc import Callable

from google.protobuf import duration_pb2

from ratchet.api.tasks.v1 import tasks_pb2
from ratchet.services.history.errors import InvalidArgument

MAX_ATTEMPTS_LIMIT = 100


@dataclasses.dataclass(frozen=True)
class Retry:
    """A resolved retry policy (durations in seconds)."""

    max_attempts: int = 5
    base_s: float = 1.0
    factor: float = 2.0
    cap_s: float = 3600.0
    jitter: bool = True

    def to_json(self) -> dict:
        """The stored jsonb form: only the fields that differ from STORED_RETRY_BASE (the default
        policy is stored as {}: less in every task row, its WAL and the full-page images of
        its page)."""
        return {k: v for k, v in dataclasses.asdict(self).items() if v != STORED_RETRY_BASE[k]}

    @classmethod
    def from_json(cls, data: dict) -> Retry:
        """From the stored jsonb form: an absent field is STORED_RETRY_BASE's (rows written in
        the older form store every field, and read the same)."""
        return cls(**{k: data.get(k, v) for k, v in STORED_RETRY_BASE.items()})


# What an absent field of a stored retry policy means. Part of the stored format, like a column
# default written into every row: never change a value here (the platform's defaults for new
# tasks are Retry's field defaults, which may change; rows already written keep their meaning).
STORED_RETRY_BASE: dict = {"max_attempts": 5, "base_s": 1.0, "factor": 2.0, "cap_s": 3600.0, "jitter": True}


@dataclasses.dataclass(frozen=True)
class Timeouts:
    """Resolved timeouts in seconds; None means unlimited."""

    schedule_to_start_s: float | None = None
    start_to_close_s: float | None = 600.0
    schedule_to_close_s: float | None = None

    def to_json(self) -> dict:
        """The stored jsonb form. An unset schedule_to_start or schedule_to_close is left out
        rather than stored as null, and so is a start_to_close equal to STORED_START_TO_CLOSE_S
        (the default timeouts are stored as {}: less in every task row and its WAL); an
        unlimited start_to_close is stored as null."""
        out = {k: v for k, v in dataclasses.asdict(self).items() if v is not None}
        if self.start_to_close_s is None:
            out["start_to_close_s"] = None
        elif self.start_to_close_s == STORED_START_TO_CLOSE_S:
            del out["start_to_close_s"]
        return out

    @classmethod
    def from_json(cls, data: dict) -> Timeouts:
        """From the stored jsonb form: an absent schedule_to_* key is unset (None), an absent
        start_to_close is STORED_START_TO_CLOSE_S; rows written in the older form store every key."""
        return cls(schedule_to_start_s=data.get("schedule_to_start_s"),
                   start_to_close_s=data.get("start_to_close_s", STORED_START_TO_CLOSE_S),
                   schedule_to_close_s=data.get("schedule_to_close_s"))


# What an absent start_to_close of stored timeouts means: part of the stored format (the lease
# statement in store/tasks.sql reads the same 600); never change it.
STORED_START_TO_CLOSE_S = 600.0


def seconds(d: duration_pb2.Duration) -> float:
    """A Duration in seconds."""
    return d.seconds + d.nanos / 1e9


def duration(s: float) -> duration_pb2.Duration:
    """Seconds as a Duration (negative values clamp to zero)."""
    out = duration_pb2.Duration()
    out.FromNanoseconds(max(0, round(s * 1e9)))
    return out


def _positive(where: str, d: duration_pb2.Duration) -> float:
    value = seconds(d)
    if value <= 0:
        raise InvalidArgument(f"{where} must be a positive duration, got {value}s")
    return value


def retry_from_proto(p: tasks_pb2.RetryPolicy, where: str = "retry") -> Retry:
    """Resolve a RetryPolicy; unset fields take the platform defaults."""
    d = Retry()
    max_attempts = p.max_attempts if p.HasField("max_attempts") else d.max_attempts
    if not 1 <= max_attempts <= MAX_ATTEMPTS_LIMIT:
        raise InvalidArgument(f"{where}.max_attempts must be 1..{MAX_ATTEMPTS_LIMIT}, got {max_attempts}")
    factor = p.factor if p.HasField("factor") else d.factor
    if not 1.0 <= factor <= 10.0:
        raise InvalidArgument(f"{where}.factor must be 1.0..10.0, got {factor}")
    base = seconds(p.base) if p.HasField("base") else d.base_s
    cap = seconds(p.cap) if p.HasField("cap") else d.cap_s
    if base < 0 or cap < 0:
        raise InvalidArgument(f"{where}.base and {where}.cap must not be negative")
    jitter = p.jitter if p.HasField("jitter") else d.jitter
    return Retry(max_attempts=max_attempts, base_s=base, factor=factor, cap_s=cap, jitter=jitter)


def retry_to_proto(r: Retry, non_retryable=(), rules: dict[str, Rule] | None = None) -> tasks_pb2.RetryPolicy:
    """A resolved policy (with its non-retryable classes and rules) in the public RetryPolicy shape."""
    out = tasks_pb2.RetryPolicy(max_attempts=r.max_attempts, base=duration(r.base_s), factor=r.factor,
                                cap=duration(r.cap_s), jitter=r.jitter, non_retryable=sorted(non_retryable))
    for name, rule in (rules or {}).items():
        out.rules[name].CopyFrom(rule_to_proto(rule))
    return out


@dataclasses.dataclass(frozen=True)
class Rule:
    """How one error class is retried; None fields inherit from the task's policy."""

    non_retryable: bool = False
    max_attempts: int | None = None
    base_s: float | None = None
    factor: float | None = None
    cap_s: float | None = None
    jitter: bool | None = None

    def to_json(self) -> dict:
        """The stored jsonb form (unset fields left out)."""
        out = {k: v for k, v in dataclasses.asdict(self).items() if v is not None}
        if not self.non_retryable:
            del out["non_retryable"]
        return out

    @classmethod
    def from_json(cls, data: dict) -> Rule:
        """From the stored jsonb form."""
        return cls(**{f.name: data[f.name] for f in dataclasses.fields(cls) if f.name in data})

    def apply(self, policy: Retry) -> Retry:
        """The policy with this rule's overrides."""
        return Retry(
            max_attempts=policy.max_attempts if self.max_attempts is None else self.max_attempts,
            base_s=policy.base_s if self.base_s is None else self.base_s,
            factor=policy.factor if self.factor is None else self.factor,
            cap_s=policy.cap_s if self.cap_s is None else self.cap_s,
            jitter=policy.jitter if self.jitter is None else self.jitter)


def rule_from_proto(p: tasks_pb2.ErrorRule, where: str) -> Rule:
    """Validate one ErrorRule; unset fields stay None (inherit)."""
    max_attempts = p.max_attempts if p.HasField("max_attempts") else None
    if max_attempts is not None and not 1 <= max_attempts <= MAX_ATTEMPTS_LIMIT:
        raise InvalidArgument(f"{where}.max_attempts must be 1..{MAX_ATTEMPTS_LIMIT}, got {max_attempts}")
    factor = p.factor if p.HasField("factor") else None
    if factor is not None and not 1.0 <= factor <= 10.0:
        raise InvalidArgument(f"{where}.factor must be 1.0..10.0, got {factor}")
    base = seconds(p.base) if p.HasField("base") else None
    cap = seconds(p.cap) if p.HasField("cap") else None
    if (base is not None and base < 0) or (cap is not None and cap < 0):
        raise InvalidArgument(f"{where}.base and {where}.cap must not be negative")
    return Rule(non_retryable=p.non_retryable, max_attempts=max_attempts, base_s=base, factor=factor,
                cap_s=cap, jitter=p.jitter if p.HasField("jitter") else None)


def rule_to_proto(r: Rule) -> tasks_pb2.ErrorRule:
    """A stored rule in the public ErrorRule shape (inherited fields unset)."""
    out = tasks_pb2.ErrorRule(non_retryable=r.non_retryable)
    if r.max_attempts is not None:
        out.max_attempts = r.max_attempts
    if r.base_s is not None:
        out.base.CopyFrom(duration(r.base_s))
    if r.factor is not None:
        out.factor = r.factor
    if r.cap_s is not None:
        out.cap.CopyFrom(duration(r.cap_s))
    if r.jitter is not None:
        out.jitter = r.jitter
    return out


def rules_from_json(data: dict | None) -> dict[str, Rule]:
    """Stored retry_rules (NULL when none) -> {error_class: Rule}."""
    return {k: Rule.from_json(v) for k, v in (data or {}).items()}


def timeouts_from_proto(p: tasks_pb2.Timeouts, where: str = "timeouts") -> Timeouts:
    """Resolve Timeouts; unset fields take the platform defaults."""
    d = Timeouts()
    return Timeouts(
        schedule_to_start_s=(_positive(f"{where}.schedule_to_start", p.schedule_to_start)
                             if p.HasField("schedule_to_start") else d.schedule_to_start_s),
        start_to_close_s=(_positive(f"{where}.start_to_close", p.start_to_close)
                          if p.HasField("start_to_close") else d.start_to_close_s),
        schedule_to_close_s=(_positive(f"{where}.schedule_to_close", p.schedule_to_close)
                             if p.HasField("schedule_to_close") else d.schedule_to_close_s),
    )


def timeouts_to_proto(t: Timeouts) -> tasks_pb2.Timeouts:
    """Resolved timeouts in the public Timeouts shape (unlimited ones unset)."""
    out = tasks_pb2.Timeouts()
    if t.schedule_to_start_s is not None:
        out.schedule_to_start.CopyFrom(duration(t.schedule_to_start_s))
    if t.start_to_close_s is not None:
        out.start_to_close.CopyFrom(duration(t.start_to_close_s))
    if t.schedule_to_close_s is not None:
        out.schedule_to_close.CopyFrom(duration(t.schedule_to_close_s))
    return out


def backoff_ceiling(policy: Retry, attempt: int) -> float:
    """The largest delay after failed attempt `attempt` (1-based): min(cap, base*factor^(attempt-1))."""
    exponent = max(0, attempt - 1)
    try:
        grown = policy.base_s * policy.factor ** exponent
    except OverflowError:
        grown = float("inf")
    return min(policy.cap_s, grown)


def backoff_delay(policy: Retry, attempt: int, rand: Callable[[], float] = random.random) -> float:
    """Seconds to wait before the next attempt after failed attempt `attempt`.

    Full jitter: uniform in [0, ceiling], so a downstream outage that fails
    many tasks at once does not make them retry in lock step.
    """
    ceiling = backoff_ceiling(policy, attempt)
    return rand() * ceiling if policy.jitter else ceiling
