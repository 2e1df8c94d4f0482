"""history's row -> message conversions that run per task on the hot paths."""

from __future__ import annotations

import datetime as dt
import random
import uuid

from google.protobuf import timestamp_pb2

from ratchet.services.history import convert
from ratchet.services.history.store import LeasedRow


def _reference(value: dt.datetime) -> timestamp_pb2.Timestamp:
    out = timestamp_pb2.Timestamp()
    out.FromDatetime(value)
    return out


def test_timestamp_is_what_from_datetime_makes():
    """Computed from the timedelta since the epoch: the same seconds and nanos as
    Timestamp.FromDatetime for aware (any zone), naive (UTC) and pre-1970 values."""
    rng = random.Random(3)
    zones = [dt.UTC, dt.timezone(dt.timedelta(hours=5, minutes=30)), dt.timezone(dt.timedelta(hours=-8))]
    for _ in range(5000):
        naive = dt.datetime(1, 1, 1) + dt.timedelta(microseconds=rng.randrange(0, 315_537_897_600 * 10 ** 6))
        for value in (naive, naive.replace(tzinfo=rng.choice(zones))):
            if value.tzinfo is not None and not (dt.datetime(1, 1, 2) <= naive <= dt.datetime(9999, 12, 30)):
                continue  # (a zone offset would leave Timestamp's range)
            got = convert.timestamp(value)
            assert (got.seconds, got.nanos) == (_reference(value).seconds, _reference(value).nanos), value
    assert convert.timestamp(None) is None
    epoch = convert.timestamp(dt.datetime(1969, 12, 31, 23, 59, 59, 500000, tzinfo=dt.UTC))
    assert (epoch.seconds, epoch.nanos) == (-1, 500_000_000)


def test_a_leased_row_shares_one_lease_duration_without_aliasing():
    now = dt.datetime.now(dt.UTC)
    row = LeasedRow(task_id=uuid.UUID("0190a0a0-0000-8000-8000-000000000000"), tenant_id="t", app_id="a",
                    task_type="x", queue="default", payload=b"null", attempt=1, max_attempts=3, lease_epoch=2,
                    run_at=now, start_to_close_s=12.5, schedule_id=None, scheduled_time=None, checkpoint=None)
    from ratchet.services.history import policy
    lease = policy.duration(30.0)
    a, b = convert.leased_to_proto(1, row, lease), convert.leased_to_proto(1, row, lease)
    assert a == b and a.lease_duration.seconds == 30 and a.start_to_close.ToNanoseconds() == 12_500_000_000
    a.lease_duration.seconds = 5
    assert lease.seconds == 30 and b.lease_duration.seconds == 30  # the batch's Duration was copied into each
    assert (a.scheduled_at.seconds, a.scheduled_at.nanos) == (_reference(now).seconds, _reference(now).nanos)


def test_every_field_of_a_leased_row_lands_in_its_namesake():
    """leased_to_proto unpacks the row by position: each field must reach the message field of its name."""
    run_at, scheduled = dt.datetime(2024, 5, 1, 12, tzinfo=dt.UTC), dt.datetime(2024, 5, 1, 11, tzinfo=dt.UTC)
    row = LeasedRow(task_id=uuid.UUID("0190a0a0-0000-8000-8000-000000000001"), tenant_id="tenant", app_id="app",
                    task_type="type", queue="queue", payload=b'{"p":1}', attempt=2, max_attempts=5, lease_epoch=7,
                    run_at=run_at, start_to_close_s=40.0, schedule_id="schedule", scheduled_time=scheduled,
                    checkpoint=b'{"c":2}')
    from ratchet.services.history import policy
    out = convert.leased_to_proto(3, row, policy.duration(30.0))
    assert (out.shard_id, out.task_id, out.tenant_id, out.app_id, out.task_type, out.queue) == (
        3, "0190a0a0-0000-8000-8000-000000000001", "tenant", "app", "type", "queue")
    assert (out.payload_json, out.attempt, out.max_attempts, out.lease_epoch) == (b'{"p":1}', 2, 5, 7)
    assert out.scheduled_at.ToDatetime(tzinfo=dt.UTC) == run_at and out.schedule_id == "schedule"
    assert out.scheduled_time.ToDatetime(tzinfo=dt.UTC) == scheduled
    assert out.start_to_close.ToSeconds() == 40 and out.last_checkpoint_json == b'{"c":2}'
