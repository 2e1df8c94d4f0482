"""Exceptions a handler raises to steer its retries, and the SDK's own errors.

A handler that returns succeeds. One that raises fails its attempt:
`RetryableError` (or any other exception) is retried with backoff until the
task's attempts are spent; `FatalError` fails the task at once.
"""

from __future__ import annotations

from ratchet.libs.durations import parse_duration


class RetryableError(Exception):
    """The attempt failed but a later one may succeed.

    `retry_after` (a duration such as "30s", or seconds) replaces the computed
    backoff before the next attempt, e.g. to honour a downstream Retry-After.
    """

    def __init__(self, message: str = "", retry_after: str | int | float | None = None):
        super().__init__(message)
        self.message = message
        self.retry_after_s = None if retry_after is None else parse_duration(retry_after)


class FatalError(Exception):
    """The task can never succeed (bad payload, a 4xx from a downstream):
    fail it now instead of spending its remaining attempts."""

    def __init__(self, message: str = ""):
        super().__init__(message)
        self.message = message


class ResultNotSerializable(FatalError):
    """The handler returned a value that is not JSON (a set, an object, NaN...)."""


class ResultTooLarge(FatalError):
    """The handler's JSON result is larger than the 256 KiB inline limit."""


class CheckpointNotSerializable(FatalError):
    """ctx.checkpoint() was given a value that is not JSON."""


class CheckpointTooLarge(FatalError):
    """ctx.checkpoint() was given a value over the 64 KiB limit once encoded as JSON."""


class TaskDefinitionError(ValueError):
    """A `@task` declaration is invalid; the message says which argument and how to fix it."""


class DiscoveryError(Exception):
    """An app folder could not be loaded: import error, no handlers, or duplicate names."""


class StepFailed(FatalError):
    """A workflow step failed fatally in an earlier activation; the run's log keeps that
    error, so the step is not run again and this is raised where `ctx.step` was called.

    `step` is the step's name, `error_class` and `error_message` what its function raised
    then (the activation that ran it saw the original exception instead).
    """

    def __init__(self, step: str, error_class: str, error_message: str):
        super().__init__(f"step {step!r} failed earlier with {error_class}: {error_message}")
        self.step = step
        self.error_class = error_class
        self.error_message = error_message


class WorkflowVersionError(FatalError):
    """The workflow's code no longer matches the run's step log: the call at `position`
    is not the one the log holds there (a step was added, removed, renamed or reordered
    under a live run). It fails the run; branch deliberately with `ctx.version()` instead.

    Once raised, every later call on the same ctx raises it again and the activation
    fails whatever the workflow returns: code past a mismatch must not act.
    """

    def __init__(self, message: str, *, position: int | None = None, name: str | None = None,
                 logged_name: str | None = None, logged_kind: str | None = None):
        super().__init__(message)
        self.position = position
        self.name = name
        self.logged_name = logged_name
        self.logged_kind = logged_kind


class WorkflowInterrupt(BaseException):
    """The activation of a workflow must stop where it is (a BaseException, so that
    `except Exception` in workflow code does not swallow it; do not catch it).

    The SDK raises a subclass from a ctx call and decides the activation's outcome from
    it even if the code catches it: every later ctx call raises it again.
    """


class WorkflowSuspended(WorkflowInterrupt):
    """The run waits (a sleep, an event): it suspends at `position` and the platform wakes
    it after `wake_after_s` seconds at the latest (None: only its event wakes it)."""

    def __init__(self, position: int, wake_after_s: float | None):
        super().__init__(f"the run suspends at step position {position}")
        self.position = position
        self.wake_after_s = wake_after_s


class LeaseLost(WorkflowInterrupt):
    """The platform no longer holds this activation's lease (it timed out, was cancelled,
    or another activation took over): whatever it does next no longer counts."""


class StepUnavailable(WorkflowInterrupt):
    """The platform could not record a step in time (it was unreachable, or its answer
    was malformed): the activation fails and is retried, replaying what was logged."""


class WorkflowCancelled(WorkflowInterrupt):
    """The run was cancelled and has compensations (ctx.on_cancel): the code stops at the
    checkpoint at `position` (the point the run had reached), and the runner then runs the
    registered compensations, last first, at the positions from the CANCELLED reply's
    compensate_from on: `position` itself when the log has nothing there, else the next one
    (a sleep, wait, fan-out or step claim left open at `position` keeps its entry)."""

    def __init__(self, position: int):
        super().__init__(f"the run was cancelled; it stops at step position {position} to run its compensations")
        self.position = position


class ChildError(FatalError):
    """How one child of a fan-out ended when it did not succeed: `ctx.parallel(...,
    on_failure="collect")` returns it in that child's place (it is not raised).

    `index` is the child's place in the call list, `child_id` its task (or run) id,
    `state` how it ended (FAILED, CANCELED, EXPIRED...), `error_class` and `message`
    what it failed with. (A FatalError: raising it from the workflow fails the run at
    once, since a replay meets the same recorded outcome.)
    """

    def __init__(self, *, index: int, child_id: str, state: str, error_class: str, message: str):
        super().__init__(f"child {index} ({child_id}) ended {state}: {error_class}: {message}")
        self.index = index
        self.child_id = child_id
        self.state = state
        self.error_class = error_class
        self.message = message  # the child's own (str(self) says which child it was)
        self.error_message = message

    def __repr__(self) -> str:
        return (f"ChildError(index={self.index}, child_id={self.child_id!r}, state={self.state!r}, "
                f"error_class={self.error_class!r}, message={self.message!r})")


class ChildFailed(FatalError):
    """A fan-out's child did not succeed: raised by `ctx.child(...)`, and by
    `ctx.parallel(..., on_failure="fail_fast")` naming the first failed child (its other
    children were cancelled). Catch it to go on; uncaught it fails the run (a replay
    would meet the same outcome, so it is fatal).

    `step` is the fan-out's name; `error` the ChildError; `index`, `child_id`, `state`,
    `error_class` and `error_message` are its fields (`message` is this exception's text).
    """

    def __init__(self, step: str, error: ChildError):
        super().__init__(f"{step!r}: child {error.index} ({error.child_id}) ended {error.state} with "
                         f"{error.error_class}: {error.error_message}")
        self.step = step
        self.error = error
        self.index = error.index
        self.child_id = error.child_id
        self.state = error.state
        self.error_class = error.error_class
        self.error_message = error.error_message


class StepRefused(FatalError):
    """The platform refused a checkpoint call for good (a fan-out naming a handler the
    deployment does not have, or an input it will not take): retrying the same code cannot
    help, so the activation fails fatally, whatever the workflow does with this."""
