"""Time named in a question: "yesterday", "last month", "in May", "on 7 May 2023", "three weeks ago",
"last Saturday", "in 2023", "last time" … as a window of epoch milliseconds, relative to a reference time
(now, or the session's own ``metadata.reference_time_ms`` when it replays a past conversation).

The hybrid ranker (``learnings.retrieval``) gives the learnings *stated* in that window (``stated_at_ms``,
their publication time when none was given) a bonus, so a question that names a time prefers what was said
then. Pure functions, no database; deterministic; English only; UTC days."""

from __future__ import annotations

import re
from datetime import UTC, datetime, timedelta
from typing import NamedTuple

DAY_MS = 86_400_000
MONTHS = {
    name: index
    for index, names in enumerate(
        (
            ("january", "jan"),
            ("february", "feb"),
            ("march", "mar"),
            ("april", "apr"),
            ("may",),
            ("june", "jun"),
            ("july", "jul"),
            ("august", "aug"),
            ("september", "sep", "sept"),
            ("october", "oct"),
            ("november", "nov"),
            ("december", "dec"),
        ),
        start=1,
    )
    for name in names
}
WEEKDAYS = {
    name: index
    for index, names in enumerate(
        (
            ("monday", "mon"),
            ("tuesday", "tue", "tues"),
            ("wednesday", "wed"),
            ("thursday", "thu", "thurs"),
            ("friday", "fri"),
            ("saturday", "sat"),
            ("sunday", "sun"),
        )
    )
    for name in names
}
NUMBERS = {
    "a": 1,
    "an": 1,
    "one": 1,
    "two": 2,
    "three": 3,
    "four": 4,
    "five": 5,
    "six": 6,
    "seven": 7,
    "eight": 8,
    "nine": 9,
    "ten": 10,
    "eleven": 11,
    "twelve": 12,
    "couple of": 2,
    "few": 3,
}
SLACK_DAYS = 1
"""A window is widened by a day on each side: "yesterday" said late at night, time zones."""

_MONTH = "|".join(sorted(MONTHS, key=len, reverse=True))
_WEEKDAY = "|".join(sorted(WEEKDAYS, key=len, reverse=True))
_NUMBER = r"\d+|" + "|".join(sorted(NUMBERS, key=len, reverse=True))
_F = re.IGNORECASE

_DATE_DMY = re.compile(rf"\b(\d{{1,2}})(?:st|nd|rd|th)?\s+(?:of\s+)?({_MONTH})\.?,?(?:\s+(\d{{4}}))?\b", _F)
_DATE_MDY = re.compile(rf"\b({_MONTH})\.?\s+(\d{{1,2}})(?:st|nd|rd|th)?(?:,?\s+(\d{{4}}))?\b", _F)
_ISO = re.compile(r"\b(\d{4})[-/](\d{1,2})[-/](\d{1,2})\b")
_MONTH_YEAR = re.compile(rf"\b(?:in|during|since|of|last|this|early|late|mid)[\s-]+({_MONTH})\b(?:\s+(\d{{4}}))?", _F)
_YEAR = re.compile(r"\b(?:in|during|of)\s+((?:19|20)\d{2})\b", _F)
_AGO = re.compile(rf"\b({_NUMBER})\s+(day|week|month|year)s?\s+ago\b", _F)
_RELATIVE = re.compile(
    r"\b(yesterday|today|tonight|this morning|last night|the day before yesterday|"
    r"(?:last|this|past|previous) (?:week|weekend|month|year)|earlier this (?:week|month|year))\b",
    _F,
)
_LAST_WEEKDAY = re.compile(rf"\b(?:last|this past|on|this)\s+({_WEEKDAY})\b", _F)
_LAST_TIME = re.compile(
    r"\b(?:last time|last session|previous session|previous conversation|"
    r"last conversation|earlier session|last chat|we last (?:talked|spoke|chatted))\b",
    _F,
)


class Window(NamedTuple):
    start_ms: int
    end_ms: int
    label: str


def _ms(moment: datetime) -> int:
    return int(moment.timestamp() * 1000)


def _day_start(moment: datetime) -> datetime:
    return moment.replace(hour=0, minute=0, second=0, microsecond=0)


def _window(start: datetime, end: datetime, label: str) -> Window:
    slack = timedelta(days=SLACK_DAYS)
    return Window(_ms(start - slack), _ms(end + slack), label)


def _month_window(year: int, month: int, label: str) -> Window:
    start = datetime(year, month, 1, tzinfo=UTC)
    end = datetime(year + (month == 12), month % 12 + 1, 1, tzinfo=UTC)
    return _window(start, end, label)


def _count(text: str) -> int:
    text = text.lower()
    return int(text) if text.isdigit() else NUMBERS.get(text, 1)


def _past_year(month: int, day: int, now: datetime) -> int:
    """The year of the latest such date not after ``now`` (a question names the past)."""
    try:
        return now.year if datetime(now.year, month, day, tzinfo=UTC) <= now + timedelta(days=1) else now.year - 1
    except ValueError:
        return now.year


