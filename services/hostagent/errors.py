"""Host agent errors, and the one place they become gRPC statuses and
attempt failures.

An attempt the agent cannot run (no deployment, a bad bundle, a sandbox that
will not start) is completed FAILED with one of these classes, not fatal, so
the platform retries it with backoff and the customer reads why.
"""

from __future__ import annotations

import grpc

# error_class values the agent reports on completions.
SANDBOX_CRASHED = "SandboxCrashed"
SANDBOX_PROTOCOL = "SandboxProtocolError"


class AgentError(Exception):
    """Base of the agent's domain errors; error_class is what the customer reads."""

    error_class = "HostAgentError"
    code = grpc.StatusCode.INTERNAL


class NoActiveDeployment(AgentError):
    """The task's app has no active deployment."""

    error_class = "NoActiveDeployment"
    code = grpc.StatusCode.FAILED_PRECONDITION


class ControlUnavailable(AgentError):
    """The control service could not be reached in time."""

    error_class = "DeploymentUnavailable"
    code = grpc.StatusCode.UNAVAILABLE


class BundleInvalid(AgentError):
    """A bundle failed its digest check or holds an unsafe path."""

    error_class = "BundleInvalid"
    code = grpc.StatusCode.DATA_LOSS


class SandboxStartFailed(AgentError):
    """A sandbox exited or stayed silent before saying ready."""

    error_class = "SandboxStartFailed"
    code = grpc.StatusCode.UNAVAILABLE


def status_for(error: Exception) -> tuple[grpc.StatusCode, str]:
    """The gRPC status for an error raised while serving an RPC."""
    if isinstance(error, AgentError):
        return error.code, str(error)
    return grpc.StatusCode.INTERNAL, "internal error in the host agent"


def task_error_for(error: Exception) -> tuple[str, str]:
    """(error_class, message) recorded on an attempt the agent could not run."""
    if isinstance(error, AgentError):
        return error.error_class, str(error)
    return "HostAgentError", f"the host agent failed to run the attempt: {type(error).__name__}: {error}"
