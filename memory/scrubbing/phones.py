"""International phone numbers found by ``phonenumbers`` (``Leniency.VALID``) over ``KHEISH_PHONE_REGIONS``.

Candidates are 7+ digits on token boundaries that are not a date, an IPv4 address, coordinates or a version.
"""

from __future__ import annotations

import functools
import re
from dataclasses import dataclass

import phonenumbers
from phonenumbers import Leniency, PhoneMetadata, PhoneNumberMatcher

from memory.scrubbing.scan import _small_cache

_NON_DIGITS = re.compile(r"\D+")

# International phones (phonenumbers). Candidates: 7+ digits on token boundaries, not a date, not an IPv4.
_PHONE_CANDIDATE = re.compile(
    r"(?<![\w@#$€£¥%])(?<![\w][\-./])"
    r"(?!(?:19|20)\d\d[\-/.]\d{1,2}[\-/.]\d{1,2}(?!\d))"
    r"(?!\d{1,3}(?:\.\d{1,3}){3}(?![\d.]))"
    # Not possessive: a number glued to a word on the right gives back its last groups (linear all the same - a
    # start is tried only where no number ends, and a match that fails has no later start left in its run).
    r"(?:\+|\(\+?)?\d(?:[ \t\u00a0().\-/]{0,3}\d){6,}"
    r"(?!\w)(?![\-./]\w)"  # and not glued to a word on the right (04125588-4944-ec87-… is a UUID)
)
_CANDIDATE_SEPARATOR = re.compile(r"[ \t\u00a0().\-/]")
_ZIP_PLUS_4 = re.compile(r"\d{5}-\d{4}")
_IPV4 = re.compile(r"(?<![\d.])\d{1,3}(?:\.\d{1,3}){3}(?![\d.])")
_DATE_PREFIX = re.compile(r"\(?(?:(?:19|20)\d\d[\-/.]\d{1,2}[\-/.]\d{1,2}|\d{1,2}[\-/.]\d{1,2}[\-/.](?:19|20)\d\d)")
_COORDINATES = re.compile(r"-?\d{1,3}\.\d+[\s,]+-?\d{1,3}\.\d+")


@dataclass(frozen=True)
class _RegionInfo:
    national_prefix: re.Pattern[str] | None
    general: re.Pattern[str] | None
    lengths: frozenset[int]


@functools.lru_cache(maxsize=32)
def _phone_regions(raw: str) -> tuple[tuple[str, _RegionInfo], ...]:
    regions: list[tuple[str, _RegionInfo]] = []
    for code in re.split(r"[\s,;]+", raw.upper()):
        if not code or code not in phonenumbers.SUPPORTED_REGIONS or code in dict(regions):
            continue
        metadata = PhoneMetadata.metadata_for_region(code)
        general = metadata.general_desc  # type: ignore[union-attr]  # a supported region has metadata
        prefix = metadata.national_prefix_for_parsing or metadata.national_prefix  # type: ignore[union-attr]  # as above
        pattern = general.national_number_pattern if general is not None else None
        lengths = frozenset(general.possible_length or ()) if general is not None else frozenset()
        regions.append((code, _RegionInfo(re.compile(prefix) if prefix else None, _compile(pattern), lengths)))
    return tuple(regions)


def _compile(pattern: str | None) -> re.Pattern[str] | None:
    return re.compile(pattern) if pattern else None


def _plausible_in(info: _RegionInfo, digits: str) -> bool:
    """Cheap check against the region's number lengths and pattern before running the matcher."""
    candidates = [digits]
    if info.national_prefix is not None:
        stripped = info.national_prefix.match(digits)
        if stripped is not None and stripped.end():
            candidates.append(digits[stripped.end() :])
    for number in candidates:
        if info.lengths and len(number) not in info.lengths:
            continue
        if info.general is None or info.general.fullmatch(number):
            return True
    return False


