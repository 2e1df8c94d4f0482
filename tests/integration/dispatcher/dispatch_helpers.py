"""Helpers shared by the dispatcher's integration tests."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable

from google.protobuf import duration_pb2

from ratchet.internal.worker.v1 import worker_pb2 as wpb

TOKEN = "host-agent-secret-for-tests"
AUTH = (("authorization", f"Bearer {TOKEN}"),)


async def wait_until(predicate: Callable[[], bool], timeout: float = 5.0, what: str = "condition") -> None:
    """Check `predicate` every 5 ms until true; fail the test after `timeout`."""
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout}s waiting for {what}")
        await asyncio.sleep(0.005)


def seconds(value: float) -> duration_pb2.Duration:
    d = duration_pb2.Duration()
    d.FromNanoseconds(int(value * 1e9))
    return d


async def poll(stub, capacity: int = 10, max_wait: float | None = 2.0, worker: str = "agent-1",
               apps: tuple[str, ...] = (), timeout: float = 10.0) -> list[wpb.LeasedTask]:
    """Run one Poll to its end; all tasks of all messages."""
    request = wpb.PollRequest(worker_id=worker, capacity=capacity, app_ids=list(apps))
    if max_wait is not None:
        request.max_wait.CopyFrom(seconds(max_wait))
    tasks: list[wpb.LeasedTask] = []
    async for message in stub.Poll(request, metadata=AUTH, timeout=timeout):
        tasks.extend(message.tasks)
    return tasks
