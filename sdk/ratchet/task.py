"""The `@task` decorator: declares a handler and its policies.

    @task(retries=RetryPolicy(max_attempts=3), timeout="2m")
    def resize_image(ctx, payload):
        ...

The decorator validates its arguments at import time and attaches a
`TaskSpec` to the function, which stays a plain callable. There is no global
registry: deploy and the sandbox import the app module and collect every
module attribute that carries a spec (`find_tasks`). `@workflow`
(ratchet.workflow) attaches the same spec with `kind = "workflow"`, so one
discovery finds both.
"""

from __future__ import annotations

import dataclasses
import functools
import inspect
import re
from collections.abc import Callable
from types import ModuleType
from typing import Any

from ratchet.errors import DiscoveryError, TaskDefinitionError
from ratchet.libs.durations import parse_duration
from ratchet.retry import RetryPolicy

SPEC_ATTR = "__ratchet_task__"
NAME_PATTERN = re.compile(r"[A-Za-z0-9_.:-]{1,200}")
DEFAULT_TIMEOUT = "10m"
KINDS = ("task", "workflow")
RESUMES = ("latest", "pinned")


@dataclasses.dataclass(frozen=True)
class TaskSpec:
    """What `@task` declared about one handler."""

    name: str
    fn: Callable[[Any, Any], Any]
    retry: RetryPolicy
    start_to_close_s: float
    schedule_to_start_s: float | None
    schedule_to_close_s: float | None
    # "task" or "workflow"; resume ("latest" | "pinned") is set for workflows only.
    kind: str = "task"
    resume: str | None = None

    @functools.cached_property
    def is_async(self) -> bool:
        """Whether the handler is a coroutine function: asked once, not per attempt (inspect
        unwraps and reads code flags, a few % of a no-op attempt's cost in the stub)."""
        return inspect.iscoroutinefunction(self.fn)

    def describe(self) -> dict:
        """The handler as `python -m ratchet.sandbox describe` prints it (a workflow adds
        "resume"; deploy maps kind and resume onto Handler.kind and Handler.resume)."""
        out = {
            "name": self.name,
            "kind": self.kind,
            "retry": self.retry.describe(),
            "timeouts": {"start_to_close_s": self.start_to_close_s,
                         "schedule_to_start_s": self.schedule_to_start_s,
                         "schedule_to_close_s": self.schedule_to_close_s},
            "non_retryable": list(self.retry.non_retryable),
        }
        if self.resume is not None:
            out["resume"] = self.resume
        return out


def required_timeout(arg: str, value: Any, label: str = "@task") -> float:
    """A decorator's mandatory duration argument in seconds (label names the decorator in errors)."""
    if value is None:
        raise TaskDefinitionError(f"{label} {arg} is required; use a duration like '10m'")
    return _seconds(arg, value, label)


def optional_timeout(arg: str, value: Any, label: str = "@task") -> float | None:
    """A decorator's optional duration argument in seconds, None when not given."""
    return None if value is None else _seconds(arg, value, label)


def _seconds(arg: str, value: Any, label: str = "@task") -> float:
    try:
        seconds = parse_duration(value)
    except (ValueError, TypeError) as e:
        raise TaskDefinitionError(f"{label} {arg}: {e}") from None
    if seconds <= 0:
        raise TaskDefinitionError(f"{label} {arg} must be greater than zero, got {value!r}")
    return seconds


def check_handler(fn: Any, name: str, label: str = "@task", args: str = "(ctx, payload)") -> None:
    """TaskDefinitionError unless fn is callable with two positional arguments."""
    if not callable(fn):
        raise TaskDefinitionError(f"{label} must decorate a function, got {fn!r}")
    try:
        inspect.signature(fn).bind(None, None)
    except TypeError:
        raise TaskDefinitionError(
            f"{label.lstrip('@')} {name!r}: the handler must accept two arguments {args}") from None
    except ValueError:
        pass  # builtins without a signature: trust the caller


def checked_name(handler: Any, name: str | None, label: str = "@task") -> str:
    """The handler's declared name (default: the function's), or TaskDefinitionError."""
    task_name = name if name is not None else getattr(handler, "__name__", "")
    if not isinstance(task_name, str) or not NAME_PATTERN.fullmatch(task_name):
        raise TaskDefinitionError(
            f"{label} name must be 1..200 characters of [A-Za-z0-9_.:-], got {task_name!r}")
    return task_name


def checked_policy(retries: Any, label: str = "@task") -> RetryPolicy:
    """retries, or the default policy when None; TaskDefinitionError for anything else."""
    if retries is None:
        return RetryPolicy()
    if not isinstance(retries, RetryPolicy):
        raise TaskDefinitionError(f"{label} retries must be a RetryPolicy, got {retries!r}")
    return retries


def attach(handler: Any, spec: TaskSpec) -> None:
    """Mark handler with spec, where discovery looks for it."""
    try:
        setattr(handler, SPEC_ATTR, spec)
    except (AttributeError, TypeError):
        raise TaskDefinitionError(f"{spec.kind} {spec.name!r}: cannot attach a spec to {handler!r}") from None


def task(fn: Callable | str | None = None, *, name: str | None = None, retries: RetryPolicy | None = None,
         timeout: str | int | float = DEFAULT_TIMEOUT, schedule_to_start: str | int | float | None = None,
         schedule_to_close: str | int | float | None = None) -> Any:
    """Declare `fn(ctx, payload)` as a task handler. Usable bare (`@task`) or
    with arguments; `name` defaults to the function's name.

    `timeout` is the per-attempt start_to_close budget (default 10m);
    `schedule_to_start` and `schedule_to_close` default to unlimited.
    Invalid arguments raise TaskDefinitionError when the module is imported.
    """
    if isinstance(fn, str):  # @task("name")
        name, fn = fn, None
    policy = checked_policy(retries)
    start_to_close = required_timeout("timeout", timeout)
    to_start = optional_timeout("schedule_to_start", schedule_to_start)
    to_close = optional_timeout("schedule_to_close", schedule_to_close)

    def decorate(handler: Callable) -> Callable:
        task_name = checked_name(handler, name)
        check_handler(handler, task_name)
        attach(handler, TaskSpec(task_name, handler, policy, start_to_close, to_start, to_close))
        return handler

    return decorate(fn) if fn is not None else decorate


def spec_of(obj: Any) -> TaskSpec | None:
    """The TaskSpec attached by @task, or None."""
    spec = getattr(obj, SPEC_ATTR, None) if callable(obj) else None
    return spec if isinstance(spec, TaskSpec) else None


def find_tasks(module: ModuleType) -> list[TaskSpec]:
    """Every handler declared in module, sorted by name.

    The same function bound to two attribute names counts once; two different
    functions declaring the same task name raise DiscoveryError.
    """
    by_name: dict[str, TaskSpec] = {}
    for attr, value in vars(module).items():
        spec = spec_of(value)
        if spec is None:
            continue
        seen = by_name.get(spec.name)
        if seen is not None and seen is not spec:
            raise DiscoveryError(
                f"task name {spec.name!r} is declared twice in module {module.__name__!r} "
                f"(by {getattr(seen.fn, '__qualname__', seen.fn)!r} and {attr!r}); give one a different name=")
        by_name[spec.name] = spec
    return [by_name[n] for n in sorted(by_name)]
