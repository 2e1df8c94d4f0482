"""Loaded (via PYTHONPATH) only into service processes started under
libfaketime for the clock-skew nemesis. libfaketime 0.9.10 with
FAKETIME_DONT_FAKE_MONOTONIC=1 breaks clock_nanosleep(CLOCK_MONOTONIC,
TIMER_ABSTIME), which time.sleep uses (it fails with EINVAL); select() with a
relative timeout is unaffected, so time.sleep is rebuilt on it. Everything
else (threading waits, asyncio, gRPC timers) works as is."""

import os
import select
import time

if "faketime" in os.environ.get("LD_PRELOAD", ""):
    def _sleep(seconds: float) -> None:
        if seconds < 0:
            raise ValueError("sleep length must be non-negative")
        deadline = time.monotonic() + seconds
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                return
            select.select([], [], [], left)

    time.sleep = _sleep
