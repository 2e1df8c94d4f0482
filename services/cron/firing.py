"""The firing rules as pure functions: which slot a due schedule fires
(catch-up), what the overlap policy does with it, and how long a slot waits
after a transient failure. The loops and the API apply these in transactions.
"""

from __future__ import annotations

import dataclasses
import datetime as dt

from ratchet.services.cron.cronexpr import CronExpr
from ratchet.services.cron.occurrences import latest_due, next_after

RETRY_BASE_S = 0.25
RETRY_CAP_S = 10.0


@dataclasses.dataclass(frozen=True)
class Plan:
    """What firing a due schedule does.

    slot: the one slot to record (None when every missed slot is older than
    the catch-up window); kind: CRON (on time) or CATCHUP; following: the new
    next_fire_time (None if the expression never fires again); missed: whether
    slots were passed over without firing.
    """

    slot: dt.datetime | None
    kind: str
    following: dt.datetime | None
    missed: bool


def plan_due(expr: CronExpr, tz: dt.tzinfo, due: dt.datetime, now: dt.datetime,
             catchup_window_s: float, grace_s: float) -> Plan:
    """Plan the firing of a schedule whose next_fire_time `due` is <= now.

    Only the most recent slot <= now may fire, and only if it is at most
    max(catchup_window, grace) old: after downtime one catch-up fires, never
    every missed tick. Slots older than that are passed over. Firing goes on
    from the first occurrence after now.
    """
    latest = latest_due(expr, tz, due, now)
    following = next_after(expr, tz, latest)
    lateness = (now - latest).total_seconds()
    missed = latest != due
    if lateness > max(catchup_window_s, grace_s):
        return Plan(None, "CATCHUP", following, True)
    on_time = not missed and lateness <= grace_s
    return Plan(latest, "CRON" if on_time else "CATCHUP", following, missed)


# -- overlap -------------------------------------------------------------------
ALLOW, SKIP, CANCEL_PREVIOUS, BUFFER_ONE = "ALLOW", "SKIP", "CANCEL_PREVIOUS", "BUFFER_ONE"
POLICIES = (ALLOW, SKIP, CANCEL_PREVIOUS, BUFFER_ONE)


@dataclasses.dataclass(frozen=True)
class Decision:
    """The next state of an open slot: SENDING (fire, after cancelling
    cancel_task_id if set), BUFFERED, SKIPPED (with a reason) or WAIT (a
    buffered slot stays buffered)."""

    state: str
    reason: str | None = None
    cancel_task_id: str | None = None


def needs_previous(policy: str, previous_task_id: str | None) -> bool:
    """Whether deciding requires the previous task's state from history."""
    return policy != ALLOW and bool(previous_task_id)


def decide(policy: str, slot_state: str, previous_task_id: str | None, previous_running: bool,
           other_buffered: bool) -> Decision:
    """Apply the overlap policy to a PENDING or BUFFERED slot.

    previous_running: the task of the schedule's last fired slot exists and
    is not terminal. other_buffered: another slot of this schedule is
    BUFFERED (buffer_one keeps at most one; a further slot is skipped).
    """
    if policy == ALLOW or not previous_running:
        return Decision("SENDING")
    if policy == SKIP:
        return Decision("SKIPPED", f"overlap policy skip: previous task {previous_task_id} still running")
    if policy == CANCEL_PREVIOUS:
        return Decision("SENDING", cancel_task_id=previous_task_id)
    if policy == BUFFER_ONE:
        if slot_state == "BUFFERED":
            return Decision("WAIT")
        if other_buffered:
            return Decision("SKIPPED", f"overlap policy buffer_one: a slot is already buffered behind "
                                       f"task {previous_task_id}")
        return Decision("BUFFERED")
    raise ValueError(f"unknown overlap policy {policy!r}")


def retry_delay(failures: int, base_s: float = RETRY_BASE_S, cap_s: float = RETRY_CAP_S) -> float:
    """Seconds before an open slot is tried again after `failures` transient failures in a row."""
    return min(cap_s, base_s * 2 ** max(0, failures - 1))
