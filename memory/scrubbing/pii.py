"""Spec §4.2 step B, PII: the number-run pass (Luhn cards with issuer ranges, NANP-shaped phones), SSNs,
e-mail tokens (and e-mails glued to other text); international phones come from ``phones`` (phonenumbers).
"""

from __future__ import annotations

import bisect
import re
from itertools import accumulate

from memory.scrubbing.markers import (
    CARD_MARKER,
    EMAIL_MARKER,
    KIND_CARD,
    KIND_EMAIL,
    KIND_PHONE,
    KIND_SSN,
    PHONE_MARKER,
    SSN_MARKER,
    _bump,
)
from memory.scrubbing.phones import _international_phones
from memory.scrubbing.scan import (
    _TRIGGERS,
    _class_table,
    _classify,
    _literal_matches,
    _small_cache,
    _splice,
    _token_bounds,
)

# Digit-class copy of the text: digits -> 0, '-' -> d, '.' -> o, '+' -> p, other number separators
# (space, tab, parentheses, slash) -> s, anything else -> x. Line breaks end a cluster (a phone number does
# not span lines); '-' has its own class so that a date-time (0000d00d00s00) never looks like a number
# written in pairs (00s00s00s00).
_DIGIT_CLASS = _class_table({"0123456789": "0", " \t()/\u00a0": "s", "-": "d", ".": "o", "+": "p"}, "x")
# Literal shapes of the digit-class copy that every phone / card / SSN candidate contains: 3 then 4 digits
# (NANP, grouped cards and most national formats), dotted NANP / French, 3-3-2 and 2-2-2-2 groupings, a
# 2-digit area code before a long block, the SSN, and +digit; plus runs of 13+ bare digits (cards written
# without separators).
_ANCHORS = (
    b"000s0000", b"000d0000", b"000o000o0000", b"00o00o00o00", b"000s000s00", b"000d000d00", b"00s00s00s00",
    b"00d00d00d00", b"00s000000", b"0d00d0000", b"000s00s0000",
)  # fmt: skip


def _anchor_scan(separator: bytes) -> re.Pattern[bytes] | None:
    """One scan for every anchor holding ``00<separator>00`` (each anchor holds one of ``00s00``, ``00d00``,
    ``00o00``): that literal is searched at literal speed, and where it stands each anchor is checked around it by
    a fixed-width look-behind and look-ahead (a few byte compares, in C). A match then takes the rest of its
    cluster (possessive: read once), so a cluster gives one hit per scan. Three scans replace one per anchor."""
    core = b"00" + separator + b"00"
    checks = []
    for anchor in _ANCHORS:
        at = anchor.find(core)
        if at >= 0:
            head, tail = anchor[: at + len(core)], anchor[at + len(core) :]
            checks.append(b"(?<=" + head + b")" + (b"(?=" + tail + b")" if tail else b""))
    return re.compile(core + b"(?:" + b"|".join(checks) + b")[^x]*+") if checks else None


_ANCHOR_SCANS = tuple(scan for scan in map(_anchor_scan, (b"s", b"d", b"o")) if scan is not None)
if not all(any(b"00" + sep + b"00" in anchor for sep in (b"s", b"d", b"o")) for anchor in _ANCHORS):
    raise RuntimeError("every digit anchor must hold 00s00, 00d00 or 00o00 (see _anchor_scan)")
_DIGIT_FLAG = bytes(1 if chr(code).isdigit() and code < 128 else 0 for code in range(256))
_PLUS_DIGIT = b"p0"  # the last anchor: '+' is rare, so its occurrences are found with a one-byte search
_BARE_DIGITS = b"0" * 13
_DIGIT_RUN = re.compile(b"0+")
_CARD_FIRST_DIGITS = frozenset("234568")
_INNER_START = re.compile(r"[\s(+]|[\-./][\-./]")


def _has_digit(text: str) -> bool:
    return (
        "0" in text or "1" in text or "2" in text or "3" in text or "4" in text
        or "5" in text or "6" in text or "7" in text or "8" in text or "9" in text
    )  # fmt: skip


