"""Who said a statement, in a multi-speaker conversation: the speaker label a turn is stored with
("Caroline: I adopted a corgi", "Melanie said: …"). Pure functions, no database.

The label is part of the learning's content (what the prompt shows), but it is *who* said it, not *what*
was said: the ranker (``learnings.retrieval``) turns a question's naming of a speaker into a preference for
that speaker's turns, and the stored embedding (``Learning.save``) represents the statement without its label,
so that every turn of a speaker is not "similar" to every question naming them."""

from __future__ import annotations

import re

_SPEAKER = re.compile(r"^\s*([A-Z][\w'.-]{0,39}(?: [A-Z][\w'.-]{0,39})?)(?: said| says| wrote| asked)?\s*:\s+")
_NAME = re.compile(r"\b[A-Z][\w'-]+")
NOT_SPEAKERS = frozenset(
    (
        "preference",
        "decision",
        "fact",
        "note",
        "notes",
        "update",
        "summary",
        "title",
        "subject",
        "re",
        "fwd",
        "fw",
        "todo",
        "warning",
        "error",
        "step",
        "example",
        "question",
        "answer",
        "q",
        "a",
        "tip",
        "important",
        "reminder",
        "context",
        "background",
        "goal",
        "task",
        "status",
        "result",
        "output",
        "input",
        "remember",
        "fyi",
        "ps",
        "nb",
    )
)
"""Labels that name a kind of text, not a person ("Note: the editor is Helix", "Preference: …")."""


def speaker_of(text: str) -> str | None:
    """The speaker label a text starts with, or ``None`` (no label, or a label such as "Note:")."""
    found = _SPEAKER.match(text or "")
    if found is None or found.group(1).lower() in NOT_SPEAKERS:
        return None
    return found.group(1)


def without_label(text: str) -> str:
    """The text without its speaker label (what was said); unchanged when it has none."""
    found = _SPEAKER.match(text or "")
    if found is None or found.group(1).lower() in NOT_SPEAKERS or not text[found.end() :].strip():
        return text
    return text[found.end() :]


def named_in(query: str, speakers: set[str]) -> set[str]:
    """The speakers among ``speakers`` that ``query`` names (by full name or first name, "Caroline's" too)."""
    named = {word.removesuffix("'s").removesuffix("’s") for word in _NAME.findall(query or "")}
    return {speaker for speaker in speakers if speaker in named or speaker.split(" ")[0] in named}


def without_names(query: str, speakers: set[str]) -> str:
    """``query`` without the words that name these speakers: their turns are preferred by a prior, so the
    name is not also a term every one of their turns matches."""
    words = {part for speaker in speakers for part in speaker.split(" ")}
    if not words:
        return query
    pattern = r"\b(?:" + "|".join(re.escape(word) for word in sorted(words, key=len, reverse=True)) + r")(?:'s|’s)?\b"
    stripped = re.sub(pattern, " ", query)
    return stripped if stripped.strip() else query
