"""The agent's sandboxes, pooled per (app, version) and reused.

A sandbox serves one app version of one app only, never another tenant's or
another app's code. Idle sandboxes are kept for the next task of the same
version; those of a superseded version are stopped.
"""

from __future__ import annotations

import asyncio
import logging
import pathlib

from ratchet.services.hostagent.sandboxes import Sandbox, SandboxDirs

log = logging.getLogger(__name__)

Key = tuple[str, str]  # (app_id, digest)


class SandboxPool:
    """Live sandboxes; at most `capacity` of them are kept (idle ones make room)."""

    def __init__(self, *, dirs: SandboxDirs, python: str, capacity: int, start_timeout_s: float):
        self._dirs, self._python = dirs, python
        self._capacity, self._start_timeout_s = capacity, start_timeout_s
        self._all: dict[str, Sandbox] = {}  # every process not yet exited, stopping ones too
        self._live: dict[str, Sandbox] = {}  # the ones counted against capacity
        self._idle: dict[str, Sandbox] = {}  # insertion order = least recently used first
        self._active: dict[str, str] = {}  # app_id -> digest new attempts run
        self._background: set[asyncio.Task] = set()

    def sandboxes(self) -> list[Sandbox]:
        """Every sandbox process still alive (busy, idle or stopping)."""
        return [s for s in self._all.values() if s.alive]

    async def acquire(self, app_id: str, digest: str, module: str, bundle_dir: pathlib.Path) -> Sandbox:
        """A ready sandbox of this app version, reserved for the caller: an idle
        one if there is one, else a new one (SandboxStartFailed if it won't start)."""
        self.note_active(app_id, digest)
        for sid, sandbox in list(self._idle.items()):
            if (sandbox.app_id, sandbox.digest) == (app_id, digest) and sandbox.alive:
                del self._idle[sid]
                return sandbox
        self._make_room()
        sandbox = Sandbox(app_id=app_id, digest=digest, module=module, bundle_dir=bundle_dir, dirs=self._dirs)
        self._live[sandbox.sandbox_id] = sandbox
        self._all[sandbox.sandbox_id] = sandbox
        try:
            await sandbox.start(self._python, self._start_timeout_s)
        except BaseException:
            self._live.pop(sandbox.sandbox_id, None)
            self._all.pop(sandbox.sandbox_id, None)
            sandbox.kill()
            raise
        self._spawn(self._forget_on_exit(sandbox))
        log.info("sandbox %s started: pid %d, app %s, %s", sandbox.sandbox_id, sandbox.pid, app_id, digest)
        return sandbox

    def release(self, sandbox: Sandbox) -> None:
        """Take back a sandbox whose task ended: keep it idle unless it is dead
        or runs a superseded version."""
        if not sandbox.alive:
            return
        if self._active.get(sandbox.app_id) != sandbox.digest:
            self._stop(sandbox)
            return
        self._idle[sandbox.sandbox_id] = sandbox

    def note_active(self, app_id: str, digest: str) -> None:
        """Record the app's current version; stop idle sandboxes of older ones."""
        if self._active.get(app_id) == digest:
            return
        self._active[app_id] = digest
        for sandbox in list(self._idle.values()):
            if sandbox.app_id == app_id and sandbox.digest != digest:
                log.info("stopping idle sandbox %s of superseded version %s", sandbox.sandbox_id, sandbox.digest)
                self._stop(sandbox)

    def _make_room(self) -> None:
        # Busy sandboxes never exceed capacity (the agent counts slots), so when
        # the pool is full at least one idle sandbox can go.
        while len(self._live) >= self._capacity and self._idle:
            self._stop(next(iter(self._idle.values())))

    def _stop(self, sandbox: Sandbox) -> None:
        self._idle.pop(sandbox.sandbox_id, None)
        self._live.pop(sandbox.sandbox_id, None)
        self._spawn(sandbox.stop())

    async def _forget_on_exit(self, sandbox: Sandbox) -> None:
        await sandbox.exited.wait()
        self._idle.pop(sandbox.sandbox_id, None)
        self._live.pop(sandbox.sandbox_id, None)
        self._all.pop(sandbox.sandbox_id, None)

    def _spawn(self, coro) -> None:
        task = asyncio.ensure_future(coro)
        self._background.add(task)
        task.add_done_callback(self._background.discard)

    async def close(self) -> None:
        """Kill every sandbox and wait for them to exit."""
        sandboxes = list(self._all.values())
        self._all.clear()
        self._live.clear()
        self._idle.clear()
        for sandbox in sandboxes:
            sandbox.kill()
        await asyncio.gather(*(s.exited.wait() for s in sandboxes if s.process is not None))
        for task in list(self._background):
            task.cancel()