def _step_b(text: str, regions: str, present: frozenset[bytes] | None = None) -> tuple[str, dict[str, int]]:
    """Step B. ``present``: the triggers (``_TRIGGERS``) step A found in the text it redacted into ``text`` (they
    hold every trigger of ``text``: a redaction adds none), or None (every rule looks)."""
    counts: dict[str, int] = {}
    if not text:
        return text, counts
    if _has_digit(text):
        edits = _digit_pii(text, counts, regions)
        text = _splice(text, edits)
    if "@" in text:
        text = _redact_emails(text, counts, present is None or not present.isdisjoint(_REMOTE_TRIGGERS))
    return text, counts


def _digit_clusters(text: str) -> list[tuple[int, int]]:
    """Maximal runs of digits and number separators that contain an anchor shape, as sorted (start, end)."""
    classes = _classify(text, _DIGIT_CLASS)
    find = classes.find
    hits: list[int] = []
    for scan in _ANCHOR_SCANS:
        hits.extend(m.start() for m in scan.finditer(classes))
    pos = find(b"p")
    while pos >= 0:
        if classes.startswith(_PLUS_DIGIT, pos):
            hits.append(pos)
        pos = find(b"p", pos + 1)
    hits.extend(
        run.start()
        for run in _literal_matches(classes, _BARE_DIGITS, _DIGIT_RUN)
        if text[run.start()] in _CARD_FIRST_DIGITS and run.end() - run.start() <= 19
    )
    hits.sort()
    clusters: list[tuple[int, int]] = []
    right = -1
    for pos in hits:
        if pos >= right:  # not in the cluster just found
            right = find(b"x", pos)
            if right < 0:
                right = len(classes)
            clusters.append((classes.rfind(b"x", 0, pos) + 1, right))
    return clusters


_CONTEXT = 3  # characters each side of a cluster that any rule looks at (look-arounds, matcher context)


def _digit_pii(text: str, counts: dict[str, int], regions: str) -> list[tuple[int, int, str]]:
    edits: list[tuple[int, int, str]] = []
    last = 0
    for left, right in _digit_clusters(text):
        if left < last:
            continue
        base = left - _CONTEXT if left > _CONTEXT else 0
        found = _cluster_pii(text[base : right + _CONTEXT], left - base, right - base, regions)
        for start, end, marker, kind in found:
            start += base
            end += base
            if kind == KIND_PHONE and _identifier_number(text, start, end):
                continue
            if kind == KIND_SSN:
                token_start, token_end = _token_bounds(text, start, end)
                if text[token_start:token_end].strip(_TRIM) == text[start:end] and token_start >= last:
                    start, end = token_start, token_end  # spec: the whole whitespace token is replaced
            edits.append((start, end, marker))
            _bump(counts, kind)
            last = end
    return edits


# Numbers that are identifiers, not phones: after a label naming one (``Order 555-123-4567``, ``invoice no.
# 2024 555 0199``, ``P/N 0451-203-1178``) or ``#``, or a year joined to a sequence (``2024-555-1234``).
_ID_LABELS = frozenset({
    "order", "invoice", "inv", "part", "p/n", "pn", "sku", "po", "ticket", "case", "ref", "reference", "tracking",
    "serial", "s/n", "sn", "item", "model", "batch", "lot", "build", "job", "request", "req", "incident", "bug",
    "issue", "transaction", "txn", "confirmation", "booking", "receipt", "shipment", "parcel", "claim", "policy",
    "contract",
})  # fmt: skip
_ID_SUFFIXES = frozenset({"no", "nr", "num", "number", "id", "#"})
_YEAR_SEQUENCE = re.compile(r"(?:19|20)\d\d[\-/._]\d")
_LABEL_PUNCTUATION = "#:.,()[]"


def _identifier_number(text: str, start: int, end: int) -> bool:
    """A phone-shaped number that is an identifier: see ``_ID_LABELS`` (runs once per phone found, so cheap)."""
    if text[start] in "12" and _YEAR_SEQUENCE.match(text, start):
        return True
    before = text[max(0, start - 32) : start].rstrip()
    if not before:
        return False
    if before[-1] == "#":
        return True
    cut = before.rfind(" ")
    word = before[cut + 1 :].strip(_LABEL_PUNCTUATION).lower()
    if word in _ID_SUFFIXES or not word:
        before = before[: max(cut, 0)].rstrip()
        word = before[before.rfind(" ") + 1 :].strip(_LABEL_PUNCTUATION).lower()
    return word in _ID_LABELS


