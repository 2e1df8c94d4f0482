"""Next occurrences on fixed dates, in UTC and in two time zones across both
daylight-saving transitions, and the DST policy: the repeated hour fires
once (first occurrence), a skipped time fires at the first valid instant."""

from __future__ import annotations

import datetime as dt

import pytest

from ratchet.services.cron.cronexpr import CronError, parse
from ratchet.services.cron.occurrences import UTC, latest_due, next_after, smallest_gap, validate, zone

NY = zone("America/New_York")
BERLIN = zone("Europe/Berlin")


def utc(*args) -> dt.datetime:
    return dt.datetime(*args, tzinfo=UTC)


def run(cron: str, tz, start: dt.datetime, n: int) -> list[dt.datetime]:
    expr, out, t = parse(cron), [], start
    for _ in range(n):
        t = next_after(expr, tz, t)
        out.append(t)
    return out


def local(instants, tz) -> list[str]:
    return [i.astimezone(tz).strftime("%m-%d %H:%M:%S%z") for i in instants]


def test_every_five_minutes_utc():
    assert run("*/5 * * * *", UTC, utc(2024, 1, 1, 10, 2, 30), 3) == [
        utc(2024, 1, 1, 10, 5), utc(2024, 1, 1, 10, 10), utc(2024, 1, 1, 10, 15)]


def test_strictly_after_an_occurrence():
    assert next_after(parse("0 * * * *"), UTC, utc(2024, 1, 1, 10)) == utc(2024, 1, 1, 11)
    # Sub-second instants: the occurrence at the whole second is still after.
    assert next_after(parse("* * * * * *"), UTC, dt.datetime(2024, 1, 1, 10, 0, 0, 500, tzinfo=UTC)) == \
        utc(2024, 1, 1, 10, 0, 1)


def test_seconds_field():
    assert run("*/20 * * * * *", UTC, utc(2024, 1, 1, 23, 59, 30), 3) == [
        utc(2024, 1, 1, 23, 59, 40), utc(2024, 1, 2, 0, 0, 0), utc(2024, 1, 2, 0, 0, 20)]


def test_month_and_year_rollover_and_short_months():
    assert run("0 0 31 * *", UTC, utc(2024, 1, 31, 12), 3) == [
        utc(2024, 3, 31), utc(2024, 5, 31), utc(2024, 7, 31)]
    assert run("0 12 29 2 *", UTC, utc(2024, 3, 1), 2) == [utc(2028, 2, 29, 12), utc(2032, 2, 29, 12)]


def test_leap_day_across_the_2100_gap():
    assert next_after(parse("0 0 29 2 *"), UTC, utc(2097, 1, 1)) == utc(2104, 2, 29)


def test_vixie_or_rule_dates():
    fires = run("0 0 13 * FRI", UTC, utc(2024, 9, 30), 4)
    assert fires == [utc(2024, 10, 4), utc(2024, 10, 11), utc(2024, 10, 13), utc(2024, 10, 18)]
    assert run("0 0 */2 * FRI", UTC, utc(2024, 9, 1), 2) == [utc(2024, 9, 13), utc(2024, 9, 27)]


def test_weekday_names_and_sunday_as_seven():
    assert run("30 8 * * 7", UTC, utc(2024, 6, 3), 2) == [utc(2024, 6, 9, 8, 30), utc(2024, 6, 16, 8, 30)]


# -- America/New_York: spring forward 2024-03-10 02:00 EST -> 03:00 EDT;
#    fall back 2024-11-03 02:00 EDT -> 01:00 EST.
def test_new_york_spring_forward_skipped_time_fires_at_the_transition():
    fires = run("30 2 * * *", NY, utc(2024, 3, 9, 12), 3)
    assert local(fires, NY) == ["03-10 03:00:00-0400", "03-11 02:30:00-0400", "03-12 02:30:00-0400"]
    assert fires[0] == utc(2024, 3, 10, 7)


def test_new_york_spring_forward_every_half_hour_collapses_the_gap():
    fires = run("*/30 * * * *", NY, utc(2024, 3, 10, 5), 5)
    assert local(fires, NY) == ["03-10 00:30:00-0500", "03-10 01:00:00-0500", "03-10 01:30:00-0500",
                                "03-10 03:00:00-0400", "03-10 03:30:00-0400"]


def test_new_york_fall_back_repeated_hour_fires_once():
    fires = run("*/30 * * * *", NY, utc(2024, 11, 3, 4), 5)
    assert local(fires, NY) == ["11-03 00:30:00-0400", "11-03 01:00:00-0400", "11-03 01:30:00-0400",
                                "11-03 02:00:00-0500", "11-03 02:30:00-0500"]
    daily = run("30 1 * * *", NY, utc(2024, 11, 2, 12), 2)
    assert local(daily, NY) == ["11-03 01:30:00-0400", "11-04 01:30:00-0500"]


