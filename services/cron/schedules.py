"""The schedules API: create, read, list, pause, resume, delete, trigger.

Every call acts for one app (the gateway resolved it from the API key); a
schedule of another app is NOT_FOUND, like an unknown one. Times come from
the cron database's clock.
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import dataclasses
import datetime as dt
import json
import logging
import time
import uuid
from collections.abc import Callable

from ratchet.api.schedules.v1 import schedules_pb2 as spb
from ratchet.services.cron import convert, errors
from ratchet.services.cron.claim import compiled
from ratchet.services.cron.delivery import Delivery
from ratchet.services.cron.occurrences import next_after
from ratchet.services.cron.store import NewSchedule, ScheduleRow, SlotRow, Store
from ratchet.services.cron.validation import validate_create

log = logging.getLogger(__name__)

DEFAULT_PAGE = 100
MAX_PAGE = 500
TRIGGER_POLL_S = 0.05


@dataclasses.dataclass(frozen=True)
class Caller:
    """The app a call acts for."""

    tenant_id: str
    app_id: str


class ScheduleApi:
    """The domain behind CronService's RPCs."""

    def __init__(self, store: Store, delivery: Delivery, min_interval_s: float):
        self.store = store
        self.delivery = delivery
        self.min_interval_s = min_interval_s
        self.on_change: Callable[[], None] = lambda: None  # a schedule may fire sooner: the fire loop looks

    async def create(self, caller: Caller, req: spb.CreateScheduleRequest) -> spb.Schedule:
        """Validate and store; the same request_id returns the schedule it created."""
        async with self.store.tx() as tx:
            now = await tx.clock_read()
            valid = validate_create(req, now, self.min_interval_s)
            first = next_after(valid.expr, valid.tz, now)
            row = await tx.schedule_insert(NewSchedule(
                schedule_id=str(uuid.uuid4()), tenant_id=caller.tenant_id, app_id=caller.app_id,
                cron=valid.cron, timezone=valid.timezone, task_template=valid.template,
                overlap_policy=valid.overlap_policy, catchup_window_ms=valid.catchup_window_ms,
                next_fire_time=first, request_id=valid.request_id, fingerprint=valid.fingerprint,
                created_at=now))
            if row is None:
                row = await tx.schedule_get_by_request(caller.tenant_id, caller.app_id, valid.request_id)
                if row is None or row.fingerprint != valid.fingerprint:
                    raise errors.AlreadyExists(
                        f"request_id {valid.request_id!r} already created schedule "
                        f"{row.schedule_id if row else '(deleted)'} from a different request; use a new "
                        f"request_id for a new schedule")
        self.on_change()
        return convert.schedule_message(row)

    async def get(self, caller: Caller, schedule_id: str) -> spb.Schedule:
        async with self.store.tx() as tx:
            row = await tx.schedule_get(schedule_id, caller.tenant_id, caller.app_id)
        if row is None:
            raise errors.NotFound(schedule_id)
        return convert.schedule_message(row)

    async def list(self, caller: Caller, page_size: int, page_token: str) -> spb.ListSchedulesResponse:
        """One page, oldest first; next_page_token is empty on the last page."""
        if page_size < 0 or page_size > MAX_PAGE:
            raise errors.InvalidArgument(f"page_size must be 1..{MAX_PAGE} (0 means {DEFAULT_PAGE}), got {page_size}")
        size = page_size or DEFAULT_PAGE
        after = _decode_token(page_token) if page_token else None
        async with self.store.tx() as tx:
            rows = await tx.schedule_list(caller.tenant_id, caller.app_id, after, size + 1)
        more = len(rows) > size
        rows = rows[:size]
        token = _encode_token(rows[-1]) if more else ""
        return spb.ListSchedulesResponse(schedules=[convert.schedule_message(r) for r in rows],
                                         next_page_token=token)

    async def pause(self, caller: Caller, schedule_id: str) -> spb.Schedule:
        """Stop firing; buffered and undecided cron slots are skipped. A no-op when paused."""
        async with self.store.tx() as tx:
            row = await self._lock(tx, caller, schedule_id)
            if row.state == "ACTIVE":
                row = await tx.schedule_pause(schedule_id)
                await tx.slot_skip_on_pause(schedule_id)
        return convert.schedule_message(row)

    async def resume(self, caller: Caller, schedule_id: str) -> spb.Schedule:
        """Fire again from the first occurrence after now. A no-op when active."""
        async with self.store.tx() as tx:
            row = await self._lock(tx, caller, schedule_id)
            if row.state == "PAUSED":
                expr, tz = compiled(row.cron, row.timezone)
                following = next_after(expr, tz, await tx.clock_read())
                if following is None:
                    raise errors.FailedPrecondition(f"schedule {schedule_id} has no further occurrence")
                row = await tx.schedule_resume(schedule_id, following)
        self.on_change()
        return convert.schedule_message(row)

    async def delete(self, caller: Caller, schedule_id: str) -> None:
        """Delete the schedule and its slots; tasks already enqueued are not touched."""
        async with self.store.tx() as tx:
            await self._lock(tx, caller, schedule_id)
            await tx.slot_delete_for_schedule(schedule_id)
            await tx.schedule_delete(schedule_id, caller.tenant_id, caller.app_id)

    async def trigger(self, caller: Caller, schedule_id: str, timeout_s: float) -> spb.TriggerScheduleResponse:
        """Fire once now (slot = the database clock) through the normal path; the overlap policy applies.

        Waits up to timeout_s for the slot to be decided and sent (by this call, or by a
        delivery loop that got to it first).
        """
        deadline = time.monotonic() + timeout_s
        async with self.store.tx() as tx:
            await self._lock(tx, caller, schedule_id)
            slot = await tx.clock_read()
            if not await tx.slot_insert(schedule_id, slot, "TRIGGER"):
                raise errors.Unavailable("another firing took this very instant; trigger again")
        await self.delivery.deliver_schedule(schedule_id)
        while True:
            async with self.store.tx() as tx:
                row = await tx.slot_get(schedule_id, slot)
            in_flight = row is not None and row.state in ("PENDING", "SENDING") and not row.reason
            if not in_flight or time.monotonic() >= deadline:
                return _trigger_answer(schedule_id, row)
            await asyncio.sleep(TRIGGER_POLL_S)

    async def _lock(self, tx, caller: Caller, schedule_id: str) -> ScheduleRow:
        row = await tx.schedule_lock_owned(schedule_id, caller.tenant_id, caller.app_id)
        if row is None:
            raise errors.NotFound(schedule_id)
        return row


