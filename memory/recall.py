"""Recovered run memory (Plane 2): the spec's §4.5 lexical ranking of run-memory entries against the pending
input, pure (no database, no Django). Records are built in ``memory.run_records``; the hybrid ranker is
``memory.ranking``; sections are rendered and packed by ``memory.sections``.
"""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Iterable, Sequence
from functools import lru_cache
from typing import NamedTuple

from memory.run_records import RecoveredEntry, run_id_sort_key

SUMMARY_WEIGHT = 4
REQUEST_WEIGHT = 3
OUTCOME_WEIGHT = 3
FAILURE_MARKERS_WEIGHT = 1
MIN_TERM_CHARS = 3


# Ranking normalises many fields at once so the per-character work stays in C. The fields are joined by
# " NUL "; ASCII bytes are translated in one pass (letters and digits kept, everything else → space, NUL kept
# as the boundary); bytes >= 128 pass through untouched, so UTF-8 stays valid, and the few distinct non-ASCII
# separators (dashes, ideographic punctuation, …) are then replaced one by one. Each piece comes out
# "spaced": normalised except that runs of spaces are not yet collapsed, with a space at both ends, which is
# all a token search (" term " in piece) needs; the whole query is found with its words joined by " +".
_FIELD_SEPARATOR = "\x00"
_SPACED_SEPARATOR = " \x00 "
_ASCII_WORD_BYTES = bytes(c if chr(c).isalnum() or c == 0 else 0x20 for c in range(128)) + bytes(range(128, 256))
# With at most this many query terms, terms are found by substring search instead of tokenising the field.
_TERM_SEARCH_LIMIT = 8
_FIELD_WEIGHTS = (SUMMARY_WEIGHT, REQUEST_WEIGHT, OUTCOME_WEIGHT, FAILURE_MARKERS_WEIGHT)


@lru_cache(maxsize=8192)
def _is_word_char(char: str) -> bool:
    # Combining marks (Devanagari vowel signs, Arabic harakat, …) belong to the word they modify.
    return char.isalnum() or unicodedata.category(char)[0] == "M"


def _spaced_pieces(texts: Sequence[str]) -> list[str]:
    joined = f" {_SPACED_SEPARATOR.join(texts)} ".casefold()
    if joined.isascii():
        joined = joined.encode("ascii").translate(_ASCII_WORD_BYTES).decode("ascii")
    else:
        joined = joined.encode(errors="surrogatepass").translate(_ASCII_WORD_BYTES).decode(errors="surrogatepass")
        for char in {char for char in set(joined) if not char.isascii() and not _is_word_char(char)}:
            joined = joined.replace(char, " ")
    pieces = joined.split(_FIELD_SEPARATOR)
    if len(pieces) != len(texts):  # a field carries its own NUL: go one by one
        return [_spaced_pieces([text.replace(_FIELD_SEPARATOR, " ")])[0] for text in texts]
    return pieces


def _collapse(piece: str) -> str:
    while "  " in piece:
        piece = piece.replace("  ", " ")
    return piece.strip(" ")


def normalise_text(text: str) -> str:
    """Spec §4.5: case-folded alphanumerics of any script; every other run of characters → one space; trimmed.

    Combining marks stay inside their word, so scripts that write vowels as marks keep whole words.
    """
    return _collapse(_spaced_pieces([text])[0])


def _terms(normalised: str) -> frozenset[str]:
    return frozenset(term for term in normalised.split(" ") if len(term) >= MIN_TERM_CHARS)


def query_terms(query: str) -> frozenset[str]:
    """Spec §4.5: the distinct normalised whitespace tokens of at least 3 characters."""
    return _terms(normalise_text(query))


class _Query(NamedTuple):
    text: str  # the normalised query, never empty
    probe: str  # the query's longest word: a piece without it cannot contain the whole query
    terms: frozenset[str]
    spaced_terms: tuple[str, ...]  # " term ", to search in a spaced piece


