"""Cron expressions: parsing and validation (pure, no I/O).

Five fields (minute hour day-of-month month day-of-week) or six (second
first). Each field takes `*`, numbers, lists (`1,15`), ranges (`9-17`), steps
(`*/5`, `10-50/10`, `5/15` meaning `5-max/15`), month names (JAN..DEC) and
day names (SUN..SAT; day-of-week 7 is Sunday too), case-insensitive. Macros:
@yearly (@annually), @monthly, @weekly, @daily (@midnight), @hourly.

Day matching follows Vixie cron: when both day-of-month and day-of-week are
restricted (neither field starts with `*`), a day matches if EITHER matches;
otherwise both must (so `0 0 13 * FRI` fires on every 13th and every Friday,
while `0 0 */2 * FRI` fires on odd-numbered Fridays).

Every refusal is a `CronError` whose message names the field, the value and
what is allowed, because it goes back to the customer verbatim.
"""

from __future__ import annotations

import calendar
import dataclasses

MONTH_NAMES = {name.upper(): i for i, name in enumerate(calendar.month_abbr) if name}
DAY_NAMES = {"SUN": 0, "MON": 1, "TUE": 2, "WED": 3, "THU": 4, "FRI": 5, "SAT": 6}
MACROS = {
    "@yearly": "0 0 1 1 *", "@annually": "0 0 1 1 *", "@monthly": "0 0 1 * *",
    "@weekly": "0 0 * * 0", "@daily": "0 0 * * *", "@midnight": "0 0 * * *", "@hourly": "0 * * * *",
}
# The longest any month can be (February counts its leap day).
MAX_DAYS = {1: 31, 2: 29, 3: 31, 4: 30, 5: 31, 6: 30, 7: 31, 8: 31, 9: 30, 10: 31, 11: 30, 12: 31}


class CronError(ValueError):
    """The expression is refused; the message says what is wrong and how to fix it."""


@dataclasses.dataclass(frozen=True)
class FieldSpec:
    name: str
    lo: int
    hi: int
    names: dict[str, int] | None = None


SECOND = FieldSpec("second", 0, 59)
MINUTE = FieldSpec("minute", 0, 59)
HOUR = FieldSpec("hour", 0, 23)
DAY_OF_MONTH = FieldSpec("day-of-month", 1, 31)
MONTH = FieldSpec("month", 1, 12, MONTH_NAMES)
DAY_OF_WEEK = FieldSpec("day-of-week", 0, 7, DAY_NAMES)
FIVE = (MINUTE, HOUR, DAY_OF_MONTH, MONTH, DAY_OF_WEEK)


@dataclasses.dataclass(frozen=True)
class CronExpr:
    """A parsed expression: the allowed values of each field, sorted.

    `dom_star` / `dow_star` record whether the field text started with `*`,
    which is what Vixie cron's OR rule looks at.
    """

    text: str
    seconds: tuple[int, ...]
    minutes: tuple[int, ...]
    hours: tuple[int, ...]
    days: tuple[int, ...]
    months: tuple[int, ...]
    weekdays: tuple[int, ...]  # 0 = Sunday .. 6 = Saturday
    dom_star: bool
    dow_star: bool
    has_seconds: bool

    day_set: frozenset[int] = dataclasses.field(default=frozenset(), repr=False, compare=False)
    weekday_set: frozenset[int] = dataclasses.field(default=frozenset(), repr=False, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "day_set", frozenset(self.days))
        object.__setattr__(self, "weekday_set", frozenset(self.weekdays))

    def day_matches(self, year: int, month: int, day: int) -> bool:
        """Whether the date matches the day fields (Vixie OR rule)."""
        dom = day in self.day_set
        # calendar.weekday: Monday = 0; cron: Sunday = 0.
        dow = (calendar.weekday(year, month, day) + 1) % 7 in self.weekday_set
        if self.dom_star or self.dow_star:
            return dom and dow
        return dom or dow