def window(query: str | None, reference_ms: int) -> Window | None:
    """The time the question names, or ``None``. The first, most specific expression wins: a full date, a
    relative day or period, "N units ago", a weekday, a month, a year, then "last time"."""
    if not query:
        return None
    now = datetime.fromtimestamp(reference_ms / 1000, tz=UTC)
    today = _day_start(now)
    for pattern in (_ISO, _DATE_DMY, _DATE_MDY):
        found = pattern.search(query)
        if found is None:
            continue
        try:
            if pattern is _ISO:
                year, month, day = (int(part) for part in found.groups())
            elif pattern is _DATE_DMY:
                day, month, given = int(found.group(1)), MONTHS[found.group(2).lower()], found.group(3)
                year = int(given) if given else _past_year(month, day, now)
            else:
                month, day, given = MONTHS[found.group(1).lower()], int(found.group(2)), found.group(3)
                year = int(given) if given else _past_year(month, day, now)
            start = datetime(year, month, day, tzinfo=UTC)
        except ValueError:
            continue
        return _window(start, start + timedelta(days=1), found.group(0))
    found = _RELATIVE.search(query)
    if found is not None:
        phrase = found.group(1).lower()
        if phrase in ("yesterday", "last night"):
            return _window(today - timedelta(days=1), today, phrase)
        if phrase == "the day before yesterday":
            return _window(today - timedelta(days=2), today - timedelta(days=1), phrase)
        if phrase in ("today", "tonight", "this morning"):
            return _window(today, today + timedelta(days=1), phrase)
        unit = phrase.rsplit(" ", 1)[1]
        current = phrase.startswith(("this", "earlier this"))
        if unit == "weekend":
            saturday = today - timedelta(days=(today.weekday() - 5) % 7 or 7)
            return _window(saturday, saturday + timedelta(days=2), phrase)
        if unit == "week":
            monday = today - timedelta(days=today.weekday())
            start = monday if current else monday - timedelta(days=7)
            return _window(start, now if current else monday, phrase)
        if unit == "month":
            if current:
                return _window(today.replace(day=1), now, phrase)
            previous = today.replace(day=1) - timedelta(days=1)
            return _month_window(previous.year, previous.month, phrase)
        if current:
            return _window(today.replace(month=1, day=1), now, phrase)
        return _window(datetime(now.year - 1, 1, 1, tzinfo=UTC), datetime(now.year, 1, 1, tzinfo=UTC), phrase)
    found = _AGO.search(query)
    if found is not None:
        count, unit = _count(found.group(1)), found.group(2).lower()
        days = {"day": 1, "week": 7, "month": 30, "year": 365}[unit] * count
        centre = today - timedelta(days=days)
        spread = timedelta(days={"day": 0, "week": 3, "month": 10, "year": 60}[unit])
        return _window(centre - spread, centre + timedelta(days=1) + spread, found.group(0))
    found = _LAST_WEEKDAY.search(query)
    if found is not None:
        target = WEEKDAYS[found.group(1).lower()]
        back = (today.weekday() - target) % 7 or 7
        weekday = today - timedelta(days=back)
        return _window(weekday, weekday + timedelta(days=1), found.group(0))
    found = _MONTH_YEAR.search(query)
    if found is not None:
        month = MONTHS[found.group(1).lower()]
        year = int(found.group(2)) if found.group(2) else _past_year(month, 1, now)
        return _month_window(year, month, found.group(0))
    found = _YEAR.search(query)
    if found is not None:
        year = int(found.group(1))
        return _window(datetime(year, 1, 1, tzinfo=UTC), datetime(year + 1, 1, 1, tzinfo=UTC), found.group(0))
    found = _LAST_TIME.search(query)
    if found is not None:
        return Window(-1, -1, found.group(0))  # "the latest statements": resolved against the stated times
    return None


def in_window(stated: list[int], found: Window, texts: list[str] | None = None) -> list[bool]:
    """Which stated times fall in the window; for "last time", those of the latest day anything was stated
    on before the reference (one conversation, typically). With ``texts`` (the statements), a statement that
    names its own time ("I ran the half marathon last Sunday") is in the window when the time it names,
    resolved against when it was stated, is (:func:`mentioned_in`)."""
    if found.start_ms == -1:
        if not stated:
            return []
        latest = max(stated)
        return [time >= latest - DAY_MS for time in stated]
    inside = [found.start_ms <= time < found.end_ms for time in stated]
    if texts is not None:
        inside = [hit or mentioned_in(text, time, found) for hit, text, time in zip(inside, texts, stated, strict=True)]
    return inside


def mentioned_in(text: str, stated_ms: int, found: Window) -> bool:
    """Whether the time ``text`` names ("last Sunday", "yesterday", "on 3 March", "two weeks ago"), resolved
    against ``stated_ms``, lies in the window ``found``: its middle inside, and no wider than the window (a
    statement naming "2023" is not about "May 2023")."""
    if not text or stated_ms <= 0 or not _ANY_TIME.search(text):
        return False
    named = window(text, stated_ms)
    if named is None or named.start_ms == -1:
        return False
    middle = (named.start_ms + named.end_ms) // 2
    return found.start_ms <= middle < found.end_ms and named.end_ms - named.start_ms <= found.end_ms - found.start_ms


_ANY_TIME = re.compile(
    rf"\b(?:{_MONTH}|{_WEEKDAY}|yesterday|today|tonight|ago|last|this|past|previous|earlier|\d{{4}})\b", _F
)
"""A cheap pre-check: a text without any of these words names no time."""