def _trigger_answer(schedule_id: str, row: SlotRow | None) -> spb.TriggerScheduleResponse:
    if row is None:
        raise errors.NotFound(schedule_id)  # deleted meanwhile
    if row.state == "FIRED":
        return spb.TriggerScheduleResponse(task_id=row.task_id)
    if row.state == "SKIPPED":
        return spb.TriggerScheduleResponse(skipped=True)
    if row.state == "BUFFERED":
        return spb.TriggerScheduleResponse()
    if row.state == "FAILED":
        raise errors.FailedPrecondition(f"the triggered task was refused: {row.reason}")
    raise errors.Unavailable(f"the trigger is recorded and will fire as soon as it can be delivered "
                             f"({row.reason or 'still being sent'}); do not trigger again unless you want "
                             f"a second run")


def _encode_token(row: ScheduleRow) -> str:
    data = json.dumps({"c": row.created_at.isoformat(), "id": row.schedule_id}, separators=(",", ":"))
    return base64.urlsafe_b64encode(data.encode()).decode().rstrip("=")


def _decode_token(token: str) -> tuple[dt.datetime, str]:
    try:
        data = json.loads(base64.urlsafe_b64decode(token + "=" * (-len(token) % 4)))
        created = dt.datetime.fromisoformat(data["c"])
        sid = str(uuid.UUID(data["id"]))
        if created.tzinfo is None:
            raise ValueError("naive time")
    except (binascii.Error, ValueError, KeyError, TypeError, UnicodeDecodeError):
        raise errors.InvalidArgument("page_token is not one this service issued; pass next_page_token "
                                     "back unchanged, or leave it empty for the first page") from None
    return created, sid
