"""Named points in server code where a test can hold a request, to force one
specific interleaving across processes (Temporal's test "gates").

Server side, one line at the point of interest::

    await gates.reach("history.complete.before_commit")   # in async code
    gates.reach("history.timers.claimed")                  # in sync code (blocks the thread)

``reach`` is a no-op unless the process was started with ``RATCHET_GATES_DIR``
set to a folder, and even then costs one ``stat`` unless the test armed that
gate. An armed gate holds the caller until the test releases it (or its
timeout passes, so a forgotten gate never wedges a server); the test may also
release it with ``action="crash"`` (the process exits at once with status 137,
like SIGKILL at exactly that point) or ``action="raise"`` (``GateError`` is
raised there). The test side is ``ratchet.libs.gates.control.Gates``.

Protocol (files in the gates folder; names are ``[a-z0-9._-]+``):
``NAME.arm`` (JSON: hits, timeout_s) is written by the test; the server claims
hit k by creating ``NAME.hit.k`` exclusively (JSON: pid, time) and waits for
``NAME.release.k`` or ``NAME.release`` (JSON: action); on timeout it writes
``NAME.timeout.k`` and goes on. Callers beyond ``hits`` pass through.
"""

from __future__ import annotations

import asyncio
import functools
import json
import os
import re
import time

ENV = "RATCHET_GATES_DIR"
POLL_S = 0.005
_NAME = re.compile(r"^[a-z0-9][a-z0-9._-]{0,120}$")


class GateError(RuntimeError):
    """Raised at a gate the test released with action="raise"."""


class _Done:
    """An already-finished awaitable: ``await reach(...)`` costs nothing when idle."""

    __slots__ = ()

    def __await__(self):
        return
        yield  # pragma: no cover - makes this a generator


DONE = _Done()


@functools.cache
def gates_dir() -> str | None:
    """The folder named by RATCHET_GATES_DIR, read once per process (a process's environment
    is set before it starts; every reach() asks)."""
    return os.environ.get(ENV) or None


def check_name(name: str) -> str:
    if not _NAME.match(name):
        raise ValueError(f"gate name {name!r} must match {_NAME.pattern}")
    return name


def reach(name: str):
    """Pass the named point. Returns an awaitable: await it in async code.

    Idle (no gates folder, or this gate not armed): returns at once. Armed,
    inside a running event loop: returns a future that completes when the test
    releases the gate, without blocking other coroutines. Armed, in plain
    synchronous code: blocks this thread until released, then returns.
    """
    folder = gates_dir()
    if folder is None:
        return DONE
    arm = os.path.join(folder, name + ".arm")
    if not os.path.exists(arm):
        return DONE
    slot = _claim(folder, name, arm)
    if slot is None:
        return DONE
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        _act(_wait_sync(folder, name, *slot))
        return DONE
    return _wait_async(folder, name, *slot)


def _claim(folder: str, name: str, arm: str) -> tuple[int, float] | None:
    """Take the first free hit slot of an armed gate: (k, timeout_s), or None."""
    try:
        with open(arm) as f:
            spec = json.load(f)
    except (OSError, ValueError):
        return None
    for k in range(1, int(spec.get("hits", 1)) + 1):
        try:  # O_EXCL makes the claim exclusive across processes and threads
            fd = os.open(os.path.join(folder, f"{name}.hit.{k}"), os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644)
        except FileExistsError:
            continue
        os.write(fd, json.dumps({"pid": os.getpid(), "time": time.time()}).encode())
        os.close(fd)
        return k, float(spec.get("timeout_s", 30))
    return None


def _released(folder: str, name: str, k: int) -> str | None:
    for path in (os.path.join(folder, f"{name}.release.{k}"), os.path.join(folder, f"{name}.release")):
        try:
            with open(path) as f:
                return json.loads(f.read() or "{}").get("action", "continue")
        except FileNotFoundError:
            continue
        except ValueError:
            return "continue"
    return None


def _timed_out(folder: str, name: str, k: int) -> str:
    with open(os.path.join(folder, f"{name}.timeout.{k}"), "w") as f:
        f.write(json.dumps({"pid": os.getpid(), "time": time.time()}))
    return "continue"


def _wait_sync(folder: str, name: str, k: int, timeout_s: float) -> str:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        action = _released(folder, name, k)
        if action is not None:
            return action
        time.sleep(POLL_S)
    return _timed_out(folder, name, k)


async def _wait_async(folder: str, name: str, k: int, timeout_s: float) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        action = _released(folder, name, k)
        if action is not None:
            _act(action)
            return
        await asyncio.sleep(POLL_S)
    _act(_timed_out(folder, name, k))


def _act(action: str) -> None:
    if action == "crash":
        os._exit(137)  # no cleanup, no flush: the same as SIGKILL at this exact point
    if action == "raise":
        raise GateError("released with action=raise by the test")
