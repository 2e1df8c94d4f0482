"""Human durations ("250ms", "10s", "5m", "1h", "1d", "1h30m") to seconds."""

from __future__ import annotations

import re

_UNITS = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0}
_PART = re.compile(r"(\d+(?:\.\d+)?)(ms|s|m|h|d)")


def parse_duration(value: str | int | float) -> float:
    """Seconds in a duration. Numbers are seconds. Raises ValueError naming the input."""
    if isinstance(value, bool):
        raise ValueError(f"invalid duration {value!r}")
    if isinstance(value, (int, float)):
        if value < 0:
            raise ValueError(f"duration must not be negative: {value!r}")
        return float(value)
    text = str(value).strip().lower()
    pos, total = 0, 0.0
    if not text:
        raise ValueError("empty duration; use forms like '30s', '10m', '1h30m'")
    while pos < len(text):
        m = _PART.match(text, pos)
        if not m:
            raise ValueError(f"invalid duration {value!r}; use forms like '250ms', '30s', '10m', '1h30m'")
        total += float(m.group(1)) * _UNITS[m.group(2)]
        pos = m.end()
    return total

