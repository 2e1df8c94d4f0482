"""The stub's side of a workflow's step calls: `step` frames out, `step_reply` frames in.

A handler thread running a workflow sends a step frame and blocks on its reply;
the main thread, which reads every frame, hands each step_reply to the thread
waiting for it (`Replies.deliver`). A task makes one call at a time, so one
waiter per task suffices; the `call` number (unique within the stub) tells a
late reply to an abandoned call from the current one.
"""

from __future__ import annotations

import itertools
import sys
import threading
from collections.abc import Callable

from ratchet.workflow import channel as ch

# How long a handler thread waits for the agent's answer to one step frame. The agent
# bounds its own retries of the Step RPC well within this; past it the activation fails
# (retryably) instead of holding its sandbox slot forever.
REPLY_TIMEOUT_S = 60.0


class _Waiter:
    __slots__ = ("call", "event", "reply")

    def __init__(self, call: int):
        self.call = call
        self.event = threading.Event()
        self.reply: dict | None = None


class Replies:
    """The step calls awaiting a reply, by task id."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._waiting: dict[str, _Waiter] = {}
        self._calls = itertools.count(1)  # (next() on a count is atomic under the GIL)

    def expect(self, task_id: str) -> _Waiter:
        """Register the next call of task_id; its number is waiter.call."""
        waiter = _Waiter(next(self._calls))
        with self._lock:
            self._waiting[task_id] = waiter
        return waiter

    def forget(self, task_id: str, waiter: _Waiter) -> None:
        """Stop waiting (a timeout): a reply arriving later is dropped."""
        with self._lock:
            if self._waiting.get(task_id) is waiter:
                del self._waiting[task_id]

    def deliver(self, message: dict) -> None:
        """Hand a step_reply to the thread awaiting that (task_id, call); drop any other."""
        task_id, call = str(message.get("task_id")), message.get("call")
        with self._lock:
            waiter = self._waiting.get(task_id)
            if waiter is None or waiter.call != call:
                waiter = None
            else:
                del self._waiting[task_id]
        if waiter is None:
            print(f"ratchet sandbox: dropping a step_reply for task {task_id!r} call {call!r} that nobody awaits",
                  file=sys.stderr)
            return
        waiter.reply = message
        waiter.event.set()


class StubChannel:
    """A StepChannel over the agent's socket for one activation of task_id."""

    def __init__(self, replies: Replies, send: Callable[[dict], None], task_id: str,
                 timeout_s: float = REPLY_TIMEOUT_S):
        self._replies = replies
        self._send = send
        self._task_id = task_id
        self._timeout_s = timeout_s

    def call(self, request: dict) -> dict:
        """Send request as a step frame and wait (bounded) for its step_reply."""
        waiter = self._replies.expect(self._task_id)
        self._send({"type": "step", "task_id": self._task_id, "call": waiter.call, **request})
        if not waiter.event.wait(self._timeout_s):
            self._replies.forget(self._task_id, waiter)
        if waiter.reply is not None:  # (also one delivered between the timeout and forget)
            return waiter.reply
        return ch.unavailable(f"the host agent did not answer step call {waiter.call} ({request.get('op')} of "
                              f"{request.get('kind')} {request.get('name')!r}) within {self._timeout_s:g} s")
