"""Run one activation of a workflow and turn how it ended into an outcome.

Shared by the sandbox stub and ratchet.testing, as execute() is for tasks: the
function runs through execute() (the same payload decoding, result limits and
cancel rules), then what stopped it, if anything, overrides what it returned
or raised: a suspension, a lost lease, an unavailable platform, a
WorkflowVersionError or a StepRefused, even when the workflow's code caught it.
A cancel (WorkflowCancelled) is followed, before the activation ends, by the run's
compensations; when each has run the outcome is "canceled".
"""

from __future__ import annotations

import dataclasses

from ratchet.errors import FatalError, RetryableError, WorkflowCancelled, WorkflowSuspended
from ratchet.sandbox.execute import Outcome, error_info, execute
from ratchet.task import TaskSpec
from ratchet.workflow.context import WorkflowContext


@dataclasses.dataclass
class Suspension(Outcome):
    """An activation that suspended: the run waits on the step at suspend_position, to be
    woken by it or after wake_after_s seconds (None: only by it)."""

    suspend_position: int = 0
    wake_after_s: float | None = None

    def frame(self, task_id: str) -> dict:
        """The "done" message of a suspension."""
        return {"type": "done", "task_id": task_id, "outcome": "suspended", "result": None, "error": None,
                "fatal": False, "retry_after_s": None, "suspend_position": self.suspend_position,
                "wake_after_s": self.wake_after_s}


def halted_outcome(halt: BaseException) -> Outcome:
    """The outcome an activation has because halt stopped it."""
    if isinstance(halt, WorkflowSuspended):
        return Suspension("suspended", suspend_position=halt.position, wake_after_s=halt.wake_after_s,
                          exception=halt)
    if isinstance(halt, WorkflowCancelled):  # (compensated() decides when there are compensations)
        return Outcome("canceled", exception=halt)
    if isinstance(halt, FatalError):  # WorkflowVersionError, StepRefused: a retry meets the same
        return Outcome("failed", error=error_info(halt), fatal=True, exception=halt)
    # LeaseLost (the agent discards the outcome) and StepUnavailable (retried with backoff).
    return Outcome("failed", error=error_info(halt), fatal=False, exception=halt)


def run_workflow(spec: TaskSpec, ctx: WorkflowContext, payload_text: str) -> Outcome:
    """Run one activation of spec's workflow on the JSON input with ctx, and end ctx
    (a checkpoint call from a thread the workflow left behind is then refused)."""
    try:
        outcome = execute(spec, ctx, payload_text)
        if isinstance(ctx.halted, WorkflowCancelled):
            return compensated(ctx, Outcome("canceled", exception=ctx.halted))
    finally:
        ctx._end()
    halt = ctx.halted
    return outcome if halt is None else halted_outcome(halt)


def compensated(ctx: WorkflowContext, canceled: Outcome) -> Outcome:
    """The outcome of a cancelled activation once it has run the run's compensations:
    `canceled` when each has run; a compensation's retryable error fails the activation
    retryably (the next one tries the unfinished ones); the platform's interrupt decides
    as it would anywhere."""
    stop = ctx._compensate()
    if stop is None:
        return canceled
    if stop is ctx.halted:
        return halted_outcome(stop)
    retry_after = stop.retry_after_s if isinstance(stop, RetryableError) else None
    return Outcome("failed", error=error_info(stop), fatal=False, retry_after_s=retry_after, exception=stop)
