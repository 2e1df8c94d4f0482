"""Tie the sandbox's life to its host agent's: PR_SET_PDEATHSIG=SIGKILL.

The stub sets it on itself as its first act, before any customer code runs,
instead of the agent doing it in a preexec hook: a Python preexec hook forks
with the agent's gRPC threads live, and gRPC's fork handlers then crash a
fraction of children. The getppid() check closes the window between exec
and prctl: if the agent is already gone, the sandbox exits at once.
"""

from __future__ import annotations

import ctypes
import os
import signal
import sys

PR_SET_PDEATHSIG = 1


def die_with_parent(parent_pid: int) -> None:
    """SIGKILL this process when parent_pid exits; exit now if it already has."""
    if sys.platform.startswith("linux"):
        prctl = ctypes.CDLL(None, use_errno=True).prctl
        prctl.argtypes = [ctypes.c_int, ctypes.c_ulong, ctypes.c_ulong, ctypes.c_ulong, ctypes.c_ulong]
        if prctl(PR_SET_PDEATHSIG, int(signal.SIGKILL), 0, 0, 0) != 0:
            print(f"ratchet sandbox: prctl(PR_SET_PDEATHSIG) failed: errno {ctypes.get_errno()}", file=sys.stderr)
            os._exit(5)
    if os.getppid() != parent_pid:
        os._exit(1)
