"""The learning plane's tokeniser, shared by the semantic keys and the lexical ranker."""

from __future__ import annotations

from learnings.tokens import alnum_tokens


def test_tokens_are_the_runs_of_isalnum_characters_over_all_of_unicode():
    import sys

    text = "".join(chr(code) for code in range(sys.maxunicode + 1) if not 0xD800 <= code <= 0xDFFF)
    expected = "".join(char if char.isalnum() else " " for char in text.lower()).split()
    assert alnum_tokens(text) == expected
