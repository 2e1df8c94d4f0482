"""The `@workflow` decorator: declares a workflow handler and its policies.

    @workflow(resume="latest", retries=RetryPolicy(max_attempts=10), timeout="5m")
    def onboard(ctx, input):
        account = ctx.step("create_account", create_account, input["email"])
        ctx.sleep("grace", days=1)
        ...

A workflow is a task of kind "workflow": the same TaskSpec under the same attribute,
so discovery and deploy find it as they find tasks. `timeout` bounds one activation
(the time between two suspensions), `retries` the activations that fail, and a step
function's exception is fatal when it is a FatalError or a non-retryable class of
`retries`. `resume` says which code a resumed run executes: the active deployment's
("latest", the default) or the bundle the run started on ("pinned").
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from typing import Any

from ratchet.errors import TaskDefinitionError
from ratchet.retry import RetryPolicy
from ratchet.task import (
    DEFAULT_TIMEOUT,
    RESUMES,
    TaskSpec,
    attach,
    check_handler,
    checked_name,
    checked_policy,
    optional_timeout,
    required_timeout,
)

LABEL = "@workflow"


def _check_plain(fn: Any, name: str) -> None:
    """A workflow replays its code on every activation between steps that block the
    thread, so it is a plain function; async code belongs inside a step."""
    if inspect.iscoroutinefunction(fn) or inspect.isasyncgenfunction(fn):
        raise TaskDefinitionError(
            f"workflow {name!r} is an async def; a workflow must be a plain function: write "
            f"`def {name}(ctx, input):` and run async code inside a step, e.g. "
            f"`ctx.step('fetch', lambda: asyncio.run(fetch(url)))`")
    if inspect.isgeneratorfunction(fn):
        raise TaskDefinitionError(
            f"workflow {name!r} is a generator (it uses yield); write a plain function that returns its result")


def _checked_resume(resume: Any) -> str:
    if not isinstance(resume, str) or resume.strip().lower() not in RESUMES:
        raise TaskDefinitionError(f"@workflow resume must be 'latest' or 'pinned', got {resume!r}")
    return resume.strip().lower()


def workflow(fn: Callable | str | None = None, *, name: str | None = None, resume: str = "latest",
             retries: RetryPolicy | None = None, timeout: str | int | float = DEFAULT_TIMEOUT,
             schedule_to_start: str | int | float | None = None,
             schedule_to_close: str | int | float | None = None) -> Any:
    """Declare `fn(ctx, input)` as a workflow. Usable bare (`@workflow`) or with
    arguments; `name` defaults to the function's name. `ctx` is a WorkflowContext.

    `timeout` is one activation's start_to_close budget (default 10m);
    `schedule_to_close` bounds the whole run, sleeps and waits included (default
    unlimited). Invalid arguments, an async def or a generator raise
    TaskDefinitionError when the module is imported.
    """
    if isinstance(fn, str):  # @workflow("name")
        name, fn = fn, None
    policy = checked_policy(retries, LABEL)
    how = _checked_resume(resume)
    start_to_close = required_timeout("timeout", timeout, LABEL)
    to_start = optional_timeout("schedule_to_start", schedule_to_start, LABEL)
    to_close = optional_timeout("schedule_to_close", schedule_to_close, LABEL)

    def decorate(handler: Callable) -> Callable:
        wf_name = checked_name(handler, name, LABEL)
        check_handler(handler, wf_name, LABEL, "(ctx, input)")
        _check_plain(handler, wf_name)
        attach(handler, TaskSpec(wf_name, handler, policy, start_to_close, to_start, to_close,
                                 kind="workflow", resume=how))
        return handler

    return decorate(fn) if fn is not None else decorate
