"""Why durations stay ours (libs/durations.parse_duration) rather than pytimeparse: the
SDK's durations (timeouts, retry bases and caps, retry_after, search bounds) must refuse a
negative or non-duration value with a message naming it, and accept milliseconds.

pytimeparse 1.1.10 has no milliseconds; pytimeparse2 1.7.1 reads every form we accept the
same, but takes negatives and booleans and answers None to what it cannot read. Each test
asserts the library's measured answer AND ours. If one fails on the library's side, a newer
release changed that behaviour: re-decide (docs/architecture.md, "Not pytimeparse") before
updating the expected value.
"""

from __future__ import annotations

import pytest
import pytimeparse
import pytimeparse2

from ratchet.libs.durations import parse_duration

OURS = {"250ms": 0.25, "10s": 10, "5m": 300, "1h": 3600, "1d": 86400, "1h30m": 5400, "1.5h": 5400,
        "0.5s": 0.5, "30S": 30, " 30s ": 30, "1d2h3m4s5ms": 93784.005, 30: 30, 2.5: 2.5}


def test_pytimeparse2_reads_every_form_we_accept_alike():
    for value, seconds in OURS.items():
        assert parse_duration(value) == pytest.approx(seconds)
        assert pytimeparse2.parse(value) == pytest.approx(seconds), value


def test_pytimeparse_has_no_milliseconds():
    assert pytimeparse.parse("250ms") is None  # RetryPolicy(base="250ms") is in our docs and tests
    assert parse_duration("250ms") == 0.25


@pytest.mark.parametrize("value, theirs, ours", [
    ("-5s", -5, "invalid duration '-5s'"),               # RetryableError(retry_after="-5s")
    (-1, -1, "must not be negative"),
    (True, 1, "invalid duration True"),                   # timeout=True is a bug, not one second
    ("ten minutes", None, "invalid duration 'ten minutes'; use forms like"),
    ("", None, "empty duration"),
])
def test_pytimeparse2_takes_or_drops_what_we_refuse_by_name(value, theirs, ours):
    assert pytimeparse2.parse(value) == theirs
    with pytest.raises(ValueError, match=ours):
        parse_duration(value)
