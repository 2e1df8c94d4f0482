"""A description of the machine a run measured, for the report's header."""

from __future__ import annotations

import datetime
import os
import platform
import subprocess


def _first(path: str, prefix: str) -> str:
    try:
        with open(path) as f:
            for line in f:
                if line.startswith(prefix):
                    return line.split(":", 1)[1].strip() if ":" in line else line.split("=", 1)[1].strip().strip('"')
    except OSError:
        pass
    return "?"


def _filesystem(path: str) -> str:
    try:
        out = subprocess.run(["df", "-PT", path], capture_output=True, text=True, timeout=10).stdout
        dev, fstype = out.splitlines()[1].split()[:2]
        return f"{fstype} on {dev}"
    except (OSError, IndexError, ValueError, subprocess.TimeoutExpired):
        return "?"


def describe(data_dir: str) -> dict[str, str]:
    """CPU, cores, memory, kernel, OS, Python, and the filesystem under Postgres."""
    mem_kb = _first("/proc/meminfo", "MemTotal").split()[0] if _first("/proc/meminfo", "MemTotal") != "?" else "0"
    load1, load5, _ = os.getloadavg()
    return {
        "date_utc": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
        "cpu": _first("/proc/cpuinfo", "model name"),
        "cores": str(os.cpu_count()),
        "memory": f"{int(mem_kb) // 1024} MiB",
        "kernel": platform.release(),
        "os": _first("/etc/os-release", "PRETTY_NAME="),
        "python": platform.python_version(),
        "postgres_fs": _filesystem(data_dir),
        "loadavg_at_start": f"{load1:.2f} {load5:.2f}",
        "hostname": platform.node(),
    }
