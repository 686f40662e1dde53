"""Timestamps as the sharing API receives and reports them.

Recipients send ISO-8601 timestamps with an offset, or the `java.sql.Timestamp` text form;
the reference server reports parse failures with Java's DateTimeParseException text, so
the errors here are worded the same way.
"""

from __future__ import annotations

import datetime as dt
import re

_JAVA_SQL = re.compile(
    r"(\d{4})-(\d{1,2})-(\d{1,2}) (\d{1,2}):(\d{1,2}):(\d{1,2})(?:\.(\d{1,9}))?", re.ASCII
)
_DIGITS4 = re.compile(r"\d{4}", re.ASCII)
_DIGITS2 = re.compile(r"\d{2}", re.ASCII)
_OFFSET = re.compile(r"(\d{2}):(\d{2})(?::(\d{2}))?", re.ASCII)
_FRACTION = re.compile(r"\d{0,9}", re.ASCII)
_MONTHS = (
    *("JANUARY", "FEBRUARY", "MARCH", "APRIL", "MAY", "JUNE"),
    *("JULY", "AUGUST", "SEPTEMBER", "OCTOBER", "NOVEMBER", "DECEMBER"),
)
_EPOCH_ORDINAL = dt.date(1970, 1, 1).toordinal()


class _ParseError(ValueError):
    """Failure of the ISO grammar at a character index (Java's DateTimeParseException)."""

    def __init__(self, text: str, index: int, *, trailing: bool = False):
        if trailing:
            message = f"Text '{text}' could not be parsed, unparsed text found at index {index}"
        else:
            message = f"Text '{text}' could not be parsed at index {index}"
        super().__init__(message)


def parse_timestamp(text: str) -> int:
    """Milliseconds since the epoch of a timestamp given to the sharing API.

    Accepts ISO-8601 with an offset (`2022-11-13T08:10:41Z`, `2022-11-13T08:10:41.5+01:00`,
    seconds optional as in Java's ISO_OFFSET_DATE_TIME) and the `java.sql.Timestamp` form
    `yyyy-mm-dd hh:mm:ss[.f]`, read as UTC. A date without a time is rejected. The
    ValueError's message mimics Java's parse errors, because the reference server shows
    those after "Invalid startingTimestamp: ".
    """
    try:
        return _parse_iso(text)
    except ValueError as iso_error:
        match = _JAVA_SQL.fullmatch(text.strip())
        if match is None:
            raise iso_error from None
        y, mo, d, h, mi, s = (int(g) for g in match.groups()[:6])
        nanos = _fraction_nanos(match.group(7) or "")
        try:
            return _epoch_ms(text, y, mo, d, h, mi, s, nanos, 0)
        except ValueError:
            raise iso_error from None


def _parse_iso(text: str) -> int:
    pos = 0

    def expect(pattern: re.Pattern[str]) -> re.Match[str]:
        nonlocal pos
        m = pattern.match(text, pos)
        if m is None:
            raise _ParseError(text, pos)
        pos = m.end()
        return m

    def literal(chars: str) -> None:
        nonlocal pos
        if pos >= len(text) or text[pos] not in chars:
            raise _ParseError(text, pos)
        pos += 1

    year = int(expect(_DIGITS4).group())
    literal("-")
    month = int(expect(_DIGITS2).group())
    literal("-")
    day = int(expect(_DIGITS2).group())
    literal("Tt")
    hour = int(expect(_DIGITS2).group())
    literal(":")
    minute = int(expect(_DIGITS2).group())
    second, nanos = 0, 0
    if pos < len(text) and text[pos] == ":":
        pos += 1
        second = int(expect(_DIGITS2).group())
        if pos < len(text) and text[pos] == ".":
            pos += 1
            nanos = _fraction_nanos(expect(_FRACTION).group())
    offset_seconds = _parse_offset(text, pos)
    pos = _offset_end(text, pos)
    if pos != len(text):
        raise _ParseError(text, pos, trailing=True)
    return _epoch_ms(text, year, month, day, hour, minute, second, nanos, offset_seconds)


def _parse_offset(text: str, pos: int) -> int:
    """Offset in seconds of `Z` or `+HH:MM[:SS]` starting at `pos`."""
    if pos < len(text) and text[pos] in "Zz":
        return 0
    if pos >= len(text) or text[pos] not in "+-":
        raise _ParseError(text, pos)
    m = _OFFSET.match(text, pos + 1)
    if m is None:
        raise _ParseError(text, pos)
    hours, minutes, seconds = int(m.group(1)), int(m.group(2)), int(m.group(3) or 0)
    if hours > 18:
        raise ValueError(
            f"Text '{text}' could not be parsed: Zone offset hours not in valid range: "
            f"value {hours} is not in the range -18 to 18"
        )
    if minutes > 59 or seconds > 59:
        raise ValueError(f"Text '{text}' could not be parsed: Zone offset not in valid range")
    total = hours * 3600 + minutes * 60 + seconds
    if total > 18 * 3600:
        raise ValueError(
            f"Text '{text}' could not be parsed: Zone offset not in valid range: -18:00 to +18:00"
        )
    return -total if text[pos] == "-" else total


def _offset_end(text: str, pos: int) -> int:
    if text[pos] in "Zz":
        return pos + 1
    m = _OFFSET.match(text, pos + 1)
    assert m is not None  # _parse_offset accepted it
    return m.end()


def _fraction_nanos(digits: str) -> int:
    return int(digits.ljust(9, "0")) if digits else 0


def _epoch_ms(
    text: str, y: int, mo: int, d: int, h: int, mi: int, s: int, nanos: int, offset: int
) -> int:
    """Validate the fields (Java's messages) and turn them into epoch milliseconds."""
    for name, value, low, high in (
        ("MonthOfYear", mo, 1, 12),
        ("DayOfMonth", d, 1, 31),
        ("HourOfDay", h, 0, 23),
        ("MinuteOfHour", mi, 0, 59),
        ("SecondOfMinute", s, 0, 59),
    ):
        if not low <= value <= high:
            bounds = "1 - 28/31" if name == "DayOfMonth" else f"{low} - {high}"
            raise ValueError(
                f"Text '{text}' could not be parsed: Invalid value for {name} "
                f"(valid values {bounds}): {value}"
            )
    try:
        ordinal = dt.date(y, mo, d).toordinal()
    except ValueError:
        if mo == 2 and d == 29:
            reason = f"Invalid date 'February 29' as '{y}' is not a leap year"
        else:
            reason = f"Invalid date '{_MONTHS[mo - 1]} {d}'"
        raise ValueError(f"Text '{text}' could not be parsed: {reason}") from None
    seconds = (ordinal - _EPOCH_ORDINAL) * 86400 + h * 3600 + mi * 60 + s - offset
    return seconds * 1000 + nanos // 1_000_000


def format_instant(ms: int) -> str:
    """`2022-11-13T08:10:41Z` / `…41.123Z` (Java's Instant.toString at ms precision)."""
    try:
        moment = dt.datetime(1970, 1, 1, tzinfo=dt.UTC) + dt.timedelta(milliseconds=ms)
    except OverflowError:
        return f"{ms} ms"
    text = moment.strftime("%Y-%m-%dT%H:%M:%S")
    millis = ms % 1000
    return f"{text}.{millis:03d}Z" if millis else f"{text}Z"
