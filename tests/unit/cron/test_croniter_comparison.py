"""Why the cron service keeps its own expressions (cronexpr.py, occurrences.py)
rather than croniter: the cases where croniter 7.0.0, at its best settings for
our rules (Vixie day matching via implement_cron_bug, seconds first via
second_at_beginning), gives a different answer from the rules we keep.

Each test asserts croniter's measured answer AND ours. If one fails on the
croniter side, a newer croniter changed that behaviour: re-decide whether to
adopt it (docs/architecture.md, cron section, says what switching needs) before
updating the expected value.
"""

from __future__ import annotations

import datetime as dt

import pytest
from croniter import CroniterBadCronError, croniter

from ratchet.services.cron.cronexpr import CronError, parse
from ratchet.services.cron.occurrences import UTC, next_after, zone

NY = zone("America/New_York")
BEST = dict(implement_cron_bug=True, day_or=True)


def utc(*args) -> dt.datetime:
    return dt.datetime(*args, tzinfo=UTC)


def theirs(cron: str, tz: dt.tzinfo, start: dt.datetime, n: int) -> list[dt.datetime]:
    it = croniter(cron, start.astimezone(tz), ret_type=dt.datetime, second_at_beginning=len(cron.split()) == 6, **BEST)
    return [it.get_next().astimezone(UTC) for _ in range(n)]


def ours(cron: str, tz: dt.tzinfo, start: dt.datetime, n: int) -> list[dt.datetime]:
    expr, out, t = parse(cron), [], start
    for _ in range(n):
        t = next_after(expr, tz, t)
        out.append(t)
    return out


def test_fall_back_repeated_hour_fires_twice_in_croniter():
    # New York 2026-11-01: 02:00 EDT -> 01:00 EST, so 01:30 happens at 05:30 and 06:30 UTC.
    start = utc(2026, 10, 31, 12)
    assert theirs("30 1 * * *", NY, start, 3) == [utc(2026, 11, 1, 5, 30), utc(2026, 11, 1, 6, 30),
                                                 utc(2026, 11, 2, 6, 30)]
    assert ours("30 1 * * *", NY, start, 3) == [utc(2026, 11, 1, 5, 30), utc(2026, 11, 2, 6, 30),
                                               utc(2026, 11, 3, 6, 30)]


def test_fall_back_hourly_fires_the_repeated_hour_again_in_croniter():
    # After 01:00 EDT (05:00 UTC): croniter's next is 01:00 EST, a wall time that already fired.
    after = utc(2026, 11, 1, 5)
    assert theirs("0 * * * *", NY, after, 2) == [utc(2026, 11, 1, 6), utc(2026, 11, 1, 7)]
    assert ours("0 * * * *", NY, after, 2) == [utc(2026, 11, 1, 7), utc(2026, 11, 1, 8)]


def test_spring_forward_skipped_times_are_dropped_by_croniter_when_the_hour_is_a_wildcard():
    # New York 2026-03-08: 02:00 EST -> 03:00 EDT (07:00 UTC). `5/15` wants 02:05..02:50, all skipped:
    # ours fires once at the transition, croniter waits for 03:05 EDT.
    after = utc(2026, 3, 8, 6, 50)  # 01:50 EST
    assert theirs("5/15 * * * *", NY, after, 2) == [utc(2026, 3, 8, 7, 5), utc(2026, 3, 8, 7, 20)]
    assert ours("5/15 * * * *", NY, after, 2) == [utc(2026, 3, 8, 7, 0), utc(2026, 3, 8, 7, 5)]
    # With a fixed hour both fire at the transition (03:00 EDT): not a difference, shown for contrast.
    day_before = utc(2026, 3, 7, 12)
    assert theirs("30 2 * * *", NY, day_before, 1) == ours("30 2 * * *", NY, day_before, 1) == [utc(2026, 3, 8, 7)]


@pytest.mark.parametrize("cron", ["0 0 L * *", "0 0 15W * *", "0 0 * * 5#3", "0 0 ? * MON"])
def test_croniter_accepts_modifiers_we_refuse(cron):
    assert croniter.is_valid(cron, strict=True)
    with pytest.raises(CronError, match="not supported"):
        parse(cron)


def test_never_fires_check():
    # Without strict croniter accepts 30 February and only fails when asked for a date.
    assert croniter.is_valid("0 0 30 2 *")
    # With strict it refuses 30 February even when a restricted day-of-week makes it fire
    # (every Monday in February under the OR rule, as croniter itself computes).
    with pytest.raises(CroniterBadCronError, match="can never occur"):
        croniter.expand("0 0 30 2 MON", strict=True)
    assert theirs("0 0 30 2 MON", UTC, utc(2026, 1, 1), 1) == [utc(2026, 2, 2)]
    with pytest.raises(CronError, match="never fires"):
        parse("0 0 30 2 *")
    assert ours("0 0 30 2 MON", UTC, utc(2026, 1, 1), 1) == [utc(2026, 2, 2)]
