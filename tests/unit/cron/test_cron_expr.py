"""Cron expression parsing: every supported form, and a clear message for
every malformed one (the message goes back to the customer verbatim)."""

from __future__ import annotations

import pytest

from ratchet.services.cron.cronexpr import CronError, parse


def test_five_fields_default_seconds_to_zero():
    e = parse("*/15 9-17 * * MON-FRI")
    assert e.seconds == (0,) and e.minutes == (0, 15, 30, 45)
    assert e.hours == tuple(range(9, 18)) and e.weekdays == (1, 2, 3, 4, 5)
    assert not e.has_seconds and e.dom_star and not e.dow_star


def test_six_fields_seconds_first():
    e = parse("*/2 * * * * *")
    assert e.has_seconds and e.seconds == tuple(range(0, 60, 2)) and e.minutes == tuple(range(60))


@pytest.mark.parametrize("text,field,values", [
    ("1,15,30 * * * *", "minutes", (1, 15, 30)),
    ("10-50/10 * * * *", "minutes", (10, 20, 30, 40, 50)),
    ("5/20 * * * *", "minutes", (5, 25, 45)),
    ("0 0 * jan,Jul-SEP *", "months", (1, 7, 8, 9)),
    ("0 0 * * sun,SAT", "weekdays", (0, 6)),
    ("0 0 * * 5-7", "weekdays", (0, 5, 6)),
    ("0 0 * * 7", "weekdays", (0,)),
    ("0 0 1-31/10 * *", "days", (1, 11, 21, 31)),
    ("0 0-23/6,1 * * *", "hours", (0, 1, 6, 12, 18)),
])
def test_lists_ranges_steps_and_names(text, field, values):
    assert getattr(parse(text), field) == values


def test_macros():
    assert parse("@hourly").minutes == (0,) and parse("@hourly").hours == tuple(range(24))
    assert parse("@DAILY").hours == (0,)
    weekly = parse("@weekly")
    assert weekly.weekdays == (0,) and weekly.dom_star
    assert parse("@yearly").months == (1,) and parse("@annually").days == (1,)


def test_vixie_or_rule_flags():
    both = parse("0 0 13 * FRI")
    assert not both.dom_star and not both.dow_star
    assert both.day_matches(2024, 10, 13)  # a Sunday, but the 13th
    assert both.day_matches(2024, 10, 4)  # a Friday, not the 13th
    assert not both.day_matches(2024, 10, 5)
    stepped = parse("0 0 */2 * FRI")  # '*' first: Vixie ANDs the two
    assert stepped.dom_star
    assert stepped.day_matches(2024, 9, 13) and not stepped.day_matches(2024, 9, 6)


@pytest.mark.parametrize("text,expected", [
    ("", "cron expression is empty"),
    ("   ", "cron expression is empty"),
    ("* * * *", "has 4 field(s); expected 5"),
    ("* * * * * * *", "has 7 field(s); expected 5"),
    ("60 * * * *", "60 is out of range for the minute field (allowed 0-59)"),
    ("* 24 * * *", "24 is out of range for the hour field (allowed 0-23)"),
    ("0 0 0 * *", "0 is out of range for the day-of-month field (allowed 1-31)"),
    ("0 0 32 * *", "32 is out of range for the day-of-month field (allowed 1-31)"),
    ("0 0 * 13 *", "13 is out of range for the month field (allowed 1-12 or JAN-DEC)"),
    ("0 0 * * 8", "8 is out of range for the day-of-week field (allowed 0-7 or SUN-SAT"),
    ("60 * * * * *", "60 is out of range for the second field (allowed 0-59)"),
    ("0 0 * FOO *", "'FOO' is not a valid month (allowed 1-12 or JAN-DEC)"),
    ("0 0 * * MONDAY", "'MONDAY' is not a valid day-of-week"),
    ("MON * * * *", "'MON' is not a valid minute (allowed 0-59)"),
    ("*/0 * * * *", "the step 0 in the minute field '*/0' is out of range (allowed 1-60)"),
    ("*/61 * * * *", "the step 61 in the minute field '*/61' is out of range (allowed 1-60)"),
    ("*/x * * * *", "the step 'x' in the minute field '*/x' must be a positive whole number"),
    ("*/ * * * *", "the step '' in the minute field '*/' must be a positive whole number"),
    ("50-10 * * * *", "the range '50-10' in the minute field runs backwards"),
    ("1-* * * * *", "'*' is not a valid minute"),
    ("5- * * * *", "has a range with a missing end"),
    ("1,,2 * * * *", "the minute field '1,,2' has an empty list item"),
    ("-5 * * * *", "has a range with a missing end"),
    ("0 0 L * *", "'L' in the day-of-month field is not supported"),
    ("0 0 * * 5#3", "'5#3' in the day-of-week field is not supported"),
    ("0 0 ? * *", "'?' in the day-of-month field is not supported; use '*'"),
    ("@reboot", "unknown cron macro '@reboot'"),
    ("0 0 30 2 *", "never fires: no month in (FEB) has a day-of-month in (30)"),
    ("0 0 31 APR,JUN,SEP,NOV *", "never fires: no month in (APR, JUN, SEP, NOV) has a day-of-month in (31)"),
    ("0 0 30,31 2 */1", "never fires"),
])
def test_malformed_expressions_say_what_is_wrong(text, expected):
    with pytest.raises(CronError) as err:
        parse(text)
    assert expected in str(err.value)


def test_feb_30_fires_under_the_or_rule():
    # Both day fields restricted: any Monday in February matches.
    assert parse("0 0 30 2 MON").months == (2,)


def test_feb_29_is_a_valid_expression():
    assert parse("0 0 29 2 *").days == (29,)
