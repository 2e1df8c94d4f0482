"""When a cron expression fires, as instants, in an IANA time zone (pure).

The expression is read in local wall-clock time. Daylight-saving policy:

* a repeated local hour (clocks go back) fires once, at its FIRST occurrence;
  the second pass through the same wall times fires nothing;
* a skipped local time (clocks go forward) fires at the first valid instant
  after the gap, i.e. at the transition itself (02:30 on a spring-forward
  night in New York fires at 03:00 EDT). Several skipped times collapse into
  that one instant, and an instant never fires twice.

Mapping every matching wall time to one instant this way is monotonic in
wall time, so the first matching wall time whose instant lies after `t` is
the next occurrence after `t`.
"""

from __future__ import annotations

import bisect
import calendar
import datetime as dt
import zoneinfo
from itertools import pairwise

from ratchet.services.cron.cronexpr import CronError, CronExpr, parse

UTC = dt.UTC
ONE_SECOND = dt.timedelta(seconds=1)
# Feb 29 under the AND rule fires only in leap years, and 2100 is not one:
# eight years separate 2096 and 2104, so search a little further than that.
HORIZON_YEARS = 9
FLOOR_SAMPLE = 256


def zone(name: str) -> dt.tzinfo:
    """The IANA zone `name` ("" means UTC); CronError if unknown."""
    if not name or name in ("UTC", "Etc/UTC"):
        return UTC
    try:
        return zoneinfo.ZoneInfo(name)
    except (zoneinfo.ZoneInfoNotFoundError, ValueError, IsADirectoryError):
        raise CronError(f"unknown time zone {name!r}; use an IANA name such as 'Europe/Berlin', "
                        f"'America/New_York' or 'UTC'") from None


def _next_in(values: tuple[int, ...], current: int) -> int | None:
    i = bisect.bisect_left(values, current)
    return values[i] if i < len(values) else None


def next_wall(expr: CronExpr, start: dt.datetime, horizon_year: int) -> dt.datetime | None:
    """The first naive wall time >= start (whole seconds) matching expr, or None past horizon_year."""
    y, mo, d, h, mi, s = start.year, start.month, start.day, start.hour, start.minute, start.second
    while y <= horizon_year:
        m = _next_in(expr.months, mo)
        if m is None:
            y, mo, d, h, mi, s = y + 1, 1, 1, 0, 0, 0
            continue
        if m != mo:
            mo, d, h, mi, s = m, 1, 0, 0, 0
        if d > calendar.monthrange(y, mo)[1]:
            y, mo = (y + 1, 1) if mo == 12 else (y, mo + 1)
            d, h, mi, s = 1, 0, 0, 0
            continue
        time_of_day = _time_in_day(expr, h, mi, s) if expr.day_matches(y, mo, d) else None
        if time_of_day is None:
            d, h, mi, s = d + 1, 0, 0, 0
            continue
        return dt.datetime(y, mo, d, *time_of_day)
    return None


def _time_in_day(expr: CronExpr, h: int, mi: int, s: int) -> tuple[int, int, int] | None:
    """The first (hour, minute, second) >= h:mi:s matching expr, or None: none left that day."""
    while h < 24:
        nh = _next_in(expr.hours, h)
        if nh is None:
            return None
        if nh != h:
            h, mi, s = nh, 0, 0
        nm = _next_in(expr.minutes, mi)
        if nm is None:
            h, mi, s = h + 1, 0, 0
            continue
        if nm != mi:
            mi, s = nm, 0
        ns = _next_in(expr.seconds, s)
        if ns is None:
            mi, s = mi + 1, 0
            if mi == 60:
                h, mi = h + 1, 0
            continue
        return h, mi, ns
    return None


def _wall(instant: dt.datetime, tz: dt.tzinfo) -> dt.datetime:
    return instant.astimezone(tz).replace(tzinfo=None)


