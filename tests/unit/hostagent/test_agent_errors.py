"""The host agent's errors: the status each answers (libs/rpc/errors) and the
error_class and message an attempt it could not run reports."""

from __future__ import annotations

import grpc
import pytest

from ratchet.libs.rpc.errors import status_of
from ratchet.services.hostagent.errors import (
    BundleInvalid,
    ControlUnavailable,
    NoActiveDeployment,
    SandboxStartFailed,
    task_error_for,
)


@pytest.mark.parametrize("cls, code, error_class", [
    (NoActiveDeployment, grpc.StatusCode.FAILED_PRECONDITION, "NoActiveDeployment"),
    (ControlUnavailable, grpc.StatusCode.UNAVAILABLE, "DeploymentUnavailable"),
    (BundleInvalid, grpc.StatusCode.DATA_LOSS, "BundleInvalid"),
    (SandboxStartFailed, grpc.StatusCode.UNAVAILABLE, "SandboxStartFailed"),
])
def test_each_error_has_its_code_and_error_class(cls, code, error_class):
    err = cls("what went wrong")
    assert status_of(err, "ListSandboxes").code == code
    assert task_error_for(err) == (error_class, "what went wrong")


def test_anything_else_is_a_host_agent_error():
    assert task_error_for(KeyError("k")) == ("HostAgentError",
                                             "the host agent failed to run the attempt: KeyError: 'k'")