@_small_cache(65536, max_chars=256)
def _cluster_pii(snippet: str, left: int, right: int, regions: str) -> tuple[tuple[int, int, str, str], ...]:
    """The PII of one digit cluster ``snippet[left:right]`` (with a little context around it), in spec
    order: number runs, SSNs, then phonenumbers. Cached: logs repeat the same numbers a lot."""
    if not _start_allowed(snippet, left) and _INNER_START.search(snippet, left, right) is None:
        return ()  # glued to a word on the left with no other place to start (ORD-2024-000123, UUIDs)
    edits: list[tuple[int, int, str, str]] = []
    # Scans end two characters past the cluster so that look-aheads see the real context (the character at
    # ``right`` is never a digit or separator, so no match can start there).
    stop = min(len(snippet), right + 2)
    for m in _RUN.finditer(snippet, left, stop):
        edits.extend(_run_redactions(snippet, m.start(), m.end()))
    ssns = [
        (start, end, SSN_MARKER, KIND_SSN)
        for start, end in (m.span() for m in _SSN_SHAPE.finditer(snippet, left, stop))
        if not _overlaps(edits, start, end)
    ]
    edits = sorted(edits + ssns)
    # International phones, in the gaps the rules above left (a long cluster of several numbers is split).
    gaps: list[tuple[int, int]] = []
    cursor = left
    for a, b, _, _ in edits:
        if a > cursor:
            gaps.append((cursor, a))
        cursor = max(cursor, b)
    gaps.append((cursor, stop))
    phones: list[tuple[int, int, str, str]] = []
    for gap_start, gap_end in gaps:
        phones.extend(
            (start, end, PHONE_MARKER, KIND_PHONE)
            for start, end in _international_phones(snippet, gap_start, gap_end, regions)
            if not _overlaps(edits, start, end)
        )
    return tuple(sorted(edits + phones))


def _overlaps(edits: list[tuple[int, int, str, str]], start: int, end: int) -> bool:
    """Whether ``[start, end)`` overlaps one of ``edits`` (sorted, not overlapping each other): a binary search."""
    index = bisect.bisect_right(edits, (start, float("inf")))
    return (index > 0 and edits[index - 1][1] > start) or (index < len(edits) and edits[index][0] < end)


# Shapes (spec §4.2 step B).
_EMAIL_CHARS = re.compile(r"[A-Za-z0-9@._%+\-]+")
# The spec's ddd-dd-dddd, and (extension) the same number written with spaces when it is a valid SSN (area
# not 000, 666 or 9xx; group not 00; serial not 0000) and not one group of a longer sequence of numbers.
_SSN_SHAPE = re.compile(
    r"(?<![\w\-])\d{3}-\d{2}-\d{4}(?![\w\-])"
    r"|(?<![\w\-])(?<!\d )(?!000|666|9)\d{3} (?!00)\d{2} (?!0000)\d{4}(?![\w\-])(?! \d)"
)
_CARD_CHARS = re.compile(r"[\d\- ]+")
_PHONE_CHARS = re.compile(r"[\d\s+\-().]+")
_PHONE_SEPARATOR = re.compile(r"[\s+\-().]")
_NON_DIGITS = re.compile(r"\D+")
_DIGIT_GROUPS = re.compile(r"\d+")
_TRIM = ".,;:!?\"'()[]{}<>"


@_small_cache(8192, max_chars=256)
def _looks_like_email(token: str) -> bool:
    if "@" not in token or not _EMAIL_CHARS.fullmatch(token):
        return False
    local, domain = token.split("@", 1)
    if not local or "." not in domain or domain.startswith(".") or domain.endswith("."):
        return False
    # Extension: the top-level label has a letter, so ``react@18.2.0`` (a package version) is not an e-mail.
    return any(ch.isalpha() for ch in domain.rsplit(".", 1)[1])


