"""How a WorkflowContext reaches the run's step log: one request, one reply.

A request is the body of a `step` frame (sdk/ratchet/sandbox/protocol.py):
op, position, name, kind, result, error, fatal, duration_s, match, version,
children, on_failure. A reply is the body of a `step_reply` frame: status,
attempt, result, error, wake_after_s, logged_name, logged_kind, message, and
for a fan-out "children" (its outcomes) or for a refusal "fatal"; status
"cancelled" at a checkpoint of a cancelled run that has compensations. The sandbox stub carries them
to the host agent (which adds the lease and calls DispatchService.Step);
ratchet.testing answers them from an in-memory log under the same rules.
"""

from __future__ import annotations

from typing import Protocol

# The reply statuses (the agent's mapping of StepStatus, plus "lost" and "error").
RUN = "run"
DONE = "done"
SUSPEND = "suspend"
MISMATCH = "mismatch"
ABSENT = "absent"
LOST = "lost"
ERROR = "error"
# The run was cancelled and has compensations: stop here and run them (StepStatus CANCELLED).
CANCELLED = "cancelled"
STATUSES = frozenset({RUN, DONE, SUSPEND, MISMATCH, ABSENT, LOST, ERROR, CANCELLED})

OPS = ("begin", "commit")
KINDS = ("step", "version", "sleep", "wait", "parallel", "child", "on_cancel", "compensate")
ON_FAILURE = ("collect", "fail_fast")


class StepChannel(Protocol):
    """Carries one step request of one activation and returns its reply.

    `call` blocks until the reply arrives. It never raises for the platform's
    sake: an unreachable platform or a reply that does not come in time is the
    reply {"status": "error", "message": ...}.
    """

    def call(self, request: dict) -> dict:
        """The reply to request (a step frame's fields without type, task_id, call)."""
        ...


def request(op: str, kind: str, position: int, name: str, **fields: object) -> dict:
    """A step request with every field present (null when it does not apply), so the
    agent reads one shape whatever the kind."""
    out: dict = {"op": op, "position": position, "name": name, "kind": kind, "result": None, "error": None,
                 "fatal": False, "duration_s": None, "match": None, "version": None, "children": None,
                 "on_failure": None}
    out.update(fields)
    return out


def unavailable(message: str) -> dict:
    """The reply standing in for one that never came."""
    return {"status": ERROR, "message": message}
