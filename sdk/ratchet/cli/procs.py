"""Process plumbing for the local platform (services die with it: see
ratchet.libs.rpc.server.die_with_parent),
identify our own processes by (pid, start time) so a recycled pid is never
signalled, health checks, and log tails for error messages."""

from __future__ import annotations

import json
import os
import pathlib
import signal
import socket
import time
from typing import Any

import grpc
from grpc_health.v1 import health_pb2, health_pb2_grpc


def start_time(pid: int) -> int | None:
    """The process's start time in clock ticks since boot (field 22 of /proc/pid/stat)."""
    try:
        stat = pathlib.Path(f"/proc/{pid}/stat").read_text()
    except (FileNotFoundError, ProcessLookupError, PermissionError):
        return None
    # The command name (field 2) may contain spaces and parentheses.
    fields = stat[stat.rindex(")") + 2:].split()
    return int(fields[19])


def is_ours(pid: int | None, started: int | None) -> bool:
    """True when pid is alive and is the very process we recorded (not a reused pid)."""
    if not pid:
        return False
    now = start_time(pid)
    if now is None or (started is not None and now != started):
        return False
    try:
        state = pathlib.Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (FileNotFoundError, IndexError):
        return False
    return state != "Z"


def signal_ours(pid: int | None, started: int | None, sig: int) -> bool:
    """Send sig to the recorded process if it is still the same one; True if sent."""
    if not is_ours(pid, started):
        return False
    try:
        os.kill(pid, sig)  # type: ignore[arg-type] # is_ours checked pid is set
        return True
    except ProcessLookupError:
        return False


def wait_gone(pid: int | None, started: int | None, timeout: float) -> bool:
    """Wait until the recorded process is gone; True if it went in time."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if not is_ours(pid, started):
            return True
        time.sleep(0.05)
    return not is_ours(pid, started)


def terminate(pid: int | None, started: int | None, grace: float = 10.0) -> None:
    """SIGTERM, then SIGKILL after grace seconds, a process we recorded."""
    if signal_ours(pid, started, signal.SIGTERM) and not wait_gone(pid, started, grace):
        signal_ours(pid, started, signal.SIGKILL)
        wait_gone(pid, started, 5.0)


def port_free(port: int) -> bool:
    """True when 127.0.0.1:port can be bound right now by a server.

    SO_REUSEADDR as the servers set it: connections of a previous run lingering
    in TIME_WAIT do not make the port busy, a live listener does.
    """
    with socket.socket() as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind(("127.0.0.1", port))
            return True
        except OSError:
            return False


def health(target: str, timeout: float = 1.0) -> str:
    """The gRPC health status of a server ("SERVING", "NOT_SERVING"...), or "UNREACHABLE"."""
    channel = grpc.insecure_channel(target)
    try:
        resp = health_pb2_grpc.HealthStub(channel).Check(health_pb2.HealthCheckRequest(service=""),
                                                        timeout=timeout)
        return health_pb2.HealthCheckResponse.ServingStatus.Name(resp.status)
    except grpc.RpcError:
        return "UNREACHABLE"
    finally:
        channel.close()


def tail(path: pathlib.Path, lines: int = 20) -> str:
    """The last lines of a log file, for error messages."""
    try:
        with open(path, "rb") as f:
            f.seek(0, os.SEEK_END)
            f.seek(max(0, f.tell() - 64 * 1024))
            text = f.read().decode(errors="replace")
    except FileNotFoundError:
        return f"({path} does not exist)"
    return "\n".join(text.splitlines()[-lines:])


def write_json(path: pathlib.Path, data: Any, mode: int = 0o644) -> None:
    """Write JSON atomically (readers never see half a file) with the given mode."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, mode)
    with os.fdopen(fd, "w") as f:
        json.dump(data, f, indent=2, sort_keys=True)
        f.write("\n")
    os.chmod(tmp, mode)
    os.replace(tmp, path)


def read_json(path: pathlib.Path) -> dict | None:
    """The JSON object in path, or None when it is missing or unreadable."""
    try:
        return json.loads(path.read_text())
    except (FileNotFoundError, json.JSONDecodeError):
        return None
