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


def code_version(repo: str) -> str:
    """HEAD of the tree under test, and whether platform code had uncommitted changes
    (engineers share the tree while the platform is being written)."""
    try:
        head = subprocess.run(["git", "-C", repo, "rev-parse", "--short", "HEAD"], capture_output=True,
                              text=True, timeout=10).stdout.strip()
        dirty = subprocess.run(["git", "-C", repo, "status", "--porcelain", "--", "services", "libs", "sdk",
                                "gen"], capture_output=True, text=True, timeout=10).stdout.strip()
    except (OSError, subprocess.TimeoutExpired):
        return "?"
    return f"{head}" + (f" + uncommitted changes in {len(dirty.splitlines())} platform files" if dirty else "")


def describe(data_dir: str) -> dict[str, str]:
    """CPU, cores, memory, kernel, OS, Python, and the filesystem under Postgres."""
    mem_kb = _first("/proc/meminfo", "MemTotal").split()[0] if _first("/proc/meminfo", "MemTotal") != "?" else "0"
    load1, load5, _ = os.getloadavg()
    return {
        "date_utc": datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%d %H:%M UTC"),
        "cpu": _first("/proc/cpuinfo", "model name"),
        "cores": str(os.cpu_count()),
        "memory": f"{int(mem_kb) // 1024} MiB",
        "kernel": platform.release(),
        "os": _first("/etc/os-release", "PRETTY_NAME="),
        "python": platform.python_version(),
        "postgres_fs": _filesystem(data_dir),
        "loadavg_at_start": f"{load1:.2f} {load5:.2f}",
        "hostname": platform.node(),
        "ratchet_code": code_version(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))),
    }