_LUHN_DOUBLED = str.maketrans("0123456789", "0246813579")  # a doubled digit, its two digits summed


def _luhn_valid(digits: str) -> bool:
    total = sum(map(int, digits[-1::-2])) + sum(map(int, digits[-2::-2].translate(_LUHN_DOUBLED)))
    return total != 0 and total % 10 == 0


def _card_issuer_known(digits: str) -> bool:
    """Issuer (IIN) ranges of the major networks: keeps Luhn-valid timestamps and ids out."""
    n = len(digits)
    p2, p3, p4, p6 = int(digits[:2]), int(digits[:3]), int(digits[:4]), int(digits[:6])
    if digits[0] == "4":  # Visa
        return True
    if 51 <= p2 <= 55 or 2221 <= p4 <= 2720:  # Mastercard
        return n == 16
    if p2 in (34, 37):  # American Express
        return n == 15
    if 300 <= p3 <= 305 or p4 == 3095 or p2 in (36, 38, 39):  # Diners Club
        return n >= 14
    if 3528 <= p4 <= 3589:  # JCB
        return n >= 16
    if p4 == 6011 or 644 <= p3 <= 649 or p2 == 65 or 622126 <= p6 <= 622925:  # Discover
        return n >= 16
    if p2 in (62, 81) or 2200 <= p4 <= 2204:  # UnionPay, Mir
        return n >= 16
    return p2 in (50, 56, 57, 58, 60, 63, 67)  # Maestro, RuPay


_DATE_IN_NUMBER = re.compile(r"(?:19|20)\d\d-[01]\d-[0-3]\d")


@_small_cache(8192, max_chars=64)
def _looks_like_card(token: str) -> bool:
    if not _CARD_CHARS.fullmatch(token) or ("-" in token and _DATE_IN_NUMBER.search(token)):
        return False  # (extension) a number next to a date (``43150 2000-05-09``) is not a card
    digits = _NON_DIGITS.sub("", token)
    return 13 <= len(digits) <= 19 and _luhn_valid(digits) and _card_issuer_known(digits)


def _looks_like_phone(token: str) -> bool:
    """The spec's phone shape, restricted to NANP numbers: grouping 3-3-4 / 1-3-3-4 / +1…, area code 2-9.

    The spec's bare "10 digits with a separator" also matches ``2024-01-15 10:30``, ``192.168.10.10`` and
    ``48.8566 2.3522``; other countries' numbers are found by ``phonenumbers`` instead.
    """
    if not _PHONE_CHARS.fullmatch(token) or not _PHONE_SEPARATOR.search(token):
        return False
    digits = _NON_DIGITS.sub("", token)
    plus = token.startswith("+")
    if plus:
        if len(digits) != 11 or digits[0] != "1":
            return False
    elif not (len(digits) == 10 or (len(digits) == 11 and digits[0] == "1")):
        return False
    if digits[-10] in "01":
        return False  # NANP area codes start with 2-9 (the exchange rule would reject the spec's 555-123-4567)
    groups = [len(group) for group in _DIGIT_GROUPS.findall(token)]
    if groups in ([3, 3, 4], [1, 3, 3, 4]):
        return True
    if plus and groups in ([11], [1, 10]):
        return True
    return "(" in token and groups in ([3, 7], [1, 3, 7])


# B.1 number-run pass. A run starts at a digit, + or ( on a token boundary and extends over digits and
# separators; whitespace is only taken when a digit (or "(digit") follows. Only runs with 10+ digits can be
# a phone or a card, so the regex asks for them; a date-time prefix (``2024-01-15 10:30``) never starts one.
# Separators between two digits are bounded (a number is written with a few), so a start that fails costs a
# bounded number of steps, and the repetition is possessive: a run is read once.
_RUN = re.compile(
    r"(?<![\w])(?<![\w][\-./])(?!(?:19|20)\d\d[\-/.][01]?\d[\-/.][0-3]?\d\s)"
    r"[+(]{0,3}\d(?:(?:[+\-().]|[ \t]{1,4}(?=\(?\d)){0,4}\d){9,}+"
)