def test_new_york_fall_back_from_inside_the_second_pass():
    # 01:15 EST is the second 01:15: the 01:30 of this night already fired (EDT).
    after = utc(2024, 11, 3, 6, 15)
    assert after.astimezone(NY).strftime("%H:%M%z") == "01:15-0500"
    assert local([next_after(parse("30 1 * * *"), NY, after)], NY) == ["11-04 01:30:00-0500"]
    assert local([next_after(parse("*/30 * * * *"), NY, after)], NY) == ["11-03 02:00:00-0500"]


# -- Europe/Berlin: spring forward 2024-03-31 02:00 CET -> 03:00 CEST;
#    fall back 2024-10-27 03:00 CEST -> 02:00 CET.
def test_berlin_spring_forward_skipped_time_fires_at_the_transition():
    fires = run("15 2 * * *", BERLIN, utc(2024, 3, 30, 12), 2)
    assert local(fires, BERLIN) == ["03-31 03:00:00+0200", "04-01 02:15:00+0200"]
    assert fires[0] == utc(2024, 3, 31, 1)


def test_berlin_spring_forward_seconds_schedule_fires_once_at_the_transition():
    fires = run("*/20 59 1,2,3 * * *", BERLIN, utc(2024, 3, 31, 0, 59, 30), 4)
    assert local(fires, BERLIN) == ["03-31 01:59:40+0100", "03-31 03:00:00+0200",
                                    "03-31 03:59:00+0200", "03-31 03:59:20+0200"]


def test_berlin_fall_back_repeated_hour_fires_once():
    fires = run("0,30 2 * * *", BERLIN, utc(2024, 10, 26, 12), 4)
    assert local(fires, BERLIN) == ["10-27 02:00:00+0200", "10-27 02:30:00+0200",
                                    "10-28 02:00:00+0100", "10-28 02:30:00+0100"]


def test_hourly_across_berlin_fall_back_has_no_duplicate_and_a_two_hour_gap():
    fires = run("0 * * * *", BERLIN, utc(2024, 10, 26, 22, 30), 4)
    assert local(fires, BERLIN) == ["10-27 01:00:00+0200", "10-27 02:00:00+0200",
                                    "10-27 03:00:00+0100", "10-27 04:00:00+0100"]
    assert fires[2] - fires[1] == dt.timedelta(hours=2)


def test_latest_due_finds_the_most_recent_missed_slot():
    expr = parse("*/10 * * * * *")
    assert latest_due(expr, UTC, utc(2024, 1, 1), utc(2024, 1, 1, 5, 0, 33)) == utc(2024, 1, 1, 5, 0, 30)
    assert latest_due(expr, UTC, utc(2024, 1, 1, 5, 0, 30), utc(2024, 1, 1, 5, 0, 30)) == utc(2024, 1, 1, 5, 0, 30)
    # A month of per-second ticks missed: looked up from the end, not walked.
    every_second = parse("* * * * * *")
    assert latest_due(every_second, UTC, utc(2024, 1, 1), utc(2024, 2, 1, 0, 0, 0, 1)) == utc(2024, 2, 1)


def test_smallest_gap():
    assert smallest_gap(parse("*/2 * * * * *"), UTC, utc(2024, 1, 1)) == 2
    assert smallest_gap(parse("0,1 0 * * * *"), UTC, utc(2024, 1, 1)) == 1
    assert smallest_gap(parse("0 0,23 * * *"), UTC, utc(2024, 1, 1)) == 3600
    assert smallest_gap(parse("0,59 0,1 * * *"), UTC, utc(2024, 1, 1)) == 60


@pytest.mark.parametrize("cron,tz,floor,expected", [
    ("* * * * *", "Mars/Olympus_Mons", 1, "unknown time zone 'Mars/Olympus_Mons'"),
    ("* * * * *", "../etc/passwd", 1, "unknown time zone"),
    ("* * * * * *", "UTC", 5, "fires 1s apart at its closest; the smallest interval allowed is 5s"),
    ("*/3 * * * * *", "UTC", 5, "fires 3s apart"),
    ("0,1 0 * * * *", "UTC", 2, "fires 1s apart"),
    ("0 0 30 2 *", "UTC", 1, "never fires"),
])
def test_validate_refuses_with_a_message(cron, tz, floor, expected):
    with pytest.raises(CronError) as err:
        validate(cron, tz, utc(2024, 1, 1), floor)
    assert expected in str(err.value)


def test_validate_accepts_at_the_floor_and_defaults_to_utc():
    expr, tz = validate("*/5 * * * * *", "", utc(2024, 1, 1), 5)
    assert tz is UTC and expr.has_seconds
    validate("0 9 * * MON-FRI", "Europe/Berlin", utc(2024, 1, 1), 60)


def test_half_hour_dst_shift_lord_howe():
    # Lord Howe Island moves its clocks by 30 minutes: 2024-10-06 02:00 -> 02:30.
    howe = zone("Australia/Lord_Howe")
    fires = run("*/15 2 * * *", howe, utc(2024, 10, 5, 15, 0), 3)
    assert local(fires, howe) == ["10-06 02:30:00+1100", "10-06 02:45:00+1100", "10-07 02:00:00+1100"]
