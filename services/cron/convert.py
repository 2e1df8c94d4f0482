"""Between the public schedule shapes (ratchet.api.schedules.v1) and rows."""

from __future__ import annotations

import datetime as dt

from google.protobuf import duration_pb2, json_format, timestamp_pb2

from ratchet.api.schedules.v1 import schedules_pb2 as spb
from ratchet.api.tasks.v1 import tasks_pb2
from ratchet.services.cron.store import ScheduleRow

POLICY_NAMES = {
    spb.OVERLAP_POLICY_ALLOW: "ALLOW", spb.OVERLAP_POLICY_SKIP: "SKIP",
    spb.OVERLAP_POLICY_CANCEL_PREVIOUS: "CANCEL_PREVIOUS", spb.OVERLAP_POLICY_BUFFER_ONE: "BUFFER_ONE",
}
POLICY_VALUES = {name: value for value, name in POLICY_NAMES.items()}
STATE_VALUES = {"ACTIVE": spb.SCHEDULE_STATE_ACTIVE, "PAUSED": spb.SCHEDULE_STATE_PAUSED}


def template_json(template: spb.TaskTemplate) -> dict:
    """The template as proto JSON (proto field names), as stored."""
    return json_format.MessageToDict(template, preserving_proto_field_name=True)


def template_message(data: dict) -> spb.TaskTemplate:
    return json_format.ParseDict(data, spb.TaskTemplate())


def enqueue_request(data: dict) -> tasks_pb2.EnqueueTaskRequest:
    """The enqueue a slot sends: the template's fields, no key, delay or run_at."""
    t = template_message(data)
    req = tasks_pb2.EnqueueTaskRequest(task_type=t.task_type, queue=t.queue)
    if t.HasField("payload"):
        req.payload.CopyFrom(t.payload)
    if t.HasField("retry"):
        req.retry.CopyFrom(t.retry)
    if t.HasField("timeouts"):
        req.timeouts.CopyFrom(t.timeouts)
    return req


def _ts(value: dt.datetime | None) -> timestamp_pb2.Timestamp | None:
    if value is None:
        return None
    ts = timestamp_pb2.Timestamp()
    ts.FromDatetime(value.astimezone(dt.UTC))
    return ts


def schedule_message(row: ScheduleRow) -> spb.Schedule:
    """The public Schedule of a row."""
    window = duration_pb2.Duration()
    window.FromMilliseconds(row.catchup_window_ms)
    msg = spb.Schedule(schedule_id=row.schedule_id, cron=row.cron, timezone=row.timezone,
                       task_template=template_message(row.task_template),
                       overlap_policy=POLICY_VALUES[row.overlap_policy], catchup_window=window,
                       state=STATE_VALUES[row.state], last_task_id=row.last_task_id or "",
                       created_at=_ts(row.created_at), updated_at=_ts(row.updated_at))
    if row.next_fire_time is not None:
        msg.next_fire_time.CopyFrom(_ts(row.next_fire_time))
    if row.last_fire_time is not None:
        msg.last_fire_time.CopyFrom(_ts(row.last_fire_time))
    return msg
