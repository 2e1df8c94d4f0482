"""Retry policy of a task type: how many attempts and how long between them,
and per error class rules.

The server computes every delay (the worker only reports outcomes); the
formula lives here too so customers can reason about it and tests can pin it:
delay(n) = min(cap, base * factor ** (n - 1)), drawn uniformly from
[0, delay(n)] when jitter is on ("full jitter"), where n is the attempt that
just failed.

    RetryPolicy(max_attempts=5,
                non_retryable=[BadInput],
                rules={"TimeoutError": RetryPolicy(max_attempts=10, base="5s"),
                       "ValueError": "fatal"})

A rule replaces the fields its RetryPolicy was given explicitly for failures
of that class; the other fields are inherited from the enclosing policy.
"""

from __future__ import annotations

import dataclasses
import random
import re
from collections.abc import Iterable, Mapping
from typing import Any

from ratchet.errors import TaskDefinitionError
from ratchet.libs.durations import parse_duration

BACKOFFS = ("exp", "fixed")
MAX_ATTEMPTS_LIMIT = 100
FACTOR_RANGE = (1.0, 10.0)
FATAL = "fatal"
# The gateway's pattern for a class name; dotted names (module.Class) are matched by the stub only.
_CLASS_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_.]{0,199}")


class _Default:
    """A default argument value that remembers it was not given (shows as the value in help())."""

    def __init__(self, value: Any):
        self.value = value

    def __repr__(self) -> str:
        return repr(self.value)


def _default(value: Any) -> Any:
    """A _Default, typed Any so that a signature declares the parameter's real type."""
    return _Default(value)


def _seconds(arg: str, value: Any) -> float:
    try:
        seconds = parse_duration(value)
    except (ValueError, TypeError) as e:
        raise TaskDefinitionError(f"RetryPolicy {arg}: {e}") from None
    return seconds


def _class_name(where: str, v: Any) -> str:
    if isinstance(v, type) and issubclass(v, BaseException):
        return v.__name__
    if isinstance(v, str) and _CLASS_NAME.fullmatch(v.strip()):
        return v.strip()
    raise TaskDefinitionError(f"RetryPolicy {where}: {v!r} is neither an exception class nor a class name "
                              f"(letters, digits, '_' and '.', up to 200 characters)")


def _class_names(values: Iterable[Any]) -> tuple[str, ...]:
    return tuple(dict.fromkeys(_class_name("non_retryable", v) for v in values))


def _check_max_attempts(value: Any) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= MAX_ATTEMPTS_LIMIT:
        raise TaskDefinitionError(
            f"RetryPolicy max_attempts must be an integer in 1..{MAX_ATTEMPTS_LIMIT}, got {value!r}")


def _check_factor(value: Any) -> None:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not (
            FACTOR_RANGE[0] <= value <= FACTOR_RANGE[1]):
        raise TaskDefinitionError(f"RetryPolicy factor must be a number in 1.0..10.0, got {value!r}")


