"""RFC 3339 timestamps on top of ``datetime`` (the server's ``created_at``, the fake's clock
text, the ``date-time`` and ``time`` formats of tool schemas)."""

from __future__ import annotations

import datetime

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from coder_proto._timestamps import format_rfc3339, is_rfc3339_time, parse_rfc3339

UTC = datetime.UTC


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("1970-01-01T00:00:00Z", datetime.datetime(1970, 1, 1, tzinfo=UTC)),
        ("2026-01-01t00:00:00.5z", datetime.datetime(2026, 1, 1, 0, 0, 0, 500_000, tzinfo=UTC)),
        (
            "2026-01-01T02:00:00+02:00",
            datetime.datetime(2026, 1, 1, tzinfo=UTC),
        ),
        (
            "2025-12-31T22:00:00-02:00",
            datetime.datetime(2026, 1, 1, tzinfo=UTC),
        ),
        # Go writes nanoseconds; digits past the microsecond are cut.
        (
            "2026-03-04T05:06:07.123456789Z",
            datetime.datetime(2026, 3, 4, 5, 6, 7, 123_456, tzinfo=UTC),
        ),
        # A leap second is the first instant of the next minute.
        ("2016-12-31T23:59:60Z", datetime.datetime(2017, 1, 1, tzinfo=UTC)),
        ("2024-02-29T12:00:00Z", datetime.datetime(2024, 2, 29, 12, tzinfo=UTC)),
    ],
)
def test_parse_rfc3339(text: str, expected: datetime.datetime) -> None:
    assert parse_rfc3339(text) == expected


@pytest.mark.parametrize(
    "text",
    [
        "",
        "yesterday",
        "2026-01-01",  # a date alone (datetime.fromisoformat would accept it)
        "2026-01-01T00:00:00",  # no offset
        "20260101T000000Z",  # ISO 8601 basic format
        "2026-01-01 00:00:00Z",  # a space is not the RFC 3339 grammar
        "2026-13-01T00:00:00Z",
        "2023-02-29T00:00:00Z",
        "2026-01-01T24:00:00Z",
        "2026-01-01T00:60:00Z",
        "2026-01-01T00:00:61Z",
        "2026-01-01T00:00:00+24:00",
        "2026-01-01T00:00:00.Z",
        "2026-01-01T00:00:00Z\n",
        "２０２６-01-01T00:00:00Z",  # digits other than ASCII
        None,
        20260101,
    ],
)
def test_parse_rfc3339_rejects(text: object) -> None:
    assert parse_rfc3339(text) is None


def test_rfc3339_time() -> None:
    assert is_rfc3339_time("12:30:00Z") and is_rfc3339_time("23:59:60.5+01:00")
    for bad in ("12:30:00", "24:00:00Z", "12:60:00Z", "12:30:00+01:60", "1:30:00Z", 1230):
        assert not is_rfc3339_time(bad)


def test_format_rfc3339_examples() -> None:
    assert format_rfc3339(0) == "1970-01-01T00:00:00Z"
    assert format_rfc3339(1_767_225_600.5) == "2026-01-01T00:00:00.5Z"
    assert format_rfc3339(951_782_400) == "2000-02-29T00:00:00Z"
    assert format_rfc3339(-62_135_596_800) == "0001-01-01T00:00:00Z"
    assert format_rfc3339(1.000_001) == "1970-01-01T00:00:01.000001Z"


@settings(max_examples=300, deadline=None)
@given(st.floats(min_value=-62_000_000_000, max_value=250_000_000_000, allow_nan=False))
def test_format_then_parse_is_the_same_microsecond(seconds: float) -> None:
    text = format_rfc3339(seconds)
    parsed = parse_rfc3339(text)
    assert parsed is not None
    micros = round(seconds * 1_000_000)
    epoch = datetime.datetime(1970, 1, 1, tzinfo=UTC)
    assert parsed == epoch + datetime.timedelta(microseconds=micros)
    assert not text.endswith("0Z") or "." not in text, "trailing zeros are trimmed"


@settings(max_examples=300, deadline=None)
@given(
    st.datetimes(
        min_value=datetime.datetime(1, 1, 2),
        max_value=datetime.datetime(9999, 12, 30),
        timezones=st.sampled_from(
            [UTC, datetime.timezone(datetime.timedelta(hours=5, minutes=30))]
            + [datetime.timezone(datetime.timedelta(hours=-h)) for h in (1, 8, 23)]
        ),
    )
)
def test_parse_agrees_with_isoformat(moment: datetime.datetime) -> None:
    assert parse_rfc3339(moment.isoformat()) == moment


def test_parse_timestamp_gives_epoch_seconds() -> None:
    from coder_proto.durable._archiving import parse_timestamp

    assert parse_timestamp("2026-01-01T00:00:00.5Z") == 1_767_225_600.5
    assert parse_timestamp("2026-01-01 02:00:00+02:00") == 1_767_225_600.0
    assert parse_timestamp("2026-02-31T00:00:00Z") is None
