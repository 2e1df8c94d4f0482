"""Turn what a sandbox said (or how it died) into a Completion for the dispatcher.

The stub is customer code's neighbour, so its "done" frame is checked like
untrusted input: it can only decide the outcome of the task it was handed.
A workflow activation that stopped at a sleep or a wait ends "suspended"
(docs/design/workflows-protocol.md): a SUSPENDED completion with the step
position it waits on and when to wake it at the latest.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TypeVar

from google.protobuf import duration_pb2

from ratchet.api.tasks.v1 import tasks_pb2
from ratchet.internal.worker.v1 import worker_pb2
from ratchet.sandbox.execute import MAX_RESULT_BYTES
from ratchet.sandbox.protocol import ProtocolError
from ratchet.services.hostagent import steps
from ratchet.services.hostagent.errors import SANDBOX_CRASHED, SANDBOX_PROTOCOL
from ratchet.services.hostagent.sandboxes import RunEnd, describe_exit

_OUTCOMES = {
    "succeeded": worker_pb2.COMPLETION_OUTCOME_SUCCEEDED,
    "failed": worker_pb2.COMPLETION_OUTCOME_FAILED,
    "canceled": worker_pb2.COMPLETION_OUTCOME_CANCELED,
    "suspended": worker_pb2.COMPLETION_OUTCOME_SUSPENDED,
}
T = TypeVar("T")


class BadDone(ValueError):
    """A done frame that does not follow the protocol."""


def _base(task: worker_pb2.LeasedTask) -> worker_pb2.Completion:
    # tenant/app/task_type let the dispatcher count crashes per task type (circuit breakers).
    return worker_pb2.Completion(shard_id=task.shard_id, task_id=task.task_id, lease_epoch=task.lease_epoch,
                                  tenant_id=task.tenant_id, app_id=task.app_id, task_type=task.task_type)


def failed(task: worker_pb2.LeasedTask, error_class: str, message: str, *, stack: str = "",
           fatal: bool = False, crashed: bool = False) -> worker_pb2.Completion:
    """A FAILED (or CRASHED) completion decided by the agent itself."""
    c = _base(task)
    c.outcome = worker_pb2.COMPLETION_OUTCOME_CRASHED if crashed else worker_pb2.COMPLETION_OUTCOME_FAILED
    c.error.CopyFrom(tasks_pb2.TaskError(error_class=error_class, message=message, stack=stack))
    c.fatal = fatal
    return c


def _checked(parse: Callable[..., T], *args, **kwargs) -> T:
    """A field parsed by the helpers step frames share (steps.py), their refusal as BadDone."""
    try:
        return parse(*args, **kwargs)
    except ProtocolError as e:
        raise BadDone(str(e)) from None


def _seconds(done: dict, field: str) -> duration_pb2.Duration | None:
    value = done.get(field)
    return None if value is None else _checked(steps.seconds, value, field)


def from_done(task: worker_pb2.LeasedTask, done: dict) -> worker_pb2.Completion:
    """The completion a done frame reports; BadDone if it breaks the protocol."""
    outcome = _OUTCOMES.get(str(done.get("outcome")))  # (str: an unhashable value is just unknown)
    if outcome is None:
        raise BadDone(f"unknown outcome {done.get('outcome')!r}")
    if outcome == worker_pb2.COMPLETION_OUTCOME_SUSPENDED:
        return _suspended(task, done)
    c = _base(task)
    c.outcome = outcome
    result = done.get("result")
    if result is not None:
        if not isinstance(result, str):
            raise BadDone("result must be JSON text")
        data = result.encode("utf-8")
        if len(data) > MAX_RESULT_BYTES:
            return failed(task, "ResultTooLarge", f"the handler's result is {len(data)} bytes of JSON, over "
                          f"the {MAX_RESULT_BYTES}-byte limit", fatal=True)
        c.result_json = data
    if done.get("error") is not None:
        c.error.CopyFrom(_checked(steps.task_error, done["error"]))
    c.fatal = bool(done.get("fatal"))
    retry_after = _seconds(done, "retry_after_s")
    if retry_after is not None:
        c.retry_after.CopyFrom(retry_after)
    return c


def _suspended(task: worker_pb2.LeasedTask, done: dict) -> worker_pb2.Completion:
    """A SUSPENDED completion: the run waits on suspend_position until wake_after_s (absent:
    until that step completes). Nothing else of the frame counts: no result, no error."""
    position = done.get("suspend_position")
    if not isinstance(position, int) or isinstance(position, bool) or not 0 <= position <= steps.INT32_MAX:
        raise BadDone(f"a suspended done frame's suspend_position must be a step position (an integer in "
                      f"0..{steps.INT32_MAX}), got {position!r}")
    c = _base(task)
    c.outcome = worker_pb2.COMPLETION_OUTCOME_SUSPENDED
    c.suspend_position = position
    wake_after = _seconds(done, "wake_after_s")
    if wake_after is not None:
        c.wake_after.CopyFrom(wake_after)
    return c


def from_end(task: worker_pb2.LeasedTask, end: RunEnd, log_tail: str = "") -> worker_pb2.Completion:
    """The completion for a run that ended with a done frame or a dead sandbox."""
    if end.done is not None:
        try:
            return from_done(task, end.done)
        except BadDone as e:
            return failed(task, SANDBOX_PROTOCOL, f"the sandbox answered with an invalid done frame: {e}")
    if end.protocol_error:
        return failed(task, SANDBOX_PROTOCOL, f"the sandbox broke the protocol and was killed: "
                      f"{end.protocol_error}", crashed=True)
    stack = f"last output of the sandbox:\n{log_tail}" if log_tail else ""
    return failed(task, SANDBOX_CRASHED, f"sandbox process exited with {describe_exit(end.exit_status)} "
                  f"while running the handler", stack=stack, crashed=True)


def killed_beside(task: worker_pb2.LeasedTask, killed_for: str) -> worker_pb2.Completion:
    """The completion of a task whose sandbox the agent killed because of another task it
    ran (one that broke the protocol): FAILED, retried like a failure, with the crash error
    class, but not CRASHED: this task's code did not crash anything, so it must not count
    toward its type's circuit breaker."""
    return failed(task, SANDBOX_CRASHED, f"the sandbox running this attempt was killed to stop another task "
                  f"it ran ({killed_for}); the attempt will be retried")
