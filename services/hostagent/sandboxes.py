"""One sandbox: a separate OS process running `python -m ratchet.sandbox run`,
connected to the agent over a private Unix socket.

The process gets a scrubbed environment (PATH, LANG, a private HOME and
TMPDIR, nothing else of the agent's) and its own process group, and it sets
PR_SET_PDEATHSIG=SIGKILL on itself before loading customer code (see
ratchet.sandbox.lifeline for why not in a preexec hook), so it dies with the
agent. No Python runs between fork and exec.
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import logging
import os
import pathlib
import shutil
import signal
import socket
import struct
import subprocess
import uuid
from collections.abc import Callable

from ratchet.context import MAX_CHECKPOINT_BYTES
from ratchet.sandbox.protocol import ProtocolError, encode, read_frame
from ratchet.services.hostagent import steps
from ratchet.services.hostagent.errors import SandboxStartFailed
from ratchet.services.hostagent.steps import StepFrame

log = logging.getLogger(__name__)

LOG_TAIL_BYTES = 2048
STOP_GRACE_S = 1.0

@dataclasses.dataclass
class RunEnd:
    """How a run request ended: a "done" frame, or the process went away."""

    done: dict | None = None
    exit_status: int | None = None
    protocol_error: str | None = None


@dataclasses.dataclass(frozen=True)
class SandboxDirs:
    """Where sandboxes keep their sockets, homes and output logs."""

    sockets: pathlib.Path
    homes: pathlib.Path
    logs: pathlib.Path

    @classmethod
    def under(cls, work_dir: pathlib.Path) -> SandboxDirs:
        dirs = cls(work_dir / "sockets", work_dir / "homes", work_dir / "logs")
        for d in (dirs.sockets, dirs.homes, dirs.logs):
            d.mkdir(parents=True, exist_ok=True)
            os.chmod(d, 0o700)
        return dirs


def sandbox_env(home: pathlib.Path) -> dict[str, str]:
    """The whole environment of a sandbox: nothing secret can leak through it."""
    env = {"PATH": os.environ.get("PATH", os.defpath), "HOME": str(home), "TMPDIR": str(home / "tmp"),
           "PYTHONUNBUFFERED": "1", "PYTHONDONTWRITEBYTECODE": "1"}
    if "LANG" in os.environ:
        env["LANG"] = os.environ["LANG"]
    return env


def describe_exit(status: int | None) -> str:
    """'signal 9 (SIGKILL)' or 'status 3'."""
    if status is None:
        return "an unknown status"
    if status < 0:
        try:
            name = signal.Signals(-status).name
        except ValueError:
            name = "unknown"
        return f"signal {-status} ({name})"
    return f"status {status}"


@dataclasses.dataclass
class _Run:
    """One task in flight in a sandbox."""

    attempt: int
    future: asyncio.Future
    on_checkpoint: Callable[[bytes], None] | None
    on_step: Callable[[StepFrame], None] | None = None


class Sandbox:
    """A sandbox process for one (app, version), running up to `concurrency`
    tasks at once (`run` per task; the pool keeps count in `load`)."""

    def __init__(self, *, app_id: str, digest: str, module: str, bundle_dir: pathlib.Path, dirs: SandboxDirs,
                 concurrency: int = 1):
        self.sandbox_id = uuid.uuid4().hex[:12]
        self.app_id, self.digest, self.module, self.bundle_dir = app_id, digest, module, bundle_dir
        self.concurrency = max(1, concurrency)
        self.load = 0  # tasks the pool has placed here and not taken back
        self._dirs = dirs
        self.home = dirs.homes / self.sandbox_id
        self.log_path = dirs.logs / f"{self.sandbox_id}.log"
        self.process: asyncio.subprocess.Process | None = None
        self.handlers: list[str] = []
        self.last_handler_beat: float | None = None
        self.exit_status: int | None = None
        self.killed_for: str | None = None  # why the agent killed it, if it did
        self.retired_for: str | None = None  # set once it must take no new task (pool.retire)
        self.zombies: set[str] = set()  # tasks still running here whose outcome no longer counts
        self.exited = asyncio.Event()
        self._writer: asyncio.StreamWriter | None = None
        self._ready: asyncio.Future | None = None
        self._runs: dict[str, _Run] = {}  # task_id -> its run, for done/checkpoint frames and ListSandboxes
        self._out: list[bytes] = []  # frames queued this loop iteration, written together
        self._protocol_error: str | None = None
        self._tasks: list[asyncio.Task] = []

    def running(self) -> list[tuple[str, int]]:
        """(task_id, attempt) of every task in flight here, for ListSandboxes."""
        return [(task_id, run.attempt) for task_id, run in self._runs.items()]

    @property
    def pid(self) -> int:
        return self.process.pid if self.process else 0

    @property
    def alive(self) -> bool:
        return self.process is not None and self.process.returncode is None

    async def start(self, python: str, timeout_s: float) -> None:
        """Spawn the process and wait for its ready frame; SandboxStartFailed otherwise."""
        loop = asyncio.get_running_loop()
        self._ready = loop.create_future()
        # Nobody may be waiting any more when a late exit fails it: mark the error as seen.
        self._ready.add_done_callback(lambda f: f.cancelled() or f.exception())
        connected: asyncio.Future = loop.create_future()
        sock_path = self._dirs.sockets / f"{self.sandbox_id}.sock"
        server = await asyncio.start_unix_server(
            lambda r, w: connected.set_result((r, w)) if not connected.done() else w.close(), path=str(sock_path))
        os.chmod(sock_path, 0o600)
        try:
            await self._spawn(python, sock_path)
            await asyncio.wait_for(self._handshake(connected), timeout_s)
        except TimeoutError:
            self.kill()
            raise SandboxStartFailed(f"sandbox for {self.digest} did not become ready within {timeout_s:g}s"
                                     f"{self._log_tail_suffix()}") from None
        finally:
            server.close()
            sock_path.unlink(missing_ok=True)

    async def _spawn(self, python: str, sock_path: pathlib.Path) -> None:
        (self.home / "tmp").mkdir(parents=True, exist_ok=True)
        os.chmod(self.home, 0o700)
        with open(self.log_path, "ab") as out:  # noqa: ASYNC230 - a local file opened for append: no wait
            self.process = await asyncio.create_subprocess_exec(
                python, "-m", "ratchet.sandbox", "run", "--socket", str(sock_path),
                "--app-dir", str(self.bundle_dir), "--module", self.module, "--parent-pid", str(os.getpid()),
                "--concurrency", str(self.concurrency),
                cwd=str(self.bundle_dir), env=sandbox_env(self.home), stdin=subprocess.DEVNULL,
                stdout=out, stderr=subprocess.STDOUT, close_fds=True, process_group=0)
        self._tasks.append(asyncio.ensure_future(self._watch_exit()))

    async def _handshake(self, connected: asyncio.Future) -> None:
        exited = asyncio.ensure_future(self.exited.wait())
        try:
            await asyncio.wait([connected, exited], return_when=asyncio.FIRST_COMPLETED)
        finally:
            exited.cancel()
        if not connected.done():
            raise SandboxStartFailed(f"sandbox exited with {describe_exit(self.exit_status)} before it was "
                                     f"ready{self._log_tail_suffix()}")
        reader, writer = connected.result()
        peer_pid = _peer_pid(writer)
        if peer_pid != self.pid:
            writer.close()
            self.kill()
            raise SandboxStartFailed(f"unexpected process {peer_pid} connected to sandbox {self.sandbox_id}")
        self._writer = writer
        self._tasks.append(asyncio.ensure_future(self._read(reader)))
        await asyncio.shield(self._ready)

    async def _read(self, reader: asyncio.StreamReader) -> None:
        try:
            while True:
                message = await read_frame(reader)
                if message is None:
                    break
                self._on_message(message)
        except ProtocolError as e:
            self._protocol_error = str(e)
        except ConnectionError:
            pass  # a killed process resets its end of the socket: that is an exit, not a protocol breach
        # Without its socket the sandbox is useless; make sure it is gone.
        self.kill()

    def _on_message(self, message: dict) -> None:
        kind = message["type"]
        if kind == "ready" and self._ready and not self._ready.done():
            self.handlers = [str(h) for h in message.get("handlers", [])]
            self._ready.set_result(None)
        elif kind == "done":
            run = self._run_of(message)  # untrusted: it can only end a task it was handed
            if run is not None and not run.future.done():
                run.future.set_result(RunEnd(done=message))
        elif kind == "heartbeat":
            self.last_handler_beat = asyncio.get_running_loop().time()
        elif kind == "checkpoint":
            self._on_checkpoint(message)
        elif kind == "step":
            self._on_step(message)
        else:
            raise ProtocolError(f"unexpected {kind!r} frame from sandbox {self.sandbox_id}")

    def _run_of(self, message: dict) -> _Run | None:
        # A task_id that is not a string names no run (and a list must not raise TypeError).
        task_id = message.get("task_id")
        return self._runs.get(task_id) if isinstance(task_id, str) else None

    def _on_checkpoint(self, message: dict) -> None:
        # Untrusted input: checked here so only well-formed JSON within the limit ever reaches history.
        value = message.get("value")
        if not isinstance(value, str):
            raise ProtocolError("a checkpoint's value must be JSON text")
        data = value.encode("utf-8")
        if len(data) > MAX_CHECKPOINT_BYTES:
            raise ProtocolError(f"a checkpoint of {len(data)} bytes is over the {MAX_CHECKPOINT_BYTES}-byte limit")
        try:
            json.loads(value, parse_constant=_no_constant)
        except (json.JSONDecodeError, ValueError) as e:
            raise ProtocolError(f"a checkpoint's value is not valid JSON: {e}") from None
        run = self._run_of(message)
        if run is None or run.on_checkpoint is None:
            # A thread a previous handler left behind: it cannot touch another task's progress.
            log.info("sandbox %s: ignoring a checkpoint for task %r, which it is not running",
                     self.sandbox_id, message.get("task_id"))
            return
        run.on_checkpoint(data)

    def _on_step(self, message: dict) -> None:
        # Untrusted input: parse_frame raises ProtocolError for a malformed frame (the read
        # loop then kills the sandbox), so only a checked operation reaches the agent.
        frame = steps.parse_frame(message)
        run = self._runs.get(frame.task_id)
        if run is None or run.on_step is None:
            # A thread a previous handler left behind, or a task never handed here: it holds
            # no lease, so its activation must stop (docs/design/workflows-protocol.md).
            log.info("sandbox %s: a step frame for task %r, which it is not running: answered lost",
                     self.sandbox_id, frame.task_id)
            self.send(steps.lost("the agent is not running this task").frame(frame.task_id, frame.call))
            return
        run.on_step(frame)

    async def _watch_exit(self) -> None:
        assert self.process is not None
        self.exit_status = await self.process.wait()
        if self._ready and not self._ready.done():
            self._ready.set_exception(SandboxStartFailed(
                f"sandbox exited with {describe_exit(self.exit_status)} before it was ready"
                f"{self._log_tail_suffix()}"))
        for run in self._runs.values():  # a sandbox that dies fails every attempt it was running
            if not run.future.done():
                run.future.set_result(RunEnd(exit_status=self.exit_status, protocol_error=self._protocol_error))
        if self._writer:
            self._writer.close()
        try:
            await asyncio.to_thread(shutil.rmtree, self.home, True)
        finally:
            self.exited.set()

    def start_run(self, message: dict, *, cancel: bool = False,
                  on_checkpoint: Callable[[bytes], None] | None = None,
                  on_step: Callable[[StepFrame], None] | None = None) -> asyncio.Future:
        """Send a run frame (and a cancel right behind it if `cancel`) now; the returned future
        gets the RunEnd: its done frame or the process's end (cancelling the future forgets the
        run). Checkpoints the handler takes meanwhile go to on_checkpoint (JSON bytes, checked),
        a workflow's step frames to on_step (checked; it answers them with send)."""
        loop = asyncio.get_running_loop()
        future = loop.create_future()
        if not self.alive:
            future.set_result(RunEnd(exit_status=self.exit_status, protocol_error=self._protocol_error))
            return future
        task_id = str(message["task_id"])
        run = _Run(int(message["attempt"]), future, on_checkpoint, on_step)
        self._runs[task_id] = run
        future.add_done_callback(lambda _f: self._forget(task_id, run))
        if not self.send(message):
            self.kill()
        elif cancel:
            self.send({"type": "cancel", "task_id": task_id})
        return future

    def _forget(self, task_id: str, run: _Run) -> None:
        if self._runs.get(task_id) is run:
            del self._runs[task_id]

    def send(self, message: dict) -> bool:
        """Queue a frame to the stub; False if the socket is gone. Frames queued in
        one event loop iteration go out in one write (a lease batch is one syscall)."""
        if self._writer is None or self._writer.is_closing():
            return False
        if not self._out:
            asyncio.get_running_loop().call_soon(self._flush)
        self._out.append(encode(message))
        return True

    def _flush(self) -> None:
        out, self._out = self._out, []
        if out and self._writer is not None and not self._writer.is_closing():
            self._writer.write(b"".join(out))

    def kill(self, reason: str | None = None) -> None:
        """SIGKILL the sandbox's whole process group, now. `reason`: the agent kills it on
        purpose to stop one task (recorded in killed_for, so the other tasks it was running
        are told apart from a crash)."""
        if not self.alive:
            return
        if reason and self.killed_for is None:
            self.killed_for = reason
        try:
            os.killpg(self.process.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass

    async def stop(self) -> None:
        """Ask an idle sandbox to exit, then kill it if it lingers."""
        self.send({"type": "shutdown"})
        try:
            await asyncio.wait_for(self.exited.wait(), STOP_GRACE_S)
        except TimeoutError:
            self.kill()
            await self.exited.wait()

    def log_tail(self) -> str:
        """The last lines the sandbox printed (its stdout and stderr)."""
        try:
            with open(self.log_path, "rb") as f:
                f.seek(max(0, os.path.getsize(self.log_path) - LOG_TAIL_BYTES))
                return f.read().decode("utf-8", "replace").strip()
        except OSError:
            return ""

    def _log_tail_suffix(self) -> str:
        tail = self.log_tail()
        return f"; its output ends with:\n{tail}" if tail else ""


def _no_constant(name: str) -> None:
    # Python's json accepts NaN and Infinity; JSON (and the SDK's encoder) does not.
    raise ValueError(f"{name} is not JSON")


def _peer_pid(writer: asyncio.StreamWriter) -> int:
    sock = writer.get_extra_info("socket")
    creds = sock.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, struct.calcsize("3i"))
    return struct.unpack("3i", creds)[0]
