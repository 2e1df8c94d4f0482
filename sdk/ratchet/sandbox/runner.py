"""The stub's `run` mode: serve one host agent over a Unix socket.

The main thread reads frames so cancel messages arrive while handlers run;
handlers run on a pool of worker threads, at most `concurrency` tasks at
once (the agent never sends more; one more is refused as SandboxBusy). The
threads are started once and reused: starting a thread per task was a
quarter of the stub's time in the drain profile. Frames going out are
combined: a thread that finds another one writing leaves its frame for that
writer, so a burst of done frames leaves in one sendall.

A workflow runs on the same threads through ratchet.workflow's runner: its
thread sends `step` frames and blocks on their replies, which the main thread
routes to it (sandbox/steps.py). Workflows are looked up only when a task type
is not a plain task's, so a plain task's path does no more than before.
"""

from __future__ import annotations

import datetime as dt
import json
import os
import queue
import socket
import sys
import threading

from ratchet.context import TaskContext, utc
from ratchet.sandbox.execute import Outcome, execute, platform_failure
from ratchet.sandbox.protocol import HEADER, MAX_AGENT_FRAME_BYTES, ProtocolError, check_length, decode_body, encode
from ratchet.sandbox.steps import REPLY_TIMEOUT_S, Replies, StubChannel
from ratchet.task import TaskSpec
from ratchet.workflow.context import WorkflowContext
from ratchet.workflow.runner import run_workflow

_READ_BUFFER = 256 * 1024


class Stub:
    """Runs the handlers of one app version for the agent at the other end of sock."""

    def __init__(self, sock: socket.socket, module: str, specs: list[TaskSpec], concurrency: int = 1,
                 step_timeout_s: float = REPLY_TIMEOUT_S):
        self._sock = sock
        self._module = module
        self._specs = {s.name: s for s in specs if s.kind != "workflow"}
        self._workflows = {s.name: s for s in specs if s.kind == "workflow"}
        self._replies = Replies()
        self._step_timeout_s = step_timeout_s
        self._concurrency = max(1, concurrency)
        self._out_lock = threading.Lock()
        self._out: list[bytes] = []
        self._writing = False
        self._state_lock = threading.Lock()
        self._current: dict[str, TaskContext] = {}
        self._work: queue.SimpleQueue = queue.SimpleQueue()
        self._workers = 0
        self._idle_workers = 0

    def send(self, message: dict) -> None:
        """Write one frame; if the agent is gone there is nobody to work for, so exit."""
        data = encode(message)
        with self._out_lock:
            self._out.append(data)
            if self._writing:
                return  # the thread writing now sends it with its next batch
            self._writing = True
        while True:
            with self._out_lock:
                batch, self._out = self._out, []
                if not batch:
                    self._writing = False
                    return
            try:
                self._sock.sendall(b"".join(batch))
            except OSError:
                _exit(0)

    def serve(self) -> None:
        """Announce readiness, then obey the agent until it hangs up or says shutdown."""
        self.send({"type": "ready", "pid": os.getpid(), "handlers": sorted([*self._specs, *self._workflows])})
        reader = self._sock.makefile("rb", buffering=_READ_BUFFER)
        while True:
            message = _read_frame(reader)
            if message is None or message["type"] == "shutdown":
                return
            if message["type"] == "run":
                self._start(message)
            elif message["type"] == "step_reply":
                self._replies.deliver(message)
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
            if len(self._current) >= self._concurrency or task_id in self._current:
                busy = Outcome("failed", error={"error_class": "SandboxBusy", "stack": "",
                                                "message": f"the sandbox is already running {len(self._current)} "
                                                           f"task(s), its limit, or this very task"})
                self.send(busy.frame(task_id))
                return
            self._current[task_id] = ctx
            spawn = self._idle_workers == 0 and self._workers < self._concurrency
            if spawn:
                self._workers += 1
            else:
                self._idle_workers -= 1
        self._work.put((ctx, message.get("payload") or ""))
        if spawn:
            threading.Thread(target=self._worker, name=f"handler-{self._workers}", daemon=True).start()

    def _worker(self) -> None:
        while True:
            ctx, payload = self._work.get()
            self._run(ctx, payload)

    def _run(self, ctx: TaskContext, payload: str) -> None:
        spec = self._specs.get(ctx.task_type)
        if spec is None:
            outcome = self._run_other(ctx, payload)
        else:
            outcome = execute(spec, ctx, payload)
        ctx._end()
        with self._state_lock:
            # Free the slot and the thread together: busy threads == tasks in flight.
            self._current.pop(ctx.task_id, None)
            self._idle_workers += 1
        self.send(outcome.frame(ctx.task_id))

    def _run_other(self, ctx: TaskContext, payload: str) -> Outcome:
        """A workflow's activation, or the failure of a task type this version does not declare."""
        spec = self._workflows.get(ctx.task_type)
        if spec is None:
            return platform_failure(
                "UnknownTaskType",
                f"task type {ctx.task_type!r} is not declared by module {self._module!r} of this app version "
                f"(it declares {sorted([*self._specs, *self._workflows])}); deploy a version that declares it")
        channel = StubChannel(self._replies, self.send, ctx.task_id, self._step_timeout_s)
        return run_workflow(spec, WorkflowContext.of(ctx, channel, spec.retry), payload)

    def _cancel(self, task_id: str | None) -> None:
        with self._state_lock:
            targets = list(self._current.values()) if task_id is None else [self._current.get(task_id)]
        for ctx in targets:
            if ctx is not None:
                ctx._request_cancel()


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


def _read_frame(reader) -> dict | None:
    """The next message from a buffered reader (a burst of frames costs one recv), None at the end."""
    header = reader.read(HEADER.size)
    if not header:
        return None
    if len(header) < HEADER.size:
        raise ProtocolError("peer closed the socket in the middle of a frame")
    length = check_length(HEADER.unpack(header)[0], MAX_AGENT_FRAME_BYTES)  # (the agent is trusted)
    body = reader.read(length)
    if len(body) < length:
        raise ProtocolError("peer closed the socket in the middle of a frame")
    return decode_body(body)


def _exit(code: int) -> None:
    # Handler threads may still run; nothing must outlive the agent's wish to stop us.
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except Exception:  # noqa: BLE001 -- best effort on the way out
            pass
    os._exit(code)


def serve(socket_path: str, module: str, specs: list[TaskSpec], concurrency: int = 1) -> None:
    """Connect to the agent's socket and serve (at most `concurrency` tasks at once)
    until it hangs up; never returns."""
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        sock.connect(socket_path)
    except OSError as e:
        print(f"ratchet sandbox: cannot connect to the host agent at {socket_path}: {e}", file=sys.stderr)
        _exit(3)
    try:
        Stub(sock, module, specs, concurrency).serve()
    except ProtocolError as e:
        print(f"ratchet sandbox: protocol error from the host agent: {e}", file=sys.stderr)
        _exit(4)
    _exit(0)
