"""Circuit breakers per (tenant, app, task type): the state machine, as pure
functions of a breaker, an event and `now`. No I/O and no clock of its own:
`now` is always the breakers database's clock (read in the same transaction
that writes the result), so tests drive it with plain datetimes.

    CLOSED --(threshold crashes within the window)--> OPEN
    OPEN --(cool-down over)--> HALF_OPEN
    HALF_OPEN --(probe claimed, leased)--> HALF_OPEN (probe running)
    HALF_OPEN --(probe completes without crashing)--> CLOSED
    HALF_OPEN --(probe crashes)--> OPEN (a new cool-down)
    HALF_OPEN --(probe silent for 2 lease durations)--> another probe may be claimed
    any --(reset)--> CLOSED, counts cleared

Only the probe decides a HALF_OPEN breaker; crashes of other tasks (leased
before the breaker opened) are recorded but change no state while the
breaker is OPEN or HALF_OPEN.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
from typing import Any

CLOSED, OPEN, HALF_OPEN = "CLOSED", "OPEN", "HALF_OPEN"
STATES = (CLOSED, OPEN, HALF_OPEN)
# The public contract shows at most 10 last crashes (breakers.proto).
MAX_LAST_CRASHES = 10
# Crash times kept per breaker: enough for any sane threshold, bounded so one
# crash storm cannot grow a row without limit.
MAX_CRASH_TIMES = 1000
MAX_MESSAGE_CHARS = 1000
REASON_MESSAGE_CHARS = 300


@dataclasses.dataclass(frozen=True, order=True)
class BreakerKey:
    """What a breaker guards: one task type of one app of one tenant."""

    tenant_id: str
    app_id: str
    task_type: str


@dataclasses.dataclass(frozen=True)
class Settings:
    """Breaker tuning (from the dispatcher config)."""

    threshold: int  # crashes within the window that open the breaker
    window_s: float  # sliding window, seconds
    cooldown_s: float  # OPEN for this long before a probe may run
    probe_timeout_s: float  # a probe with no completion this long lets another through (2 lease durations)


@dataclasses.dataclass(frozen=True)
class Crash:
    """One sandbox crash, as shown in Breaker.last_crashes."""

    task_id: str
    lease_epoch: int
    error_class: str
    message: str
    at: dt.datetime

    def to_json(self) -> dict[str, Any]:
        """The jsonb form stored in breakers.last_crashes."""
        return {"task_id": self.task_id, "lease_epoch": self.lease_epoch, "error_class": self.error_class,
                "message": self.message, "at": self.at.isoformat()}

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> Crash:
        """The inverse of to_json."""
        return cls(str(data["task_id"]), int(data.get("lease_epoch", 0)), str(data.get("error_class", "")),
                   str(data.get("message", "")), dt.datetime.fromisoformat(data["at"]))


@dataclasses.dataclass(frozen=True)
class Outcome:
    """A completion the breakers care about: a crash, or the end of a probe."""

    key: BreakerKey
    task_id: str
    lease_epoch: int
    crashed: bool
    error_class: str = ""
    message: str = ""


@dataclasses.dataclass(frozen=True)
class Breaker:
    """One row of the breakers table. `version` grows by one per write (the
    compare-and-set guard); 0 means the row does not exist yet."""

    key: BreakerKey
    state: str = CLOSED
    crash_times: tuple[dt.datetime, ...] = ()  # newest first, pruned to the window
    last_crashes: tuple[Crash, ...] = ()  # newest first, at most MAX_LAST_CRASHES
    reason: str = ""
    opened_at: dt.datetime | None = None
    probe_at: dt.datetime | None = None
    probe_owner: str | None = None  # the dispatcher process that claimed the probe
    probe_task_id: str | None = None  # the probe task, once leased
    probe_leased_at: dt.datetime | None = None  # when the probe was claimed, then leased
    version: int = 0


def _window(times: tuple[dt.datetime, ...], now: dt.datetime, s: Settings) -> tuple[dt.datetime, ...]:
    since = now - dt.timedelta(seconds=s.window_s)
    return tuple(t for t in times if t > since)


def crashes_in_window(b: Breaker, now: dt.datetime, s: Settings) -> int:
    """Crashes counted in the sliding window ending at `now`."""
    return len(_window(b.crash_times, now, s))


def visible(b: Breaker, now: dt.datetime, s: Settings) -> bool:
    """Whether ListBreakers shows it: not CLOSED, or crashes in the window."""
    return b.state != CLOSED or crashes_in_window(b, now, s) > 0


def _closed(b: Breaker, **changes: Any) -> Breaker:
    return dataclasses.replace(b, state=CLOSED, crash_times=(), reason="", opened_at=None, probe_at=None,
                               probe_owner=None, probe_task_id=None, probe_leased_at=None, **changes)


def _opened(b: Breaker, now: dt.datetime, s: Settings, reason: str) -> Breaker:
    return dataclasses.replace(b, state=OPEN, reason=reason, opened_at=now,
                               probe_at=now + dt.timedelta(seconds=s.cooldown_s),
                               probe_owner=None, probe_task_id=None, probe_leased_at=None)


def _error_text(outcome: Outcome) -> str:
    message = outcome.message.strip().splitlines()[0] if outcome.message.strip() else ""
    if len(message) > REASON_MESSAGE_CHARS:
        message = message[:REASON_MESSAGE_CHARS] + "..."
    error_class = outcome.error_class or "SandboxCrashed"
    return f"{error_class}: {message}" if message else error_class


def _with_crash(b: Breaker, outcome: Outcome, now: dt.datetime, s: Settings) -> Breaker:
    crash = Crash(outcome.task_id, outcome.lease_epoch, outcome.error_class or "SandboxCrashed",
                  outcome.message[:MAX_MESSAGE_CHARS], now)
    times = (now, *_window(b.crash_times, now, s))[:MAX_CRASH_TIMES]
    return dataclasses.replace(b, crash_times=times, last_crashes=(crash, *b.last_crashes)[:MAX_LAST_CRASHES])


def _seen(b: Breaker, outcome: Outcome) -> bool:
    # An agent resends a completion whose answer it lost: count each attempt once.
    return any(c.task_id == outcome.task_id and c.lease_epoch == outcome.lease_epoch for c in b.last_crashes)


def is_probe(b: Breaker, task_id: str) -> bool:
    """Whether `task_id` is this breaker's running probe."""
    return b.state == HALF_OPEN and b.probe_task_id is not None and b.probe_task_id == task_id


