"""The stub's `run` mode: serve one host agent over a Unix socket.

The main thread reads frames so cancel messages arrive while a handler runs;
the handler runs in a worker thread. One task at a time.
"""

from __future__ import annotations

import datetime as dt
import json
import os
import socket
import sys
import threading

from ratchet.context import TaskContext, utc
from ratchet.sandbox.execute import Outcome, execute, platform_failure
from ratchet.sandbox.protocol import ProtocolError, encode, recv_frame
from ratchet.task import TaskSpec


class Stub:
    """Runs the handlers of one app version for the agent at the other end of sock."""

    def __init__(self, sock: socket.socket, module: str, specs: list[TaskSpec]):
        self._sock = sock
        self._module = module
        self._specs = {s.name: s for s in specs}
        self._send_lock = threading.Lock()
        self._state_lock = threading.Lock()
        self._current: tuple[str, TaskContext] | None = None

    def send(self, message: dict) -> None:
        """Write one frame; if the agent is gone there is nobody to work for, so exit."""
        data = encode(message)
        try:
            with self._send_lock:
                self._sock.sendall(data)
        except OSError:
            _exit(0)

    def serve(self) -> None:
        """Announce readiness, then obey the agent until it hangs up or says shutdown."""
        self.send({"type": "ready", "pid": os.getpid(), "handlers": sorted(self._specs)})
        while True:
            message = recv_frame(self._sock)
            if message is None or message["type"] == "shutdown":
                return
            if message["type"] == "run":
                self._start(message)
            elif message["type"] == "cancel":
                self._cancel(message.get("task_id"))

    def _start(self, message: dict) -> None:
        task_id = str(message.get("task_id", ""))
        try:
            last_checkpoint = _last_checkpoint(message.get("last_checkpoint"))
        except ValueError as e:
            self.send(platform_failure("CheckpointNotJSON", str(e)).frame(task_id))
            return
        ctx = TaskContext(task_id=task_id, attempt=int(message.get("attempt", 1)),
                          max_attempts=int(message.get("max_attempts", 1)),
                          lease_epoch=int(message.get("lease_epoch", 0)),
                          task_type=str(message.get("task_type", "")),
                          last_checkpoint=last_checkpoint, schedule_id=message.get("schedule_id") or None,
                          scheduled_time=_scheduled_time(message.get("scheduled_time")),
                          on_heartbeat=lambda: self.send({"type": "heartbeat", "task_id": task_id}),
                          on_checkpoint=lambda text: self.send({"type": "checkpoint", "task_id": task_id,
                                                                "value": text}))
        with self._state_lock:
            if self._current is not None:
                busy = Outcome("failed", error={"error_class": "SandboxBusy", "stack": "",
                                                "message": "the sandbox is already running a task"})
                self.send(busy.frame(task_id))
                return
            self._current = (task_id, ctx)
        thread = threading.Thread(target=self._run, args=(ctx, message.get("payload") or ""),
                                  name=f"handler-{task_id}", daemon=True)
        thread.start()

    def _run(self, ctx: TaskContext, payload: str) -> None:
        spec = self._specs.get(ctx.task_type)
        if spec is None:
            outcome = platform_failure(
                "UnknownTaskType",
                f"task type {ctx.task_type!r} is not declared by module {self._module!r} of this app version "
                f"(it declares {sorted(self._specs)}); deploy a version that declares it")
        else:
            outcome = execute(spec, ctx, payload)
        ctx._end()
        with self._state_lock:
            self._current = None
        self.send(outcome.frame(ctx.task_id))

    def _cancel(self, task_id: str | None) -> None:
        with self._state_lock:
            current = self._current
        if current is not None and (task_id is None or task_id == current[0]):
            current[1]._request_cancel()


def _last_checkpoint(text: object) -> object:
    """The decoded checkpoint of an earlier attempt (None when there is none)."""
    if text is None:
        return None
    if not isinstance(text, str):
        raise ValueError(f"the stored checkpoint is not JSON text but {type(text).__name__}")
    try:
        return json.loads(text)
    except json.JSONDecodeError as e:
        raise ValueError(f"the stored checkpoint is not valid JSON: {e}") from None


def _scheduled_time(text: object) -> dt.datetime | None:
    """The schedule slot as an aware UTC datetime; a malformed value is reported and dropped."""
    if not text:
        return None
    try:
        return utc(dt.datetime.fromisoformat(str(text)))
    except ValueError:
        print(f"ratchet sandbox: ignoring malformed scheduled_time {text!r}", file=sys.stderr)
        return None


def _exit(code: int) -> None:
    # Handler threads may still run; nothing must outlive the agent's wish to stop us.
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except Exception:  # noqa: BLE001 -- best effort on the way out
            pass
    os._exit(code)


def serve(socket_path: str, module: str, specs: list[TaskSpec]) -> None:
    """Connect to the agent's socket and serve until it hangs up; never returns."""
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        sock.connect(socket_path)
    except OSError as e:
        print(f"ratchet sandbox: cannot connect to the host agent at {socket_path}: {e}", file=sys.stderr)
        _exit(3)
    try:
        Stub(sock, module, specs).serve()
    except ProtocolError as e:
        print(f"ratchet sandbox: protocol error from the host agent: {e}", file=sys.stderr)
        _exit(4)
    _exit(0)
