"""The agent's sandboxes, pooled per (app, version) and reused.

A sandbox serves one app version of one app only, never another tenant's or
another app's code, and runs up to `concurrency` of its tasks at once (each
in its own thread in the stub). A task goes to the least loaded sandbox of
its version that has room; a new sandbox starts only when none has, and
tasks arriving while it starts wait for it instead of starting their own
(a lease batch of 200 tasks starts ceil(200 / concurrency) processes, not
200). Idle sandboxes are kept for the next task of the same version; those
of a superseded version are stopped once idle. A sandbox running a task that
must be stopped is retired (`retire`): no new task, killed once the tasks
still worth running in it have ended.

A sandbox that crashes fails every task it was running, whatever its type,
so one type that kills its process would make the other types' attempts
crash with it (and trip their circuit breakers; their probes, placed beside
the culprit's probes, would crash too, and the breakers never close: found
by the fault harness, kill_gateway). So the types of a crashed sandbox's
tasks are *suspect* for SUSPECT_S after the crash (renewed by each new
crash), and a suspect type's task runs alone, in a sandbox of its own: its
crash is then its own, and no other task dies with it.
"""

from __future__ import annotations

import asyncio
import logging
import math
import pathlib
import time

from ratchet.services.hostagent.sandboxes import Sandbox, SandboxDirs

log = logging.getLogger(__name__)

Key = tuple[str, str]  # (app_id, digest)
# How long the task types of a crashed sandbox run alone, one task per sandbox.
SUSPECT_S = 30.0


