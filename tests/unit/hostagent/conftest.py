"""Fixtures of the host agent's workflow tests: a real Sandbox object whose socket is an
in-memory writer, standing on a real idle process of its own group."""

from __future__ import annotations

import pathlib
import subprocess
import types

import pytest

from ratchet.sandbox.protocol import HEADER, decode_body
from ratchet.services.hostagent.sandboxes import Sandbox, SandboxDirs


class Wire:
    """The agent's end of a sandbox socket, in memory."""

    def __init__(self):
        self.data = bytearray()

    def write(self, data: bytes) -> None:
        self.data += data

    def is_closing(self) -> bool:
        return False

    def close(self) -> None:
        pass

    def frames(self, kind: str | None = None) -> list[dict]:
        out, view = [], bytes(self.data)
        while view:
            (size,) = HEADER.unpack(view[:HEADER.size])
            out.append(decode_body(view[HEADER.size:HEADER.size + size]))
            view = view[HEADER.size + size:]
        return [f for f in out if kind is None or f["type"] == kind]


@pytest.fixture
def idle_process():
    """A real process in a group of its own standing in for the sandbox's (nothing signals the
    test's own group if a path kills 'the sandbox')."""
    proc = subprocess.Popen(["sleep", "60"], start_new_session=True)
    yield types.SimpleNamespace(pid=proc.pid, returncode=None)
    proc.kill()
    proc.wait(5)


@pytest.fixture
def sandbox(tmp_path: pathlib.Path, idle_process) -> tuple[Sandbox, Wire]:
    box = Sandbox(app_id="app", digest="sha256:x", module="app", bundle_dir=tmp_path,
                  dirs=SandboxDirs.under(tmp_path), concurrency=2)
    wire = Wire()
    box.process, box._writer = idle_process, wire
    return box, wire