def _prepare_query(query: str | None) -> _Query | None:
    if query is None or not query.strip():
        return None
    text = normalise_text(query)
    if not text:
        return None
    words = text.split(" ")
    terms = _terms(text)
    return _Query(
        text=text,
        probe=max(words, key=len),
        terms=terms,
        spaced_terms=tuple(f" {term} " for term in terms),
    )


def _entry_fields(entry: RecoveredEntry) -> tuple[str, str, str, str]:
    """The ranked fields, in the order of ``_FIELD_WEIGHTS``."""
    return (
        entry.summary,
        entry.request_preview or "",
        entry.outcome_preview or "",
        " ".join(entry.failure_markers),
    )


@lru_cache(maxsize=64)
def _query_pattern(text: str) -> re.Pattern[str]:
    """The normalised query as found in a spaced piece: its words separated by runs of spaces."""
    return re.compile(" +".join(map(re.escape, text.split(" "))))


def _score_pieces(
    pieces: Sequence[str], query: _Query, pattern: re.Pattern[str] | None, spaced_terms: Sequence[str]
) -> int:
    """Score the spaced pieces of one entry; ``spaced_terms`` are the query terms that may occur in them."""
    probe, terms = query.probe, query.terms
    term_count = len(terms)
    search_terms = len(spaced_terms) <= _TERM_SEARCH_LIMIT
    score = 0
    for piece, weight in zip(pieces, _FIELD_WEIGHTS):  # noqa: B905 - both have one item per ranked field
        if pattern is not None and probe in piece and pattern.search(piece):
            score += 100 * weight
        if spaced_terms:
            if search_terms:
                matched = len([term for term in spaced_terms if term in piece])
            else:
                matched = len(terms.intersection(piece.split(" ")))
            if matched:
                score += 15 * weight * matched + (40 * weight if matched == term_count else 0)
    return score


def _scores(entries: Sequence[RecoveredEntry], query: _Query | None) -> list[int]:
    """Score entries in one batch; terms absent from the batch, then from an entry, are not searched again."""
    if query is None or not entries:
        return [0] * len(entries)
    pieces = _spaced_pieces([text for entry in entries for text in _entry_fields(entry)])
    width = len(_FIELD_WEIGHTS)
    batch = "".join(pieces)
    batch_terms = [term for term in query.spaced_terms if term in batch]
    # A query longer than every field cannot be contained in one (and a huge input is never compiled).
    pattern = _query_pattern(query.text) if len(query.text) <= max(map(len, pieces)) else None
    probe = query.probe if pattern is not None else None
    scores = []
    for index in range(0, len(pieces), width):
        entry_pieces = pieces[index : index + width]
        blob = "".join(entry_pieces)
        entry_terms = [term for term in batch_terms if term in blob]
        if entry_terms or (probe is not None and probe in blob):
            scores.append(_score_pieces(entry_pieces, query, pattern, entry_terms))
        else:
            scores.append(0)
    return scores


def score_entry(entry: RecoveredEntry, query: str | None) -> int:
    """Spec §4.5 lexical score of one entry against the pending input; 0 for a blank query.

    Per field (summary 4, request 3, outcome 3, failure markers joined by spaces 1): +100·w when the field
    contains the whole normalised query, +15·w per matched query term, +40·w more when every term matched.
    """
    return _scores([entry], _prepare_query(query))[0]


def rank_entries(entries: Iterable[RecoveredEntry], query: str | None) -> list[tuple[int, RecoveredEntry]]:
    """Score every entry and sort by score desc, recorded_at desc, run id desc (numeric suffix)."""
    entries = list(entries)
    scored = list(zip(_scores(entries, _prepare_query(query)), entries, strict=True))
    scored.sort(
        key=lambda item: (item[0], item[1].recorded_at_ms, run_id_sort_key(item[1].run_id)),
        reverse=True,
    )
    return scored