_PLUS_ONE = re.compile(r"\+[\s(]{0,4}1")
_RUN_START = re.compile(r"(?<!\w)(?<!\w[\-./])[\d+(]")  # ``_start_allowed`` at a digit, + or (


def _start_allowed(text: str, index: int) -> bool:
    if index == 0:
        return True
    previous = text[index - 1]
    if previous.isalnum() or previous == "_":
        return False
    return not (previous in "-./" and index >= 2 and (text[index - 2].isalnum() or text[index - 2] == "_"))


def _end_allowed(text: str, index: int) -> bool:
    """Not glued to a word on the right: ``4567abc`` and ``0076-ce4d`` (a UUID) do not end a number."""
    if index >= len(text):
        return True
    following = text[index]
    if following.isalnum() or following == "_":
        return False
    return not (following in "-./" and index + 1 < len(text) and (text[index + 1].isalnum() or text[index + 1] == "_"))


def _run_redactions(text: str, start: int, end: int) -> list[tuple[int, int, str, str]]:
    """Replacements inside one run ``text[start:end]`` (``end`` is just after its last digit).

    As in the spec, every boundary position of the run is tried as a start: the candidate from there to
    the end is a card, else a phone, else (starting with ``+``/``(``) a phone-shaped prefix ending at its
    10th or 11th digit. Work per start is bounded: a whole candidate is only examined when it has at most
    19 digits (no card or phone has more), and the prefix walk stops after 11 digits.
    """
    found: list[tuple[int, int, str, str]] = []
    # digits_after[k]: the digits in text[start + k : end] (a long run is counted in C: a 0/1 copy, summed from
    # the right; a short one, the common case, in a plain loop, cheaper there).
    if end - start > 64:
        digits_after = list(accumulate(_classify(text[start:end], _DIGIT_FLAG)[::-1]))[::-1]
        digits_after.append(0)
    else:
        digits_after = [0] * (end - start + 1)
        for k in range(end - start - 1, -1, -1):
            digits_after[k] = digits_after[k + 1] + text[start + k].isdigit()
    whole_ok = _end_allowed(text, end)
    pos = start
    next_start = _RUN_START.search
    while pos < end:
        found_start = next_start(text, pos, end)  # the next digit, + or ( where a number may start
        if found_start is None:
            break
        pos = found_start.start()
        ch = text[pos]
        remaining = digits_after[pos - start]
        if remaining < 10:
            break
        if remaining > 19 and text[pos : pos + 4].isdigit() and not text[pos + 4 : pos + 5].isdigit():
            # Extension: a grouped card followed by more numbers (``4111 1111 1111 1111 123-45-6789``) ends
            # at a group boundary inside the run.
            card_end = _grouped_card_end(text, pos, end)
            if card_end > 0:
                found.append((pos, card_end, CARD_MARKER, KIND_CARD))
                pos = card_end
                continue
        if whole_ok and remaining <= 19:
            candidate = text[pos:end]
            if remaining >= 13 and _looks_like_card(candidate):
                found.append((pos, end, CARD_MARKER, KIND_CARD))
                break
            if remaining <= 11 and _looks_like_phone(candidate):
                found.append((pos, end, PHONE_MARKER, KIND_PHONE))
                break
        if ch == "(" or (ch == "+" and _PLUS_ONE.match(text, pos)):  # only +1… can start a NANP prefix
            # The prefix walk: at the 10th or 11th digit, a phone-shaped prefix is redacted on its own.
            seen = 0
            stop = pos
            prefix_end = -1
            while stop < end and seen < 11:
                if text[stop].isdigit():
                    seen += 1
                    if seen >= 10 and _end_allowed(text, stop + 1) and _looks_like_phone(text[pos : stop + 1]):
                        prefix_end = stop + 1
                        break
                stop += 1
            if prefix_end > 0:
                found.append((pos, prefix_end, PHONE_MARKER, KIND_PHONE))
                pos = prefix_end
                continue
        pos += 1
    return found


