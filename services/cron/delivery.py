"""Delivery of recorded slots: the overlap decision, then the enqueue.

A slot moves PENDING -> (BUFFERED ->) SENDING -> FIRED, or to SKIPPED or
FAILED. The decision is committed (as SENDING, with the task to cancel
first for cancel_previous) BEFORE anything is sent, so a crash never lets a
second look at the previous task change a decision already acted on. A
SENDING slot is re-sent until the gateway acknowledges it; the gateway's
idempotency key `sched:<schedule_id>@<slot>` makes every re-send (after a
crash, a timeout, or by a second cron process at the same moment) return
the same task. No RPC runs inside a transaction. The process that decides
SENDING sends at once and holds the slot for `send_lease_s`; other processes
re-send only after that, so in the normal case every slot is sent exactly
once, a crash costs one lease, and a send slower than the lease is at worst
sent twice and deduplicated.

Per schedule, slots are handled strictly in slot order, and every
transaction that changes one locks the schedule row first: decisions read
the previous task (`last_task_id`) under that lock and are refused if it
moved, so two cron processes cannot decide one slot two ways.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import logging

from ratchet.services.cron import convert, errors
from ratchet.services.cron.firing import Decision, decide, needs_previous, retry_delay
from ratchet.services.cron.peers import TERMINAL, Gateway, History
from ratchet.services.cron.store import ScheduleRow, SlotRow, Store

log = logging.getLogger(__name__)

MAX_STEPS = 32
MAX_OPEN = 16


@dataclasses.dataclass
class _View:
    schedule: ScheduleRow
    slots: list[SlotRow]
    now: dt.datetime


class Delivery:
    """Acts on one schedule's open slots until nothing more can be done now."""

    def __init__(self, store: Store, gateway: Gateway, history: History, buffer_check_s: float,
                 send_lease_s: float):
        self.store = store
        self.gateway = gateway
        self.history = history
        self.buffer_check_s = buffer_check_s
        self.send_lease_s = send_lease_s

    async def deliver_schedule(self, schedule_id: str) -> None:
        """Decide and send the schedule's open slots, oldest first."""
        for _ in range(MAX_STEPS):
            view = await self._read(schedule_id)
            if view is None or not await self._step(view):
                return
        log.warning("schedule %s: open slots still moving after %d steps; continuing next pass",
                    schedule_id, MAX_STEPS)

    async def _read(self, schedule_id: str) -> _View | None:
        async with self.store.tx() as tx:
            schedule = await tx.schedule_get_any(schedule_id)
            if schedule is None:
                return None
            return _View(schedule, await tx.slot_list_open(schedule_id, MAX_OPEN), await tx.clock_read())

    async def _step(self, view: _View) -> bool:
        """One change to the first actionable slot; True when something moved (look again)."""
        other_buffered = False
        running: bool | None = None
        for slot in view.slots:
            due = slot.next_attempt_at <= view.now
            if slot.state == "SENDING":
                return due and await self._send(view.schedule, slot)
            if slot.state == "PENDING" and not due:
                return False  # backing off after a transient failure; later slots wait their turn
            if running is None:
                try:
                    running = await self._previous_running(view.schedule)
                except errors.Transient as e:
                    await self._retry_later(view.schedule, slot, e)
                    return False
            decision = decide(view.schedule.overlap_policy, slot.state, view.schedule.last_task_id, running,
                              other_buffered)
            if decision.state == "WAIT":
                if due:
                    await self._check_later(view.schedule, slot)
                other_buffered = True
                continue
            if await self._apply(view.schedule, slot, decision) and decision.state == "SENDING":
                sending = dataclasses.replace(slot, state="SENDING", cancel_task_id=decision.cancel_task_id,
                                              attempts=0)
                await self._send(view.schedule, sending)
            return True
        return False

    async def _previous_running(self, schedule: ScheduleRow) -> bool:
        if not needs_previous(schedule.overlap_policy, schedule.last_task_id):
            return False
        state = await self.history.task_state(schedule.last_task_id, schedule.tenant_id)
        return state is not None and state not in TERMINAL

    async def _apply(self, schedule: ScheduleRow, slot: SlotRow, decision: Decision) -> bool:
        """Commit the decision under the schedule lock, if what it was based on still holds."""
        async with self.store.tx() as tx:
            locked = await tx.schedule_lock(schedule.schedule_id)
            if locked is None or locked.last_task_id != schedule.last_task_id:
                return False  # the previous task moved on; decide again from a fresh read
            earlier_open, other_buffered = await tx.slot_decision_guards(schedule.schedule_id, slot.slot)
            if earlier_open:
                return False
            if decision.state == "BUFFERED" and other_buffered:
                decision = Decision("SKIPPED", "overlap policy buffer_one: a slot is already buffered")
            hold = {"SENDING": self.send_lease_s, "BUFFERED": self.buffer_check_s}.get(decision.state, 0.0)
            moved = await tx.slot_decide(schedule.schedule_id, slot.slot, slot.state, decision.state,
                                         decision.reason, decision.cancel_task_id, hold)
        if moved and decision.state != "SENDING":
            log.info("schedule %s slot %s: %s%s", schedule.schedule_id, slot.slot.isoformat(), decision.state,
                     f" ({decision.reason})" if decision.reason else "")
        return moved

    async def _send(self, schedule: ScheduleRow, slot: SlotRow) -> bool:
        try:
            if slot.cancel_task_id:
                await self.history.cancel(slot.cancel_task_id, schedule.tenant_id)
            response = await self.gateway.enqueue_scheduled(
                schedule.tenant_id, schedule.app_id, schedule.schedule_id, slot.slot,
                convert.enqueue_request(schedule.task_template))
        except errors.Transient as e:
            await self._retry_later(schedule, slot, e)
            return False
        except errors.Refused as e:
            async with self.store.tx() as tx:
                await tx.schedule_lock(schedule.schedule_id)
                await tx.slot_mark_failed(schedule.schedule_id, slot.slot, str(e))
            log.warning("schedule %s slot %s FAILED: %s", schedule.schedule_id, slot.slot.isoformat(), e)
            return True
        async with self.store.tx() as tx:
            await tx.schedule_lock(schedule.schedule_id)
            if await tx.slot_mark_fired(schedule.schedule_id, slot.slot, response.task_id):
                await tx.schedule_record_fire(schedule.schedule_id, slot.slot, response.task_id)
        log.debug("schedule %s slot %s fired task %s%s", schedule.schedule_id, slot.slot.isoformat(),
                  response.task_id, " (deduplicated)" if response.deduplicated else "")
        return True

    async def _retry_later(self, schedule: ScheduleRow, slot: SlotRow, err: Exception) -> None:
        delay = retry_delay(slot.attempts + 1)
        async with self.store.tx() as tx:
            await tx.schedule_lock(schedule.schedule_id)
            await tx.slot_retry_later(schedule.schedule_id, slot.slot, slot.state, str(err)[:1000], delay)
        level = logging.WARNING if slot.attempts in (0, 5) or slot.attempts % 50 == 0 else logging.DEBUG
        log.log(level, "schedule %s slot %s (%s): %s; try %d again in %.2fs", schedule.schedule_id,
                slot.slot.isoformat(), slot.state, err, slot.attempts + 1, delay)

    async def _check_later(self, schedule: ScheduleRow, slot: SlotRow) -> None:
        async with self.store.tx() as tx:
            await tx.schedule_lock(schedule.schedule_id)
            await tx.slot_check_later(schedule.schedule_id, slot.slot, self.buffer_check_s)
