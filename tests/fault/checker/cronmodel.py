"""What the cron invariants read, normalised: the cron database's schedules and
slots (``dump["cron"]``, tables of ``services/cron/migrations/0001_schedules.sql``),
the harness's own record of each schedule (``schedule_create`` /
``schedule_pause`` in the history), an independent oracle for the expressions
the harness creates, and the nemesis windows during which cron could not claim.

Times: slots, ``created_at`` and ``finished_at`` are the cron database's clock;
the create and pause answers carry that clock too. Nemesis events carry the
harness's monotonic seconds since the run started; ``run.json``'s
``recorder_wall0`` (the wall clock at that start) maps them onto the database
clock, which is the same host's clock (Postgres runs beside the harness).
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import math
import re
from collections import defaultdict
from typing import Any

from .model import Run, pick

UTC = dt.UTC
EPOCH = dt.datetime(1970, 1, 1, tzinfo=UTC)
OPEN_STATES = ("PENDING", "BUFFERED", "SENDING")
# A nemesis window is widened by this much before it starts (the two clocks are read
# at slightly different moments)...
MARGIN_S = 1.0
# ...and after it heals: the fire loop backs off up to 5 s after database errors
# (services/cron/loops/fire.py MAX_BACKOFF_S), then ticks.
RECOVERY_S = 6.0


def when(value: Any) -> dt.datetime | None:
    """A dumped timestamp (ISO text or datetime) as an aware datetime; naive means UTC."""
    if value in (None, ""):
        return None
    if isinstance(value, dt.datetime):
        out = value
    else:
        out = dt.datetime.fromisoformat(str(value).replace("Z", "+00:00"))
    return out if out.tzinfo is not None else out.replace(tzinfo=UTC)


def at_s(value: dt.datetime) -> float:
    """Seconds since the epoch (for arithmetic with the harness's wall clock)."""
    return (value - EPOCH).total_seconds()


class Every:
    """Occurrences of an expression that fires every N seconds, N dividing 60:
    ``* * * * * *`` or ``*/N * * * * *`` in UTC (what the harness creates). Written
    here rather than imported from the cron service, so the checker does not
    trust the code it checks."""

    _FORM = re.compile(r"^(\*|\*/(\d+)) \* \* \* \* \*$")

    def __init__(self, every_s: int):
        self.every_s = every_s

    @classmethod
    def parse(cls, cron: str, timezone: str | None) -> Every | None:
        m = cls._FORM.fullmatch(" ".join(str(cron).split()))
        if m is None or (timezone or "UTC") not in ("UTC", "Etc/UTC"):
            return None
        n = int(m.group(2) or 1)
        return cls(n) if 1 <= n <= 60 and 60 % n == 0 else None

    def is_occurrence(self, t: dt.datetime) -> bool:
        whole, rest = divmod(t - EPOCH, dt.timedelta(seconds=1))
        return rest == dt.timedelta(0) and whole % self.every_s == 0

    def next_after(self, t: dt.datetime) -> dt.datetime:
        """The first occurrence strictly after t."""
        whole = (t - EPOCH) // dt.timedelta(seconds=1)
        return EPOCH + dt.timedelta(seconds=(whole // self.every_s + 1) * self.every_s)

    def between(self, lo: dt.datetime, hi: dt.datetime, limit: int = 100_000) -> list[dt.datetime]:
        """Occurrences o with lo < o < hi (at most `limit`)."""
        out, o = [], self.next_after(lo)
        while o < hi and len(out) < limit:
            out.append(o)
            o += dt.timedelta(seconds=self.every_s)
        return out


@dataclasses.dataclass
class Slot:
    schedule_id: str
    slot: dt.datetime
    kind: str
    state: str
    task_id: str | None
    reason: str | None
    created_at: dt.datetime | None
    finished_at: dt.datetime | None

    def brief(self) -> dict:
        return {"schedule_id": self.schedule_id, "slot": self.slot.isoformat(), "kind": self.kind,
                "state": self.state, "task_id": self.task_id, "reason": self.reason,
                "created_at": self.created_at.isoformat() if self.created_at else None,
                "finished_at": self.finished_at.isoformat() if self.finished_at else None}


@dataclasses.dataclass
class Schedule:
    schedule_id: str
    cron: str
    timezone: str
    overlap_policy: str
    catchup_window_s: float
    state: str | None
    created_at: dt.datetime | None  # the cron database's row (the create's answer if absent)
    paused_at: dt.datetime | None  # the first pause the harness saw acknowledged
    in_db: bool
    slots: list[Slot]


class CronView:
    """The schedules of a run with their slots, sorted by slot time."""

    def __init__(self, run: Run):
        raw = run.dump.raw.get("cron") or {}
        self.created = run.created_schedules()
        self.db_now = when(raw.get("db_now"))
        meta = run.meta.get("cron") or {}
        self.grace_s = float(meta.get("misfire_grace_s", 2.0))
        self.processes = int(meta.get("processes", 1))
        slots: dict[str, list[Slot]] = defaultdict(list)
        for row in raw.get("schedule_slots", []):
            s = _slot(row)
            slots[s.schedule_id].append(s)
        paused = _pauses(run)
        self.schedules: dict[str, Schedule] = {}
        for row in raw.get("schedules", []):
            sid = str(row["schedule_id"])
            self.schedules[sid] = Schedule(
                schedule_id=sid, cron=row.get("cron", ""), timezone=row.get("timezone") or "UTC",
                overlap_policy=str(row.get("overlap_policy", "")).upper(),
                catchup_window_s=float(pick(row, "catchup_window_ms", default=0)) / 1000,
                state=row.get("state"), created_at=when(row.get("created_at")), paused_at=paused.get(sid),
                in_db=True, slots=sorted(slots.pop(sid, []), key=lambda s: s.slot))
        self.orphan_slots = [s for rows in slots.values() for s in rows]  # slots of no schedule row
        self._by_key = {(s.schedule_id, s.slot): s for sc in self.schedules.values() for s in sc.slots}

    def slot(self, schedule_id: str, at: dt.datetime | None) -> Slot | None:
        return self._by_key.get((schedule_id, at)) if at is not None else None

    def window_s(self, sc: Schedule) -> float:
        """How old the latest due slot may be and still fire: max(catchup_window, misfire_grace)."""
        return max(sc.catchup_window_s, self.grace_s)


def _slot(row: dict) -> Slot:
    return Slot(schedule_id=str(row["schedule_id"]), slot=when(row["slot"]), kind=str(row.get("kind", "")).upper(),
                state=str(row.get("state", "")).upper(), task_id=pick(row, "task_id"), reason=row.get("reason"),
                created_at=when(row.get("created_at")), finished_at=when(row.get("finished_at")))


def _pauses(run: Run) -> dict[str, dt.datetime]:
    out: dict[str, dt.datetime] = {}
    for op in run.ops:
        r = op.result if isinstance(op.result, dict) else {}
        if op.f == "schedule_pause" and op.ok and r.get("schedule_id") and r.get("updated_at"):
            t = when(r["updated_at"])
            sid = str(r["schedule_id"])
            out[sid] = min(out[sid], t) if sid in out else t
    return out


def disturbs_cron(nemesis: str, processes: int) -> bool:
    """Whether a fault may legitimately stop every cron process from claiming.

    A paused cron process can hold a schedule's row lock (the claim is FOR UPDATE SKIP
    LOCKED, so another process passes that schedule over); a killed one stops claiming,
    which matters only when it is the only one; Postgres crashing or dropping the
    cron's connections fails its claims (then the loop backs off)."""
    if nemesis.startswith("pause-cron"):
        return True
    if nemesis.startswith("kill-cron"):
        return processes < 2
    return nemesis == "crash-postgres" or nemesis.startswith("terminate-backends")


def disturbances(run: Run, processes: int) -> list[tuple[float, float, str]] | None:
    """[(start, end, nemesis)] in database-clock epoch seconds, widened by MARGIN_S before and
    RECOVERY_S after; None when some exist but cannot be placed (no recorder_wall0)."""
    steps: dict[Any, list] = {}
    for ev in run.nemesis:
        f, v, t = str(ev.get("f")), ev.get("value"), float(ev.get("time", 0))
        if ev.get("type") == "invoke" and isinstance(v, dict) and "step" in v:
            steps[v["step"]] = [f, t, None]
        elif f.endswith(":healed") and isinstance(v, dict) and v.get("step") in steps:
            steps[v["step"]][2] = t
    final = run.final_heal_time()
    wall0 = run.meta.get("recorder_wall0")
    out = []
    for name, start, end in steps.values():
        if not disturbs_cron(name, processes):
            continue
        if wall0 is None:
            return None
        end = end if end is not None else (final if final is not None else math.inf)
        out.append((float(wall0) + start - MARGIN_S, float(wall0) + end + RECOVERY_S, name))
    return out


def overlapping(windows: list | None, lo: dt.datetime, hi: dt.datetime) -> list[str]:
    """The nemeses whose window meets [lo, hi] (every one, '?', when they cannot be placed)."""
    if windows is None:
        return ["?"]
    a, b = at_s(lo), at_s(hi)
    return [name for start, end, name in windows if start <= b and end >= a]