# How cards are written in groups: 4-4-4-4 (and 4-4-4-4-3 for 19 digits), 4-6-5 (American Express), 4-6-4
# (Diners Club), one separator kind throughout; shortest first, as the run is read left to right.
_CARD_GROUPINGS = tuple(
    re.compile(pattern)
    for pattern in (
        r"\d{4}([ -])\d{6}\1\d{4}",
        r"\d{4}([ -])\d{6}\1\d{5}",
        r"\d{4}([ -])\d{4}\1\d{4}\1\d{4}",
        r"\d{4}([ -])\d{4}\1\d{4}\1\d{4}\1\d{3}",
    )
)


def _grouped_card_end(text: str, start: int, end: int) -> int:
    """End of a Luhn-valid, issuer-known card written in groups (``_CARD_GROUPINGS``) starting at ``start`` and
    ending where a digit group ends (a space follows), or -1. A few C-level matches per start."""
    for grouping in _CARD_GROUPINGS:
        m = grouping.match(text, start, end)
        if m is not None:
            stop = m.end()
            if (stop == end or text[stop] == " ") and _looks_like_card(m.group()):
                return stop
    return -1


# B.2 e-mail tokens (checked trimmed, replaced whole), plus (extension) e-mails glued to other text
# (``"email":"a@b.co"``, ``mailto:a@b.co``), replaced alone.
_EMBEDDED_EMAIL = re.compile(
    r"(?<![A-Za-z0-9._%+\-])[A-Za-z0-9._%+\-]+@[A-Za-z0-9\-]+(?:\.[A-Za-z0-9\-]+)*\.[A-Za-z]{2,}"
    r"(?![A-Za-z0-9\-])"
)


_SCP_PATH = re.compile(r":[\w~./\-]")
# A login given to a remote-shell command on the same line (``ssh -i key.pem ubuntu@host``).
# Anchored on the ``s`` every command holds (a literal start is scanned fast; an alternation of first letters tries
# every position): the match starts at that ``s``, ``lastindex`` - 1 letters after the command's start.
_REMOTE_COMMAND = re.compile(
    r"s(?:(?<=(?<![\w\-])s)(?:sh|cp|ftp|sh-copy-id)()|(?<=(?<![\w\-])rs)ync()|(?<=(?<![\w\-])mos)h())[ \t]"
)
# Literals one of which every such command holds (lower-cased: triggers are looked up in a lower-cased copy).
_REMOTE_TRIGGERS = (b"ssh", b"scp", b"sftp", b"rsync", b"mosh")
_TRIGGERS.add(*_REMOTE_TRIGGERS)


def _remote_login(text: str, start: int, end: int, commands: bool = True) -> bool:
    """``user@host`` that is a login, not an address: an SSH/scp remote (``git@github.com:org/repo.git``,
    ``deploy@web-1:~/app``) or the user part of a URL (``ssh://git@github.com/org/repo``). ``commands``: whether
    the text may hold a remote-shell command (one of ``_REMOTE_TRIGGERS``); if not, none is looked for."""
    if _SCP_PATH.match(text, end) is not None or text.endswith("://", 0, start):
        return True
    if not commands:
        return False
    line_start = text.rfind("\n", max(0, start - 120), start) + 1
    floor = max(line_start, start - 120)
    # (the command itself must start inside the window)
    return any(m.start() - m.lastindex + 1 >= floor for m in _REMOTE_COMMAND.finditer(text, floor, start))  # type: ignore[operator]  # each branch ends in a group


def _redact_emails(text: str, counts: dict[str, int], commands: bool = True) -> str:
    edits: list[tuple[int, int, str]] = []
    find = text.find
    at = find("@")
    while at >= 0:
        start, end = _token_bounds(text, at, at + 1)
        if _looks_like_email(text[start:end].strip(_TRIM)):
            if not _remote_login(text, start, end, commands):
                edits.append((start, end, EMAIL_MARKER))
        else:
            edits.extend(
                (m.start(), m.end(), EMAIL_MARKER)
                for m in _EMBEDDED_EMAIL.finditer(text, start, end)
                if not _remote_login(text, m.start(), m.end(), commands)
            )
        at = find("@", max(end, at + 1))
    if edits:
        _bump(counts, KIND_EMAIL, len(edits))
    return _splice(text, edits)