@dataclasses.dataclass(frozen=True, init=False)
class RetryPolicy:
    """Attempts and backoff of a task type (defaults: 5 attempts, exponential
    from 1s, factor 2, capped at 1h, full jitter).

    `backoff` is "exp" (base * factor^(n-1)) or "fixed" (always base).
    `non_retryable` lists exception classes (or class names) that fail the
    task at once, like FatalError (subclasses too).
    `rules` maps an exception class (or its name) to "fatal" (fail at once,
    subclasses too) or to a RetryPolicy whose explicitly given fields replace
    this policy's for failures of exactly that class name.
    Invalid arguments raise TaskDefinitionError when the module is imported.
    """

    max_attempts: int
    backoff: str
    base_s: float
    factor: float
    cap_s: float
    jitter: bool
    non_retryable: tuple[str, ...]
    rules: Mapping[str, RetryPolicy | str] = dataclasses.field(hash=False)
    # The fields the caller gave; a rule overrides only these.
    explicit: frozenset[str] = dataclasses.field(repr=False)

    def __init__(self, max_attempts: int = _default(5), backoff: str = _default("exp"),
                 base: str | int | float = _default("1s"), factor: float = _default(2.0),
                 cap: str | int | float = _default("1h"), jitter: bool = _default(True),
                 non_retryable: Iterable[Any] = (), rules: Mapping[Any, RetryPolicy | str] | None = None):
        args: dict[str, Any] = {"max_attempts": max_attempts, "backoff": backoff, "base": base, "factor": factor,
                                "cap": cap, "jitter": jitter}
        explicit = frozenset(k for k, v in args.items() if not isinstance(v, _Default))
        max_attempts, backoff, base, factor, cap, jitter = (
            v.value if isinstance(v, _Default) else v for v in args.values())
        _check_max_attempts(max_attempts)
        if backoff not in BACKOFFS:
            raise TaskDefinitionError(f"RetryPolicy backoff must be one of {BACKOFFS}, got {backoff!r}")
        _check_factor(factor)
        base_s, cap_s = _seconds("base", base), _seconds("cap", cap)
        if base_s <= 0:
            raise TaskDefinitionError(f"RetryPolicy base must be greater than zero, got {base!r}")
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
        set_(self, "explicit", explicit)
        set_(self, "rules", self._rules(rules or {}))

    def _rules(self, rules: Mapping[Any, Any]) -> dict[str, RetryPolicy | str]:
        if not isinstance(rules, Mapping):
            raise TaskDefinitionError(f"RetryPolicy rules must be a dict of exception class -> RetryPolicy "
                                      f"or 'fatal', got {rules!r}")
        out: dict[str, RetryPolicy | str] = {}
        for key, rule in rules.items():
            name = _class_name("rules", key)
            where = f"RetryPolicy rules[{name!r}]"
            if name in out:
                raise TaskDefinitionError(f"{where} is given twice")
            if name in self.non_retryable:
                raise TaskDefinitionError(f"{where}: {name} is also in non_retryable; keep one of them")
            if isinstance(rule, str) and rule.strip().lower() == FATAL:
                out[name] = FATAL
                continue
            if not isinstance(rule, RetryPolicy):
                raise TaskDefinitionError(f"{where} must be a RetryPolicy or 'fatal', got {rule!r}")
            if rule.rules or rule.non_retryable:
                raise TaskDefinitionError(f"{where}: a rule's RetryPolicy cannot have rules or non_retryable "
                                          f"of its own")
            if "." in name:
                raise TaskDefinitionError(f"{where}: a rule with a retry policy matches the exception's class "
                                          f"name only; write {name.rsplit('.', 1)[1]!r}")
            merged_base = rule.base_s if "base" in rule.explicit else self.base_s
            merged_cap = rule.cap_s if "cap" in rule.explicit else self.cap_s
            if merged_cap < merged_base:
                raise TaskDefinitionError(f"{where}: cap ({merged_cap:g}s) would be smaller than base "
                                          f"({merged_base:g}s) once the policy's fields are inherited; set both")
            out[name] = rule
        return out

    def delay_s(self, failed_attempt: int, rng: random.Random | None = None) -> float:
        """Seconds to wait after attempt `failed_attempt` (1-based) failed."""
        ceiling = min(self.cap_s, self.base_s * self.factor ** max(0, failed_attempt - 1))
        if not self.jitter:
            return ceiling
        return (rng or random).uniform(0.0, ceiling)

    def for_error(self, error_class: str) -> RetryPolicy:
        """The policy a failure of error_class is retried with (its rule merged in)."""
        rule = self.rules.get(error_class)
        if not isinstance(rule, RetryPolicy):
            return self
        fields: dict[str, Any] = {"max_attempts": self.max_attempts, "base": self.base_s, "factor": self.factor,
                  "cap": self.cap_s, "jitter": self.jitter}
        for name in ("max_attempts", "factor", "jitter"):
            if name in rule.explicit:
                fields[name] = getattr(rule, name)
        for name in ("base", "cap"):
            if name in rule.explicit:
                fields[name] = getattr(rule, f"{name}_s")
        if "backoff" in rule.explicit and rule.backoff == "fixed":
            fields["factor"] = 1.0
        return RetryPolicy(**fields)

    def is_non_retryable(self, exc: BaseException) -> bool:
        """True when exc's class, or one of its bases, is in non_retryable or has a "fatal" rule."""
        listed = set(self.non_retryable) | {k for k, v in self.rules.items() if v == FATAL}
        for cls in type(exc).__mro__:
            if cls.__name__ in listed or f"{cls.__module__}.{cls.__qualname__}" in listed:
                return True
        return False

    def describe_rule(self) -> dict:
        """This policy as a rule: only its explicit fields, the others None (inherited)."""
        full = self._fields()
        keys = {"max_attempts": "max_attempts", "base": "base_s", "factor": "factor", "cap": "cap_s",
                "jitter": "jitter"}
        out: dict[str, Any] = {"non_retryable": False}
        for arg, key in keys.items():
            explicit = arg in self.explicit or (arg == "factor" and "backoff" in self.explicit)
            out[key] = full[key] if explicit else None
        return out

    def _fields(self) -> dict:
        return {"max_attempts": self.max_attempts, "base_s": self.base_s, "factor": self.factor,
                "cap_s": self.cap_s, "jitter": self.jitter}

    def describe(self) -> dict:
        """The policy as the deploy manifest carries it (seconds, no backoff name)."""
        rules = {}
        for name, rule in sorted(self.rules.items()):
            if isinstance(rule, str):  # FATAL, the only string a rule may be
                rules[name] = {"non_retryable": True, "max_attempts": None, "base_s": None, "factor": None,
                               "cap_s": None, "jitter": None}
            else:
                rules[name] = rule.describe_rule()
        return {**self._fields(), "non_retryable": list(self.non_retryable), "rules": rules}