class SandboxPool:
    """Live sandboxes; about capacity / concurrency of them are kept (idle ones make room)."""

    def __init__(self, *, dirs: SandboxDirs, python: str, capacity: int, start_timeout_s: float,
                 concurrency: int = 1, clock=None):
        self._dirs, self._python = dirs, python
        self._clock = clock or time.monotonic
        self._suspect: dict[tuple[str, str], float] = {}  # (app_id, task_type) -> runs alone until
        self._concurrency = max(1, concurrency)
        self._max_live = max(1, math.ceil(capacity / self._concurrency))
        self._start_timeout_s = start_timeout_s
        self._all: dict[str, Sandbox] = {}  # every process not yet exited, stopping ones too
        self._live: dict[str, Sandbox] = {}  # the ones tasks may be placed in (insertion order = oldest first)
        self._starting: dict[str, asyncio.Future] = {}  # sandbox_id -> its start, while it starts
        self._active: dict[str, str] = {}  # app_id -> digest new attempts run
        self._background: set[asyncio.Task] = set()

    def sandboxes(self) -> list[Sandbox]:
        """Every sandbox process still alive (busy, idle or stopping)."""
        return [s for s in self._all.values() if s.alive]

    def crashed(self, app_id: str, task_type: str) -> None:
        """A sandbox died on its own with a task of this type in it: run the type alone for a
        while (each task the process ran reports its own type)."""
        if not self.alone(app_id, task_type):
            log.info("task type %s of app %s runs one task per sandbox for %.0f s (a sandbox running it "
                     "crashed)", task_type, app_id, SUSPECT_S)
        self._suspect[app_id, task_type] = self._clock() + SUSPECT_S

    def alone(self, app_id: str, task_type: str) -> bool:
        """Whether a task of this type runs in a sandbox of its own (its type is suspect)."""
        until = self._suspect.get((app_id, task_type))
        if until is None:
            return False
        if until <= self._clock():
            del self._suspect[app_id, task_type]
            return False
        return True

    def try_acquire(self, app_id: str, digest: str, task_type: str = "") -> Sandbox | None:
        """acquire's common case, without waiting: a running sandbox of this version with room,
        reserved for the caller (give it back with release); None when only a start (or one
        still starting) would do."""
        sandbox, _ = self._room(app_id, digest, task_type)
        if sandbox is None or sandbox.sandbox_id in self._starting or not sandbox.alive:
            return None
        sandbox.load += 1
        return sandbox

    def _room(self, app_id: str, digest: str, task_type: str) -> tuple[Sandbox | None, bool]:
        """(the sandbox of this version with room for the task, or None; whether the task runs
        alone), the version noted as the app's active one."""
        self.note_active(app_id, digest)
        single = self._concurrency > 1 and self.alone(app_id, task_type)
        return self._with_room(app_id, digest, single), single

    async def acquire(self, app_id: str, digest: str, module: str, bundle_dir: pathlib.Path,
                      task_type: str = "") -> Sandbox:
        """A ready sandbox of this app version with room for one more task, reserved for the
        caller (give it back with release): the least loaded one, one being started, or a new
        one (SandboxStartFailed if it won't start). A task of a suspect type gets a sandbox
        that runs one task at a time, and no sandbox that runs several."""
        sandbox, single = self._room(app_id, digest, task_type)
        if sandbox is None:
            sandbox = self._start(app_id, digest, module, bundle_dir, 1 if single else self._concurrency)
        sandbox.load += 1
        starting = self._starting.get(sandbox.sandbox_id)
        if starting is not None:
            try:
                await asyncio.shield(starting)
            except BaseException:
                sandbox.load -= 1
                raise
        return sandbox

    def _with_room(self, app_id: str, digest: str, single: bool = False) -> Sandbox | None:
        best = None
        for sandbox in self._live.values():
            if (sandbox.app_id, sandbox.digest) != (app_id, digest) or sandbox.load >= sandbox.concurrency:
                continue
            solo = sandbox.concurrency == 1 and self._concurrency > 1  # started for a suspect type
            if single != solo:
                continue  # a suspect type's task only in a one-task sandbox, other tasks never there
            if not (sandbox.alive or sandbox.sandbox_id in self._starting):
                continue
            if best is None or sandbox.load < best.load:
                best = sandbox
        return best

    def _start(self, app_id: str, digest: str, module: str, bundle_dir: pathlib.Path,
               concurrency: int) -> Sandbox:
        self._make_room()
        sandbox = Sandbox(app_id=app_id, digest=digest, module=module, bundle_dir=bundle_dir, dirs=self._dirs,
                          concurrency=concurrency)
        self._live[sandbox.sandbox_id] = sandbox
        self._all[sandbox.sandbox_id] = sandbox
        started = asyncio.ensure_future(self._run_start(sandbox))
        # Nobody may be waiting any more when it fails: mark the error as seen.
        started.add_done_callback(lambda f: f.cancelled() or f.exception())
        self._starting[sandbox.sandbox_id] = started
        return sandbox

    async def _run_start(self, sandbox: Sandbox) -> None:
        try:
            await sandbox.start(self._python, self._start_timeout_s)
        except BaseException:
            self._live.pop(sandbox.sandbox_id, None)
            self._all.pop(sandbox.sandbox_id, None)
            sandbox.kill()
            raise
        finally:
            self._starting.pop(sandbox.sandbox_id, None)
        self._spawn(self._forget_on_exit(sandbox))
        log.info("sandbox %s started: pid %d, app %s, %s (up to %d tasks at once)", sandbox.sandbox_id,
                 sandbox.pid, sandbox.app_id, sandbox.digest, sandbox.concurrency)

    def release(self, sandbox: Sandbox) -> None:
        """Take back one task's place in a sandbox whose run ended: keep the sandbox unless
        it is dead, retired, or idle and of a superseded version."""
        sandbox.load = max(0, sandbox.load - 1)
        if not sandbox.alive:
            return
        if sandbox.retired_for is not None:
            self._reap(sandbox)
        elif sandbox.load == 0 and self._active.get(sandbox.app_id) != sandbox.digest:
            self._stop(sandbox)

    def retire(self, sandbox: Sandbox, task_id: str, reason: str) -> None:
        """Stop a task whose outcome no longer counts (its lease was lost, or it ignored a
        cancel past kill_after). Its thread cannot be stopped alone, and killing the process
        at once would kill the other tasks it runs: so the sandbox takes no new task and is
        SIGKILLed as soon as only such tasks are left in it (at once if it runs nothing else,
        always so with sandbox_concurrency 1)."""
        sandbox.zombies.add(task_id)
        if sandbox.retired_for is None:
            sandbox.retired_for = reason
            self._live.pop(sandbox.sandbox_id, None)  # never placed in again
        self._reap(sandbox)

    @staticmethod
    def _reap(sandbox: Sandbox) -> None:
        if all(task_id in sandbox.zombies for task_id, _ in sandbox.running()):
            sandbox.kill(sandbox.retired_for)

    def note_active(self, app_id: str, digest: str) -> None:
        """Record the app's current version; stop idle sandboxes of older ones."""
        if self._active.get(app_id) == digest:
            return
        self._active[app_id] = digest
        for sandbox in list(self._live.values()):
            if sandbox.app_id == app_id and sandbox.digest != digest and self._idle(sandbox):
                log.info("stopping idle sandbox %s of superseded version %s", sandbox.sandbox_id, sandbox.digest)
                self._stop(sandbox)

    def _idle(self, sandbox: Sandbox) -> bool:
        return sandbox.load == 0 and sandbox.sandbox_id not in self._starting

    def _make_room(self) -> None:
        # Stop idle sandboxes (oldest first) while the pool is full. If every one is busy
        # (several versions running at once), the new one starts anyway: the agent's slots,
        # not this count, bound the work.
        for sandbox in list(self._live.values()):
            if len(self._live) < self._max_live:
                return
            if self._idle(sandbox):
                self._stop(sandbox)

    def _stop(self, sandbox: Sandbox) -> None:
        self._live.pop(sandbox.sandbox_id, None)
        self._spawn(sandbox.stop())

    async def _forget_on_exit(self, sandbox: Sandbox) -> None:
        await sandbox.exited.wait()
        self._live.pop(sandbox.sandbox_id, None)
        self._all.pop(sandbox.sandbox_id, None)

    def _spawn(self, coro) -> None:
        task = asyncio.ensure_future(coro)
        self._background.add(task)
        task.add_done_callback(self._background.discard)

    async def close(self) -> None:
        """Kill every sandbox and wait for them to exit."""
        for starting in list(self._starting.values()):
            starting.cancel()
        sandboxes = list(self._all.values())
        self._all.clear()
        self._live.clear()
        for sandbox in sandboxes:
            sandbox.kill()
        await asyncio.gather(*(s.exited.wait() for s in sandboxes if s.process is not None))
        for task in list(self._background):
            task.cancel()
