"""Claiming due schedules: the one transaction that turns a due occurrence
into a recorded slot.

In one transaction, on the database clock: lock due schedules (FOR UPDATE
SKIP LOCKED, so a second cron process skips them), record the slot to fire
as PENDING (UNIQUE (schedule_id, slot)), and compare-and-set next_fire_time
to the following occurrence. Either both happen or neither: a crash before
commit leaves the schedule due (it is claimed again), a crash after it
leaves a PENDING slot (delivered by whichever process looks next).
"""

from __future__ import annotations

import functools
import logging

from ratchet.services.cron.cronexpr import CronError, CronExpr, parse
from ratchet.services.cron.firing import plan_due
from ratchet.services.cron.occurrences import zone
from ratchet.services.cron.store import ScheduleRow, Store, Tx

log = logging.getLogger(__name__)


class LostRace(Exception):
    """next_fire_time moved under a row lock we held: a bug, never expected."""


@functools.lru_cache(maxsize=4096)
def compiled(cron: str, timezone: str) -> tuple[CronExpr, object]:
    """A stored schedule's expression and zone, parsed once per process."""
    return parse(cron), zone(timezone)


async def claim_due(store: Store, limit: int, grace_s: float) -> tuple[list[str], float | None]:
    """Record the slots of up to `limit` due schedules -> (the ids that got one, seconds until
    the next schedule is due when none was: None if no schedule could fire). A read outside any
    transaction first: when nothing is due (most looks) that is all."""
    async with store.read() as r:
        due_in = await r.schedule_next_due()
    if due_in is None or due_in > 0:
        return [], due_in
    async with store.tx() as tx:
        now = await tx.clock_read()
        rows = await tx.schedule_claim_due(now, limit)
        fired = []
        for row in rows:
            if await _claim_one(tx, row, now, grace_s):
                fired.append(row.schedule_id)
    return fired, None


async def _claim_one(tx: Tx, row: ScheduleRow, now, grace_s: float) -> bool:
    try:
        expr, tz = compiled(row.cron, row.timezone)
    except CronError as e:
        # Stored schedules were valid when created; pause rather than fail every tick.
        log.error("schedule %s: stored expression no longer parses (%s); pausing it", row.schedule_id, e)
        if not await tx.schedule_advance(row.schedule_id, row.next_fire_time, None):
            raise LostRace(row.schedule_id) from e
        return False
    plan = plan_due(expr, tz, row.next_fire_time, now, row.catchup_window_ms / 1000, grace_s)
    recorded = plan.slot is not None and await tx.slot_insert(row.schedule_id, plan.slot, plan.kind)
    if not await tx.schedule_advance(row.schedule_id, row.next_fire_time, plan.following):
        raise LostRace(row.schedule_id)
    if plan.missed or plan.kind == "CATCHUP":
        log.info("schedule %s: missed slots from %s; %s; next at %s", row.schedule_id,
                 row.next_fire_time.isoformat(),
                 f"catching up with {plan.slot.isoformat()}" if plan.slot else "all older than the catch-up window",
                 plan.following.isoformat() if plan.following else "never")
    if plan.following is None:
        log.warning("schedule %s: the expression has no further occurrence; paused", row.schedule_id)
    return recorded
