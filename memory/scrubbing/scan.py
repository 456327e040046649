"""Fast-scan helpers shared by the passes: character-class copies, literal searches, splicing edits.

See the package docstring on speed: every pass is anchored on a literal found by one of these helpers.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Callable, Iterator
from typing import TypeVar

import re2

_F = TypeVar("_F", bound=Callable[..., object])


def _small_cache(maxsize: int, *, max_chars: int = 512) -> Callable[[_F], _F]:
    """``functools.lru_cache`` for the calls whose first argument is at most ``max_chars`` long (keys, words,
    tokens and snippets repeat a lot in logs); longer ones are computed every time, so the cache holds at most
    ``maxsize * max_chars`` characters whatever the texts scrubbed."""

    def decorate(func: _F) -> _F:
        cached = functools.lru_cache(maxsize=maxsize)(func)

        @functools.wraps(func)
        def call(first, *args, **kwargs):
            if kwargs:
                return func(first, *args, **kwargs) if len(first) > max_chars else cached(first, *args, **kwargs)
            return func(first, *args) if len(first) > max_chars else cached(first, *args)

        call.cache_clear = cached.cache_clear  # type: ignore[attr-defined]
        return call  # type: ignore[return-value]

    return decorate


def _class_table(classes: dict[str, str], default: str) -> bytes:
    """A 256-entry ``bytes.translate`` table: characters in ``classes`` map to their class, others to default."""
    table = bytearray(default.encode() * 256)
    for chars, cls in classes.items():
        for ch in chars:
            table[ord(ch)] = ord(cls)
    return bytes(table)


def _classify(text: str, table: bytes) -> bytes:
    """One class byte per character of ``text`` (same offsets). Characters above U+00FF become ``?`` first;
    ``bytes.translate`` is fast where ``str.translate`` crawls on non-ASCII text."""
    data = text.encode("ascii") if text.isascii() else text.encode("latin-1", "replace")
    return data.translate(table)


def _literal_matches(haystack: bytes, literal: bytes, pattern: re.Pattern[bytes]) -> Iterator[re.Match[bytes]]:
    """``pattern.finditer(haystack)`` for a pattern whose every match starts with ``literal`` (a long one: ``find``
    then skips ahead faster than ``re``'s own scan)."""
    find = haystack.find
    pos = find(literal)
    while pos >= 0:
        match = pattern.match(haystack, pos)
        if match is None:
            pos = find(literal, pos + 1)
        else:
            yield match
            pos = find(literal, match.end())


def _capital(literal: str) -> str:
    """The literal's first capital letter, or "". Capitals are rare in text and a one-character search runs at
    memory speed (~20 times a pattern scan), so a text without it is ruled out before any scan for the literal."""
    return next((ch for ch in literal if ch.isupper()), "")


class _Triggers:
    """Which trigger literals occur in a haystack, found in one pass for them all: an RE2 set (a DFA, linear in
    the haystack) reads it at ~600 MB/s, where a search per literal reads it once per literal (~2 GB/s each).
    A rule whose triggers are all absent is skipped without a scan of its own.

    Each rule module registers its triggers at import (``add``): lower-case literals, looked up in the
    lower-cased copy (``_lowered``), or a named RE2 pattern that matches wherever the rule could. The set is
    compiled at the first lookup after a registration. It also matches the end of the text: a set that gave up
    before it (RE2's DFA out of memory) reports every trigger present (fail closed: every rule runs)."""

    def __init__(self) -> None:
        self._patterns: dict[bytes, bytes] = {}
        self._compiled: tuple[re2.Set, tuple[bytes, ...]] | None = None

    def add(self, *literals: bytes, pattern: bytes | None = None) -> None:
        """Register ``literals``; with ``pattern``, one trigger named ``literals[0]`` that is that pattern."""
        if pattern is not None:
            (name,) = literals
            self._patterns[name] = pattern
        else:
            for literal in literals:
                self._patterns.setdefault(literal, re2.escape(literal))
        self._compiled = None

    def _compile(self) -> tuple[re2.Set, tuple[bytes, ...]]:
        options = re2.Options()
        options.encoding = re2.Options.Encoding.LATIN1  # one character a byte, as in ``_lowered``'s copy
        triggers = re2.Set.SearchSet(options)
        names = tuple(self._patterns)
        for name in names:
            triggers.Add(self._patterns[name])
        triggers.Add(rb"\z")  # index len(names): the end of the text, always reached
        triggers.Compile()
        return triggers, names

    def present(self, haystack: bytes) -> frozenset[bytes]:
        compiled = self._compiled
        if compiled is None:
            compiled = self._compiled = self._compile()
        triggers, names = compiled
        found = triggers.Match(haystack)
        if not found or len(names) not in found:
            return frozenset(names)  # the set gave up: fail closed
        return frozenset(names[i] for i in found if i < len(names))


_TRIGGERS = _Triggers()


def _find_all(haystack: bytes, needle: bytes) -> list[int]:
    """Offsets of the non-overlapping occurrences of ``needle``, left to right: one ``split`` (a single search
    setup, where a ``find`` loop would set the search up again for every hit)."""
    offsets: list[int] = []
    pos = -len(needle)
    for piece in haystack.split(needle)[:-1]:
        pos += len(piece) + len(needle)
        offsets.append(pos)
    return offsets


def _splice(text: str, replacements: list[tuple[int, int, str]]) -> str:
    """Apply sorted, non-overlapping ``(start, end, replacement)`` edits."""
    if not replacements:
        return text
    parts: list[str] = []
    last = 0
    for start, end, replacement in replacements:
        parts.append(text[last:start])
        parts.append(replacement)
        last = end
    parts.append(text[last:])
    return "".join(parts)


_ASCII_LOWER = {code: code + 32 for code in range(ord("A"), ord("Z") + 1)}


def _lowered(text: str) -> bytes:
    """Lower-cased copy, one byte per character (so offsets line up), for the ASCII key needles.

    For Latin-1 text ``bytes.lower`` lowers exactly the ASCII positions ``str.lower`` would (no Latin-1
    character lowers to ASCII), ten times faster. Other text is lowered as ``str`` (the Kelvin sign becomes
    ``k``), by ASCII rules alone when that would change the length (``İ``); characters above U+00FF then
    become ``?``. Only ASCII positions matter: every needle is ASCII.
    """
    try:
        return text.encode("latin-1").lower()
    except UnicodeEncodeError:
        low = text.lower()
        if len(low) != len(text):
            low = text.translate(_ASCII_LOWER)
        return low.encode("latin-1", "replace")


_NON_SPACE = re.compile(r"\S{0,256}")


def _token_bounds(text: str, start: int, end: int) -> tuple[int, int]:
    """The whitespace-delimited token around ``text[start:end]``, reaching at most 256 characters each side (an
    e-mail address is at most 254 characters; a longer token is cut, and its pieces are looked at one by one)."""
    floor = max(0, start - 256)
    space = text.rfind(" ", floor, start)
    head = floor if space < 0 else space + 1
    if not text[head:start].isprintable():  # maybe other whitespace (all of it is unprintable): full check
        window = text[floor:start]
        head = start - (0 if not window or window[-1].isspace() else len(window.rsplit(None, 1)[-1]))
    return head, _NON_SPACE.match(text, end).end()  # type: ignore[union-attr]  # {0,256}: matches everywhere
