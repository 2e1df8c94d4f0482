"""What the deploy preflight warns of: a task, or a workflow run's activation, whose type the
active deployment no longer declares fails at the stub with a fatal UnknownTaskType naming the
type and what the version declares (no retry: the same version would fail it again)."""

from __future__ import annotations

import socket
import threading

import pytest

from ratchet.sandbox.protocol import encode, recv_frame
from ratchet.sandbox.runner import Stub
from ratchet.task import SPEC_ATTR, task

pytestmark = pytest.mark.timeout(30)


@task()
def send(ctx, payload):
    return payload


def _run(task_id: str, task_type: str) -> bytes:
    return encode({"type": "run", "task_id": task_id, "attempt": 2, "max_attempts": 5, "lease_epoch": 1,
                   "task_type": task_type, "payload": "null"})


def test_a_task_or_run_of_a_dropped_type_fails_fatally_with_unknown_task_type():
    agent, stub_end = socket.socketpair()
    stub = Stub(stub_end, "app", [getattr(send, SPEC_ATTR)])
    server = threading.Thread(target=stub.serve, daemon=True)
    server.start()
    agent.settimeout(10)
    assert recv_frame(agent)["type"] == "ready"
    for task_id, task_type in (("t1", "resize"), ("r1", "onboard")):  # a dropped task type, a dropped workflow
        agent.sendall(_run(task_id, task_type))
        done = recv_frame(agent)
        assert (done["task_id"], done["outcome"], done["fatal"]) == (task_id, "failed", True)
        assert done["error"]["error_class"] == "UnknownTaskType"
        assert repr(task_type) in done["error"]["message"] and "['send']" in done["error"]["message"]
    agent.sendall(_run("t2", "send"))
    assert recv_frame(agent)["outcome"] == "succeeded"
    agent.sendall(encode({"type": "shutdown"}))
    server.join(5)
    assert not server.is_alive()
