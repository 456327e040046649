"""How the learning plane cuts text into terms (no database): the one tokeniser the semantic keys
(``learnings.semantic``) and the lexical ranker (``learnings.lexical_ranking``) share.

Tokenisation follows the reference: Unicode-lowercase, every non-alphanumeric character is a separator.
Python's ``str.isalnum`` stands in for Rust's ``char::is_alphanumeric`` (they differ only on a few combining
marks of Indic scripts).
"""

from __future__ import annotations

import re

# In CPython a ``str`` pattern's ``\w`` is ``str.isalnum()`` plus ``_`` (both test ``Py_UNICODE_ISALNUM``), so
# ``[^\W_]`` is exactly ``isalnum()``: the runs are found in C instead of testing characters one by one.
_ALNUM_RUN = re.compile(r"[^\W_]+")


def alnum_tokens(text: str) -> list[str]:
    """Lowercased runs of alphanumeric characters, in order (duplicates kept)."""
    return _ALNUM_RUN.findall(text.lower())