def _acceptable_phone(raw: str) -> bool:
    """Shapes libphonenumber can accept that are not phone numbers here."""
    if _IPV4.search(raw) or _DATE_PREFIX.match(raw) or _COORDINATES.fullmatch(raw):
        return False
    if raw.count(".") >= 2 and sum(len(group.strip()) == 1 for group in raw.split(".")) >= 2:
        return False  # a version number such as 1.2.3.4567890
    return bool(raw.startswith(("+", "0", "(")) or _CANDIDATE_SEPARATOR.search(raw))


@_small_cache(16384, max_chars=256)
def _phone_spans(snippet: str, digits: str, international: bool, regions_raw: str) -> tuple[tuple[int, int], ...]:
    """Spans of valid phone numbers in ``snippet`` (a candidate with a little context), cached."""
    regions = _phone_regions(regions_raw)
    if not regions:
        return ()
    if international:
        tried = [regions[0][0]]  # the country code decides; the default region does not matter
    elif digits.startswith("00") or len(digits) > 13:
        tried = [code for code, _ in regions]
    else:
        tried = [code for code, info in regions if _plausible_in(info, digits)]
    many = len(digits) > 13  # possibly several numbers in one candidate: collect from every region
    spans: list[tuple[int, int]] = []
    for code in tried:
        for match in PhoneNumberMatcher(snippet, code, leniency=Leniency.VALID):
            raw = match.raw_string
            if not _acceptable_phone(raw.strip()):
                continue
            start = match.start + (len(raw) - len(raw.lstrip()))
            end = match.end - (len(raw) - len(raw.rstrip()))
            if all(end <= other_start or start >= other_end for other_start, other_end in spans):
                spans.append((start, end))
        if spans and not many:
            break
    return tuple(sorted(spans))


def _international_phones(text: str, left: int, right: int, regions: str) -> list[tuple[int, int]]:
    if not _phone_regions(regions):
        return []
    found: list[tuple[int, int]] = []
    n = len(text)
    for m in _PHONE_CANDIDATE.finditer(text, left, right):
        candidate = m.group(0)
        if _ZIP_PLUS_4.fullmatch(candidate):
            continue  # a US ZIP+4 code (``CA 90210-1234``), not a phone number
        digits = _NON_DIGITS.sub("", candidate)
        if len(digits) > 24:
            continue
        international = candidate.startswith(("+", "(+"))
        if not international and not digits.startswith("0") and not _CANDIDATE_SEPARATOR.search(candidate):
            continue  # a bare run of digits (ids, timestamps) is not given to libphonenumber
        start, end = m.span()
        context_start = max(0, start - 1)
        spans = _phone_spans(text[context_start : min(n, end + 3, right)], digits, international, regions)
        cut = end
        while not spans and international:
            # ``+44 20 7946 0958 12``: a number followed by another group is rejected whole; retry without
            # the trailing groups (at most twice).
            cut = text.rfind(" ", start, cut)
            digits = _NON_DIGITS.sub("", text[start:cut]) if cut > start else ""
            if len(digits) < 8 or end - cut > 16:
                break
            spans = _phone_spans(text[context_start : cut + 1], digits, True, regions)
        for rel_start, rel_end in spans:
            a = max(start, context_start + rel_start)
            b = min(end, context_start + rel_end)
            if b > a and (not found or a >= found[-1][1]) and _on_boundaries(text, a, b):
                found.append((a, b))
    return found


_GLUED = re.compile(r"[\w]|[\-./]\w")
_DATE_INSIDE = re.compile(r"(?:19|20)\d\d[\-/.][01]\d[\-/.][0-3]\d")


def _on_boundaries(text: str, start: int, end: int) -> bool:
    """A number the matcher found inside a candidate must still start and end on token boundaries
    (``224.254.230.71 2000-11-22`` holds no phone) and hold no date."""
    if start and (text[start - 1].isalnum() or (start > 1 and text[start - 1] in "-./" and text[start - 2].isalnum())):
        return False
    if _GLUED.match(text, end):
        return False
    return _DATE_INSIDE.search(text, start, end) is None
