"""Retry policy of a task type: how many attempts and how long between them.

The server computes every delay (the worker only reports outcomes); the
formula lives here too so customers can reason about it and tests can pin it:
delay(n) = min(cap, base * factor ** (n - 1)), drawn uniformly from
[0, delay(n)] when jitter is on ("full jitter"), where n is the attempt that
just failed.
"""

from __future__ import annotations

import dataclasses
import random
from typing import Any, Iterable

from ratchet.errors import TaskDefinitionError
from ratchet.libs.durations import parse_duration

BACKOFFS = ("exp", "fixed")
MAX_ATTEMPTS_LIMIT = 100
FACTOR_RANGE = (1.0, 10.0)


def _seconds(arg: str, value: Any) -> float:
    try:
        seconds = parse_duration(value)
    except (ValueError, TypeError) as e:
        raise TaskDefinitionError(f"RetryPolicy {arg}: {e}") from None
    return seconds


def _class_names(values: Iterable[Any]) -> tuple[str, ...]:
    names = []
    for v in values:
        if isinstance(v, type) and issubclass(v, BaseException):
            names.append(v.__name__)
        elif isinstance(v, str) and v.strip():
            names.append(v.strip())
        else:
            raise TaskDefinitionError(
                f"RetryPolicy non_retryable: {v!r} is neither an exception class nor a class name")
    return tuple(dict.fromkeys(names))


@dataclasses.dataclass(frozen=True, init=False)
class RetryPolicy:
    """Attempts and backoff of a task type (defaults: 5 attempts, exponential
    from 1s, factor 2, capped at 1h, full jitter).

    `backoff` is "exp" (base * factor^(n-1)) or "fixed" (always base).
    `non_retryable` lists exception classes (or class names) that fail the
    task at once, like FatalError.
    """

    max_attempts: int
    backoff: str
    base_s: float
    factor: float
    cap_s: float
    jitter: bool
    non_retryable: tuple[str, ...]

    def __init__(self, max_attempts: int = 5, backoff: str = "exp", base: str | int | float = "1s",
                 factor: float = 2.0, cap: str | int | float = "1h", jitter: bool = True,
                 non_retryable: Iterable[Any] = ()):
        if isinstance(max_attempts, bool) or not isinstance(max_attempts, int) or not (
                1 <= max_attempts <= MAX_ATTEMPTS_LIMIT):
            raise TaskDefinitionError(
                f"RetryPolicy max_attempts must be an integer in 1..{MAX_ATTEMPTS_LIMIT}, got {max_attempts!r}")
        if backoff not in BACKOFFS:
            raise TaskDefinitionError(f"RetryPolicy backoff must be one of {BACKOFFS}, got {backoff!r}")
        if isinstance(factor, bool) or not isinstance(factor, (int, float)) or not (
                FACTOR_RANGE[0] <= factor <= FACTOR_RANGE[1]):
            raise TaskDefinitionError(f"RetryPolicy factor must be a number in 1.0..10.0, got {factor!r}")
        base_s, cap_s = _seconds("base", base), _seconds("cap", cap)
        if cap_s < base_s:
            raise TaskDefinitionError(f"RetryPolicy cap ({cap!r}) must not be smaller than base ({base!r})")
        if not isinstance(jitter, bool):
            raise TaskDefinitionError(f"RetryPolicy jitter must be True or False, got {jitter!r}")
        if isinstance(non_retryable, (str, type)):
            non_retryable = [non_retryable]
        set_ = object.__setattr__  # frozen dataclass: assign once, here
        set_(self, "max_attempts", max_attempts)
        set_(self, "backoff", backoff)
        set_(self, "base_s", base_s)
        set_(self, "factor", 1.0 if backoff == "fixed" else float(factor))
        set_(self, "cap_s", cap_s)
        set_(self, "jitter", jitter)
        set_(self, "non_retryable", _class_names(non_retryable))

    def delay_s(self, failed_attempt: int, rng: random.Random | None = None) -> float:
        """Seconds to wait after attempt `failed_attempt` (1-based) failed."""
        ceiling = min(self.cap_s, self.base_s * self.factor ** max(0, failed_attempt - 1))
        if not self.jitter:
            return ceiling
        return (rng or random).uniform(0.0, ceiling)

    def is_non_retryable(self, exc: BaseException) -> bool:
        """True when exc's class, or one of its bases, is listed in non_retryable."""
        listed = set(self.non_retryable)
        for cls in type(exc).__mro__:
            if cls.__name__ in listed or f"{cls.__module__}.{cls.__qualname__}" in listed:
                return True
        return False

    def describe(self) -> dict:
        """The policy as the deploy manifest carries it (seconds, no backoff name)."""
        return {"max_attempts": self.max_attempts, "base_s": self.base_s, "factor": self.factor,
                "cap_s": self.cap_s, "jitter": self.jitter}