def resolve(wall: dt.datetime, tz: dt.tzinfo) -> dt.datetime:
    """The one instant (UTC) a local wall time fires at, under the DST policy."""
    if tz is UTC:
        return wall.replace(tzinfo=UTC)
    first = wall.replace(tzinfo=tz, fold=0).astimezone(UTC)
    second = wall.replace(tzinfo=tz, fold=1).astimezone(UTC)
    if first == second:
        return first
    exists = _wall(first, tz) == wall
    if exists:
        # Repeated wall time: both folds are real; the earlier one fires.
        return min(first, second)
    # Skipped wall time: the first instant whose wall clock reads >= wall is
    # the transition (clocks jump over the gap). tzdata transitions fall on
    # whole seconds, so bisect over whole seconds between the two guesses.
    lo, hi = int(min(first, second).timestamp()), int(max(first, second).timestamp())
    while lo < hi:
        mid = (lo + hi) // 2
        if _wall(dt.datetime.fromtimestamp(mid, UTC), tz) >= wall:
            hi = mid
        else:
            lo = mid + 1
    return dt.datetime.fromtimestamp(lo, UTC)


def next_after(expr: CronExpr, tz: dt.tzinfo, after: dt.datetime) -> dt.datetime | None:
    """The first occurrence strictly after the instant `after` (aware), in UTC; None if none within ~9 years."""
    after = after.astimezone(UTC)
    wall = _wall(after, tz).replace(microsecond=0)
    horizon = wall.year + HORIZON_YEARS
    while True:
        candidate = next_wall(expr, wall, horizon)
        if candidate is None:
            return None
        instant = resolve(candidate, tz)
        if instant > after:
            return instant
        # Only inside a repeated hour's second pass (or the current second)
        # do matching wall times map to instants already past.
        wall = candidate + ONE_SECOND


def latest_due(expr: CronExpr, tz: dt.tzinfo, first_due: dt.datetime, now: dt.datetime) -> dt.datetime:
    """The latest occurrence <= now, given that first_due (<= now) is one.

    Looks back from now in doubling steps rather than walking forward from
    first_due, so a long outage of a per-second schedule costs a few dozen
    steps, not one per missed tick.
    """
    span = ONE_SECOND
    while True:
        low = now - span
        if low < first_due:
            slot = first_due
            break
        found = next_after(expr, tz, low)
        if found is not None and found <= now:
            slot = found
            break
        span *= 2
    while True:
        following = next_after(expr, tz, slot)
        if following is None or following > now:
            return slot
        slot = following


def smallest_gap(expr: CronExpr, tz: dt.tzinfo, start: dt.datetime, sample: int = FLOOR_SAMPLE) -> float | None:
    """The smallest gap in seconds between consecutive firings.

    Exact for the time-of-day pattern (every combination of hour, minute and
    second), plus the gaps measured over the next `sample` occurrences from
    `start` (which catch day, month and DST boundaries). None if it fires at
    most once in the sample.
    """
    gaps: list[float] = []
    times = sorted(h * 3600 + m * 60 + s for h in expr.hours for m in expr.minutes for s in expr.seconds)
    gaps.extend(b - a for a, b in pairwise(times))
    previous = next_after(expr, tz, start)
    for _ in range(sample):
        if previous is None:
            break
        following = next_after(expr, tz, previous)
        if following is None:
            break
        gaps.append((following - previous).total_seconds())
        previous = following
    return min(gaps) if gaps else None


def validate(cron: str, timezone: str, now: dt.datetime, min_interval_s: float) -> tuple[CronExpr, dt.tzinfo]:
    """Parse and check a schedule's expression and zone; CronError says what is wrong.

    Refuses malformed expressions, out-of-range fields, unknown zones,
    expressions that never fire, and firings closer than min_interval_s.
    """
    expr = parse(cron)
    tz = zone(timezone)
    first = next_after(expr, tz, now)
    if first is None:
        raise CronError(f"cron expression {expr.text!r} never fires in time zone {timezone or 'UTC'}")
    gap = smallest_gap(expr, tz, now)
    if gap is not None and gap < min_interval_s:
        raise CronError(f"cron expression {expr.text!r} fires {gap:g}s apart at its closest; the smallest "
                        f"interval allowed is {min_interval_s:g}s")
    return expr, tz
