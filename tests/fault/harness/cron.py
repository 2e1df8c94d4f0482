"""Schedules in a fault run (``Scenario.schedules > 0``).

Right after the deploy, ``Schedules.create`` makes N schedules through the
public client API: every ``every_s`` seconds (6-field cron ``*/N * * * * *``,
``* * * * * *`` for 1 s), overlap policy allow, a short catch-up window, and a
template that runs the test app's ``work`` handler in its quick ``ok`` mode
with the run's ledger, so every execution of a scheduled task is in the
ledger like the workload's. Each create and pause is an operation of the
process ``cron_admin`` in the history (its answer carries the cron database's
``created_at`` / ``updated_at``, which the checker reads as the schedule's
life). Once the workload stops the schedules are paused (not deleted: a delete
drops the slots the checker needs), and the run waits until no slot is open
and every scheduled task is terminal before the dump.
"""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import Callable
from typing import Any

from .recorder import Recorder

PROCESS = "cron_admin"
TASK_TYPE = "work"
TERMINAL_SQL = "('SUCCEEDED', 'FAILED', 'CANCELED', 'EXPIRED')"


def cron_for(every_s: int) -> str:
    """The 6-field expression (seconds first) firing every `every_s` seconds; every_s divides 60."""
    if every_s < 1 or 60 % every_s:
        raise ValueError(f"every_s must divide 60, got {every_s}")
    return "* * * * * *" if every_s == 1 else f"*/{every_s} * * * * *"


def _iso(value) -> str | None:
    return value.isoformat() if value is not None else None


class Schedules:
    """The run's schedules: created once, paused at the end, every call in the history."""

    def __init__(self, make_client: Callable[[], Any], recorder: Recorder, ledger: str, count: int,
                 every_s: int = 1, catchup_window_s: float = 3.0, attempts: int = 5):
        self.make_client, self.rec, self.ledger = make_client, recorder, ledger
        self.count, self.cron, self.catchup_window_s = count, cron_for(every_s), catchup_window_s
        self.attempts = attempts
        self.ids: list[str] = []

    def _call(self, f: str, value: dict, fn) -> tuple[str, Any]:
        self.rec.event(PROCESS, "invoke", f, value)
        try:
            result = fn()
        except Exception as e:  # noqa: BLE001 - recorded like a client's error; the caller decides to retry
            code = getattr(e, "code", None) or type(e).__name__
            self.rec.event(PROCESS, "info", f, {"code": str(code), "error": str(e)[:300]})
            return "info", e
        self.rec.event(PROCESS, "ok", f, result)
        return "ok", result

    def create(self) -> list[str]:
        """Create the schedules (each retried with its own request id, so at most one per index)."""
        with self.make_client() as client:
            for i in range(self.count):
                request_id = f"fault-{uuid.uuid4()}"
                value = {"index": i, "cron": self.cron, "catchup_window_s": self.catchup_window_s,
                         "overlap_policy": "allow", "request_id": request_id}

                def create(i=i, request_id=request_id):
                    info = client.create_schedule(
                        self.cron, TASK_TYPE, {"ledger": self.ledger, "mode": "ok", "sleep": 0.05, "schedule": i},
                        overlap_policy="allow", catchup_window=self.catchup_window_s, request_id=request_id)
                    return {"schedule_id": info.schedule_id, "cron": info.cron, "state": info.state,
                            "created_at": _iso(info.created_at), "next_fire_time": _iso(info.next_fire_time),
                            "catchup_window_s": info.catchup_window_s}
                result = self._retry("schedule_create", value, create)
                self.ids.append(result["schedule_id"])
        return self.ids

    def pause(self) -> None:
        """Pause every schedule (idempotent, so retried until acknowledged)."""
        with self.make_client() as client:
            for sid in self.ids:
                def pause(sid=sid):
                    info = client.pause_schedule(sid)
                    return {"schedule_id": info.schedule_id, "state": info.state,
                            "updated_at": _iso(info.updated_at)}
                self._retry("schedule_pause", {"schedule_id": sid}, pause)

    def _retry(self, f: str, value: dict, fn) -> dict:
        for attempt in range(self.attempts):
            kind, result = self._call(f, value, fn)
            if kind == "ok":
                return result
            time.sleep(0.5 * (attempt + 1))
        raise RuntimeError(f"{f} {value} did not succeed in {self.attempts} attempts: {result}")


def _count(dsns: list[str], sql: str) -> int:
    async def run() -> int:
        import asyncpg

        total = 0
        for dsn in dsns:
            conn = await asyncpg.connect(dsn, timeout=10)
            try:
                total += await conn.fetchval(sql, timeout=10)
            finally:
                await conn.close(timeout=5)
        return total
    return asyncio.run(run())


def _await_zero(dsns: list[str], sql: str, timeout_s: float, poll_s: float = 0.25) -> int:
    deadline = time.monotonic() + timeout_s
    left = _count(dsns, sql)
    while left and time.monotonic() < deadline:
        time.sleep(poll_s)
        left = _count(dsns, sql)
    return left


def await_slots_closed(cron_dsn: str, timeout_s: float) -> int:
    """Wait until no slot is PENDING, BUFFERED or SENDING (a paused schedule's sends still finish);
    returns how many are still open."""
    return _await_zero([cron_dsn], "SELECT count(*) FROM schedule_slots "
                                   "WHERE state IN ('PENDING', 'BUFFERED', 'SENDING')", timeout_s)


def await_scheduled_terminal(shard_dsns: list[str], timeout_s: float) -> int:
    """Wait until every task a schedule enqueued is terminal; returns how many are not."""
    return _await_zero(shard_dsns, "SELECT count(*) FROM tasks WHERE schedule_id IS NOT NULL "
                                   f"AND state NOT IN {TERMINAL_SQL}", timeout_s)
