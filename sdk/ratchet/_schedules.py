"""Client calls for cron schedules and circuit breakers.

Mixed into ratchet.Client; uses its transport (`_t`) and the ScheduleService
(`_schedules`) and BreakerService (`_breakers`) stubs.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import grpc

from ratchet._transport import UNSENT, new_request_id
from ratchet._wire import breaker_info, duration, retry_message, schedule_info, timeouts_message, to_value
from ratchet._wire import overlap_policy as overlap_enum
from ratchet.api.schedules.v1 import schedules_pb2
from ratchet.api.tasks.v1 import breakers_pb2
from ratchet.models import BreakerInfo, ScheduleInfo, SchedulePage, TriggerResult


class ScheduleCalls:
    """create/get/list/pause/resume/delete/trigger schedules; list/reset breakers."""

    _t: Any
    _schedules: Any
    _breakers: Any

    def create_schedule(self, cron: str, task_type: str, payload: Any = None, *, timezone: str = "UTC",
                        queue: str | None = None, retry: Any = None, timeouts: Any = None,
                        overlap_policy: str = "allow", catchup_window: Any = None,
                        request_id: str | None = None) -> ScheduleInfo:
        """Enqueue task_type with payload at every slot of cron (5 fields, or 6
        with seconds first), read in timezone (IANA).

        overlap_policy: "allow", "skip", "cancel_previous" or "buffer_one".
        catchup_window (e.g. "10m"): after downtime the latest missed slot
        fires once if it is that recent. A malformed or too frequent (< 1 s)
        expression, or an unknown zone, raises InvalidArgument saying what is
        wrong. Safe to retry: the request id (minted when not given) makes a
        repeat return the same schedule.
        """
        template = schedules_pb2.TaskTemplate(task_type=task_type, queue=queue or "")
        if payload is not None:
            template.payload.CopyFrom(to_value(payload))
        if retry is not None:
            template.retry.CopyFrom(retry_message(retry))
        if timeouts is not None:
            template.timeouts.CopyFrom(timeouts_message(timeouts))
        req = schedules_pb2.CreateScheduleRequest(cron=cron, timezone=timezone or "UTC", task_template=template,
                                                  overlap_policy=overlap_enum(overlap_policy),
                                                  request_id=request_id or new_request_id())
        if catchup_window is not None:
            req.catchup_window.CopyFrom(duration(catchup_window, "catchup_window"))
        return schedule_info(self._t.call(self._schedules.CreateSchedule, req).schedule)

    def get_schedule(self, schedule_id: str) -> ScheduleInfo:
        """A schedule with its next and last firings."""
        resp = self._t.call(self._schedules.GetSchedule, schedules_pb2.GetScheduleRequest(schedule_id=schedule_id))
        return schedule_info(resp.schedule)

    def list_schedules(self, *, page_size: int | None = None, page_token: str | None = None) -> SchedulePage:
        """One page of the app's schedules."""
        req = schedules_pb2.ListSchedulesRequest(page_size=page_size or 0, page_token=page_token or "")
        resp = self._t.call(self._schedules.ListSchedules, req)
        return SchedulePage([schedule_info(s) for s in resp.schedules], resp.next_page_token or None)

    def iter_schedules(self, *, page_size: int | None = None) -> Iterator[ScheduleInfo]:
        """Every schedule of the app, following the pages."""
        token = None
        while True:
            page = self.list_schedules(page_size=page_size, page_token=token)
            yield from page.schedules
            if not page.next_page_token:
                return
            token = page.next_page_token

    def pause_schedule(self, schedule_id: str) -> ScheduleInfo:
        """Stop firing until resumed (a no-op when paused)."""
        resp = self._t.call(self._schedules.PauseSchedule,
                            schedules_pb2.PauseScheduleRequest(schedule_id=schedule_id))
        return schedule_info(resp.schedule)

    def resume_schedule(self, schedule_id: str) -> ScheduleInfo:
        """Fire again from the next slot after now; slots missed while paused are not replayed."""
        resp = self._t.call(self._schedules.ResumeSchedule,
                            schedules_pb2.ResumeScheduleRequest(schedule_id=schedule_id))
        return schedule_info(resp.schedule)

    def delete_schedule(self, schedule_id: str) -> None:
        """Delete the schedule; tasks it already enqueued are not affected."""
        # NOT_FOUND on a retry means an earlier try, whose answer was lost, deleted it.
        self._t.call(self._schedules.DeleteSchedule, schedules_pb2.DeleteScheduleRequest(schedule_id=schedule_id),
                     done_after_retry=frozenset({grpc.StatusCode.NOT_FOUND}))

    def trigger_schedule(self, schedule_id: str) -> TriggerResult:
        """Fire once now, outside the expression (the overlap policy applies)."""
        # No request id in this contract: only a call that surely never arrived is retried.
        resp = self._t.call(self._schedules.TriggerSchedule,
                            schedules_pb2.TriggerScheduleRequest(schedule_id=schedule_id), retry_on=UNSENT)
        return TriggerResult(resp.task_id or None, resp.skipped)

    def list_breakers(self) -> list[BreakerInfo]:
        """The app's circuit breakers that are open, half-open, or have recent crashes."""
        resp = self._t.call(self._breakers.ListBreakers, breakers_pb2.ListBreakersRequest())
        return [breaker_info(b) for b in resp.breakers]

    def reset_breaker(self, task_type: str) -> BreakerInfo:
        """Close task_type's breaker now and resume its dispatch."""
        resp = self._t.call(self._breakers.ResetBreaker, breakers_pb2.ResetBreakerRequest(task_type=task_type))
        return breaker_info(resp.breaker)