def parse(text: str) -> CronExpr:
    """Parse and check an expression; CronError says what is wrong."""
    if not isinstance(text, str) or not text.strip():
        raise CronError("cron expression is empty: write 5 fields (minute hour day-of-month month "
                        "day-of-week), e.g. '*/5 * * * *', or 6 with seconds first")
    source = text.strip()
    if source.startswith("@"):
        expanded = MACROS.get(source.lower())
        if expanded is None:
            raise CronError(f"unknown cron macro {source!r}; use one of {', '.join(sorted(MACROS))}")
        fields = expanded.split()
    else:
        fields = source.split()
    if len(fields) not in (5, 6):
        raise CronError(f"cron expression {source!r} has {len(fields)} field(s); expected 5 (minute hour "
                        f"day-of-month month day-of-week) or 6 (second minute hour day-of-month month day-of-week)")
    has_seconds = len(fields) == 6
    specs = (SECOND, *FIVE) if has_seconds else FIVE
    values = [_parse_field(f, spec) for f, spec in zip(fields, specs, strict=True)]
    if not has_seconds:
        values.insert(0, (0,))
    seconds, minutes, hours, days, months, weekdays = values
    dom_text, dow_text = fields[-3], fields[-1]
    expr = CronExpr(text=source, seconds=seconds, minutes=minutes, hours=hours, days=days, months=months,
                    weekdays=tuple(sorted({d % 7 for d in weekdays})), dom_star=dom_text.startswith("*"),
                    dow_star=dow_text.startswith("*"), has_seconds=has_seconds)
    _check_fires(expr)
    return expr


def _parse_field(text: str, spec: FieldSpec) -> tuple[int, ...]:
    out: set[int] = set()
    for item in text.split(","):
        if not item:
            raise CronError(f"the {spec.name} field {text!r} has an empty list item; separate values "
                            f"with single commas, e.g. '1,15'")
        out.update(_parse_item(item, spec, text))
    return tuple(sorted(out))


def _parse_item(item: str, spec: FieldSpec, field_text: str) -> range:
    base, slash, step_text = item.partition("/")
    step = 1
    if slash:
        if not step_text.isdigit():
            raise CronError(f"the step {step_text!r} in the {spec.name} field {field_text!r} must be a "
                            f"positive whole number, e.g. '*/5'")
        step = int(step_text)
        span = spec.hi - spec.lo + 1
        if not 1 <= step <= span:
            raise CronError(f"the step {step} in the {spec.name} field {field_text!r} is out of range "
                            f"(allowed 1-{span})")
    if base == "*":
        hi = 6 if spec is DAY_OF_WEEK else spec.hi
        return range(spec.lo, hi + 1, step)
    if base == "?":
        raise CronError(f"'?' in the {spec.name} field is not supported; use '*'")
    lo_text, dash, hi_text = base.partition("-")
    lo = _value(lo_text, spec, field_text)
    if dash:
        hi = _value(hi_text, spec, field_text)
        if hi < lo:
            raise CronError(f"the range {base!r} in the {spec.name} field runs backwards; write the smaller "
                            f"value first (allowed {spec.lo}-{spec.hi})")
    else:
        # `5/15` is `5-max/15` (cronie, Quartz); a bare value is itself.
        hi = spec.hi if slash else lo
    return range(lo, hi + 1, step)


def _value(text: str, spec: FieldSpec, field_text: str) -> int:
    if not text:
        raise CronError(f"the {spec.name} field {field_text!r} has a range with a missing end; "
                        f"write it as 'a-b', e.g. '9-17'")
    if text.isdigit():
        n = int(text)
        if not spec.lo <= n <= spec.hi:
            raise CronError(f"{n} is out of range for the {spec.name} field (allowed {spec.lo}-{spec.hi}"
                            f"{_names_hint(spec)})")
        return n
    if spec.names is not None and text.upper() in spec.names:
        return spec.names[text.upper()]
    if any(c in text for c in "LW#"):
        raise CronError(f"{text!r} in the {spec.name} field is not supported (no L, W or # "
                        f"modifiers); use numbers, names, '*', lists, ranges and steps")
    raise CronError(f"{text!r} is not a valid {spec.name} (allowed {spec.lo}-{spec.hi}{_names_hint(spec)})")


def _names_hint(spec: FieldSpec) -> str:
    if spec is MONTH:
        return " or JAN-DEC"
    if spec is DAY_OF_WEEK:
        return " or SUN-SAT, 0 and 7 both Sunday"
    return ""


def _check_fires(expr: CronExpr) -> None:
    """Refuse a day-of-month that no chosen month has (e.g. `0 0 30 2 *`).

    Any valid date falls on every weekday in some year, so only the
    day-of-month/month pairing can make an expression never fire; and under
    the OR rule a restricted day-of-week fires regardless.
    """
    if not (expr.dom_star or expr.dow_star):
        return
    if any(d <= MAX_DAYS[m] for m in expr.months for d in expr.days):
        return
    months = ", ".join(calendar.month_abbr[m].upper() for m in expr.months)
    days = ", ".join(str(d) for d in expr.days)
    raise CronError(f"cron expression {expr.text!r} never fires: no month in ({months}) has a "
                    f"day-of-month in ({days})")
