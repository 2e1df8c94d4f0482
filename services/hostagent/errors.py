"""The host agent's errors: the shared vocabulary (libs/rpc/errors), each subclass adding
the `error_class` a customer reads on an attempt the agent could not run.

An attempt the agent cannot run (no deployment, a bad bundle, a sandbox that
will not start) is completed FAILED with one of these, not fatal, so the
platform retries it with backoff and the customer reads why (`task_error_for`).
An error raised while serving an RPC becomes its status at the shared edge
(libs/rpc/errors.rpc).
"""

from __future__ import annotations

from ratchet.libs.rpc.errors import DataLoss, FailedPrecondition, Unavailable

# error_class values the agent reports on completions.
SANDBOX_CRASHED = "SandboxCrashed"
SANDBOX_PROTOCOL = "SandboxProtocolError"
HOST_AGENT_ERROR = "HostAgentError"


class NoActiveDeployment(FailedPrecondition):
    """The task's app has no active deployment."""

    error_class = "NoActiveDeployment"


class ControlUnavailable(Unavailable):
    """The control service could not be reached in time."""

    error_class = "DeploymentUnavailable"


class BundleInvalid(DataLoss):
    """A bundle failed its digest check or holds an unsafe path."""

    error_class = "BundleInvalid"


class SandboxStartFailed(Unavailable):
    """A sandbox exited or stayed silent before saying ready."""

    error_class = "SandboxStartFailed"


# The errors an attempt reports as they are (their error_class and message).
REPORTED = (NoActiveDeployment, ControlUnavailable, BundleInvalid, SandboxStartFailed)


def task_error_for(error: Exception) -> tuple[str, str]:
    """(error_class, message) recorded on an attempt the agent could not run."""
    if isinstance(error, REPORTED):
        return error.error_class, error.message
    return HOST_AGENT_ERROR, f"the host agent failed to run the attempt: {type(error).__name__}: {error}"
