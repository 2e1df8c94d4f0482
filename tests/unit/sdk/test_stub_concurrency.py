"""The stub runs up to `concurrency` tasks at once on reused threads, refuses
one more, and cancels by task id."""

from __future__ import annotations

import socket
import threading

from ratchet.sandbox.protocol import encode, recv_frame
from ratchet.sandbox.runner import Stub
from ratchet.task import SPEC_ATTR, task

GATE = threading.Event()


@task()
def waits(ctx, payload):
    while not GATE.is_set():
        if ctx.wait_cancelled(0.01):
            return "stopped"
    return threading.current_thread().name


def _run(task_id: str) -> bytes:
    return encode({"type": "run", "task_id": task_id, "attempt": 1, "max_attempts": 1, "lease_epoch": 1,
                   "task_type": "waits", "payload": "null"})


def test_tasks_run_side_by_side_one_more_is_refused_and_threads_are_reused():
    agent, stub_end = socket.socketpair()
    stub = Stub(stub_end, "app", [getattr(waits, SPEC_ATTR)], concurrency=2)
    server = threading.Thread(target=stub.serve, daemon=True)
    server.start()
    agent.settimeout(10)
    assert recv_frame(agent)["type"] == "ready"
    GATE.clear()
    agent.sendall(_run("a") + _run("b") + _run("c") + encode({"type": "cancel", "task_id": "b"}))
    first = [recv_frame(agent), recv_frame(agent)]
    by_id = {f["task_id"]: f for f in first}
    assert by_id["c"]["error"]["error_class"] == "SandboxBusy"
    assert by_id["b"]["outcome"] == "canceled" and by_id["b"]["result"] == '"stopped"'
    GATE.set()
    done_a = recv_frame(agent)
    assert done_a["task_id"] == "a" and done_a["outcome"] == "succeeded"
    threads = {done_a["result"]}
    for n in range(4):  # later tasks run on the same two threads
        agent.sendall(_run(f"x{n}"))
        threads.add(recv_frame(agent)["result"])
    assert len(threads) <= 2
    agent.sendall(encode({"type": "shutdown"}))
    server.join(5)
    assert not server.is_alive()