def observe(b: Breaker, outcome: Outcome, now: dt.datetime, s: Settings) -> Breaker:
    """Apply a crash or a probe's end; returns `b` itself when nothing changes."""
    if is_probe(b, outcome.task_id):
        if not outcome.crashed:
            return _closed(b)
        if _seen(b, outcome):
            return b
        b = _with_crash(b, outcome, now, s)
        return _opened(b, now, s, f"the probe task {outcome.task_id} crashed ({_error_text(outcome)}); "
                                  f"paused for another {s.cooldown_s:g} s")
    if not outcome.crashed or _seen(b, outcome):
        return b
    b = _with_crash(b, outcome, now, s)
    count = len(b.crash_times)
    if b.state == CLOSED and count >= s.threshold:
        return _opened(b, now, s, f"{count} sandbox crashes in {s.window_s:g} s; last: {_error_text(outcome)}")
    return b


def advance(b: Breaker, now: dt.datetime) -> Breaker:
    """OPEN becomes HALF_OPEN once the cool-down is over (no probe yet)."""
    if b.state == OPEN and b.probe_at is not None and b.probe_at <= now:
        return dataclasses.replace(b, state=HALF_OPEN, probe_owner=None, probe_task_id=None, probe_leased_at=None)
    return b


def probe_free(b: Breaker, now: dt.datetime, s: Settings) -> bool:
    """HALF_OPEN with no probe claimed, or the last one silent for probe_timeout_s."""
    if b.state != HALF_OPEN:
        return False
    return b.probe_leased_at is None or now - b.probe_leased_at >= dt.timedelta(seconds=s.probe_timeout_s)


def claim_probe(b: Breaker, owner: str, now: dt.datetime, s: Settings) -> Breaker | None:
    """`owner` may let one probe through; None if the breaker has no free probe."""
    if not probe_free(b, now, s):
        return None
    return dataclasses.replace(b, probe_owner=owner, probe_task_id=None, probe_leased_at=now)


def probe_leased(b: Breaker, owner: str, task_id: str, now: dt.datetime) -> Breaker | None:
    """The probe `owner` claimed was leased as `task_id`; the probe's clock
    restarts at the lease. None if the claim is no longer `owner`'s."""
    if b.state != HALF_OPEN or b.probe_owner != owner or b.probe_task_id is not None:
        return None
    return dataclasses.replace(b, probe_task_id=task_id, probe_leased_at=now)


def reset(b: Breaker) -> Breaker:
    """Close now and clear the counts (the last crashes stay, for the record)."""
    return _closed(b)
