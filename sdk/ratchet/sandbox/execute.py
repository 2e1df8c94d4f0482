"""Run one attempt of a handler and turn what happened into an outcome.

Shared by the sandbox stub and `ratchet.testing`, so a handler behaves the
same under test as on the platform.
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import traceback
from collections.abc import Container
from typing import Any

from ratchet.context import TaskContext
from ratchet.errors import FatalError, ResultNotSerializable, ResultTooLarge, RetryableError
from ratchet.task import TaskSpec

MAX_RESULT_BYTES = 256 * 1024
MAX_MESSAGE_CHARS = 8 * 1024
MAX_STACK_CHARS = 64 * 1024


@dataclasses.dataclass
class Outcome:
    """How an attempt ended, in the shape of a "done" frame."""

    outcome: str  # "succeeded" | "failed" | "canceled"
    result: str | None = None  # JSON text
    error: dict | None = None  # {error_class, message, stack}
    fatal: bool = False
    retry_after_s: float | None = None
    exception: BaseException | None = dataclasses.field(default=None, repr=False, compare=False)
    # Filled in by ratchet.testing (the platform sends checkpoints as they are taken, not here).
    checkpoints: list = dataclasses.field(default_factory=list, repr=False, compare=False)

    def frame(self, task_id: str) -> dict:
        """The "done" message for task_id."""
        return {"type": "done", "task_id": task_id, "outcome": self.outcome, "result": self.result,
                "error": self.error, "fatal": self.fatal, "retry_after_s": self.retry_after_s}


def error_info(exc: BaseException, *, with_stack: bool = True, skip_files: Container[str] = ()) -> dict:
    """{error_class, message, stack} of an exception, truncated to sane sizes. The stack
    starts past the outermost frames of this file and of skip_files (the SDK's own)."""
    message = getattr(exc, "message", None) or str(exc)
    tb = exc.__traceback__
    while tb is not None and (tb.tb_frame.f_code.co_filename == __file__
                              or tb.tb_frame.f_code.co_filename in skip_files):
        tb = tb.tb_next  # the customer's stack starts at their handler, not in the stub
    stack = "".join(traceback.format_exception(type(exc), exc, tb)) if with_stack else ""
    if len(stack) > MAX_STACK_CHARS:
        stack = "...(truncated)\n" + stack[-MAX_STACK_CHARS:]
    return {"error_class": type(exc).__name__, "message": str(message)[:MAX_MESSAGE_CHARS], "stack": stack}


def platform_failure(error_class: str, message: str) -> Outcome:
    """A fatal failure the stub itself decided (no handler stack)."""
    return Outcome("failed", error={"error_class": error_class, "message": message, "stack": ""}, fatal=True)


# (one encoder: json.dumps with options builds one per call)
_ENCODE_RESULT = json.JSONEncoder(separators=(",", ":"), ensure_ascii=False, allow_nan=False).encode


def encode_result(value: Any) -> str:
    """value as compact JSON text; ResultNotSerializable / ResultTooLarge otherwise."""
    if value is None:
        return "null"  # (most handlers return nothing)
    try:
        text = _ENCODE_RESULT(value)
    except (TypeError, ValueError) as e:
        raise ResultNotSerializable(
            f"the handler returned a value that is not JSON ({e}); return dicts, lists, strings, "
            f"numbers, booleans or None") from None
    size = len(text.encode("utf-8"))
    if size > MAX_RESULT_BYTES:
        raise ResultTooLarge(
            f"the handler's result is {size} bytes of JSON, over the {MAX_RESULT_BYTES}-byte limit; "
            f"store large data elsewhere and return a reference")
    return text


def _call(spec: TaskSpec, ctx: TaskContext, payload: Any) -> Any:
    if spec.is_async:
        return asyncio.run(spec.fn(ctx, payload))
    return spec.fn(ctx, payload)


def _failure(spec: TaskSpec, exc: BaseException, ctx: TaskContext) -> Outcome:
    if ctx.cancel_observed:
        return Outcome("canceled", error=error_info(exc), exception=exc)
    fatal = isinstance(exc, FatalError) or spec.retry.is_non_retryable(exc)
    retry_after = exc.retry_after_s if isinstance(exc, RetryableError) else None
    return Outcome("failed", error=error_info(exc), fatal=fatal, retry_after_s=retry_after, exception=exc)


def execute(spec: TaskSpec, ctx: TaskContext, payload_text: str) -> Outcome:
    """Run spec's handler once on the JSON payload and classify the outcome.

    Returning after ctx.cancelled() was seen true is CANCELED; so is raising.
    """
    try:
        payload = json.loads(payload_text) if payload_text else None
    except json.JSONDecodeError as e:
        return platform_failure("PayloadNotJSON", f"the task payload is not valid JSON: {e}")
    try:
        value = _call(spec, ctx, payload)
    except BaseException as exc:  # noqa: BLE001 -- every way a handler can end is an outcome, SystemExit too
        return _failure(spec, exc, ctx)
    try:
        result = encode_result(value)
    except FatalError as exc:
        if ctx.cancel_observed:
            return Outcome("canceled", error=error_info(exc, with_stack=False), exception=exc)
        return Outcome("failed", error=error_info(exc, with_stack=False), fatal=True, exception=exc)
    return Outcome("canceled" if ctx.cancel_observed else "succeeded", result=result)
