"""Issue 20 (throughput): the scrubber's prefilters skip work, never a redaction.

* The trigger set (``scan._TRIGGERS``, one RE2 pass): wherever a rule's needle or prefix matches, one of the
  triggers it is gated by is reported present - checked on generated texts built from the needles' own words, in
  every case - and a set that gives up reports every trigger (fail closed).
* The digit anchors: the three ``00X00`` scans find exactly the clusters one search per anchor finds.
"""

from __future__ import annotations

import re

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from memory.scrubbing import classifier, credentials, pii
from memory.scrubbing.scan import _TRIGGERS, _classify, _find_all, _literal_matches, _lowered, _Triggers
from tests.memory.scrubbing.corpus import CLASSIFIER_BENIGN, CLASSIFIER_SECRETS

SETTINGS = settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])

# Pieces of the needles and prefixes, so that generated texts hit them (and near misses) often.
PIECES = (
    "key", "token", "tokens", "access", "refresh", "id", "auth", "bearer", "Bearer ", "prompt", "max", "cookie",
    "secret", "cre", "dential", "pass", "passw", "phrase", "pwd", "authoriz", "Authorization", "error-json", "sk-",
    "ghp_", "github_pat_", "xoxb-", "xoxp-", "AKIA", "akia", "eyJ", "hooks.slack.com/", "Key=", "AccountKey=",
    "1:AA", ":AA", "://", "-----BEGIN ", " is ", " was ", " to ", "ssh", "scp", "sftp", "rsync", "mosh",
    "_", "-", ".", " ", "=", ":", "\n", "s", "K", "\u212a", "İ", "é", "x",
)  # fmt: skip
TEXTS = st.lists(st.sampled_from(PIECES), max_size=12).map("".join)


@SETTINGS
@given(TEXTS)
def test_every_needle_match_has_a_trigger_present(text: str) -> None:
    low = _lowered(text)
    present = _TRIGGERS.present(low)
    for needle, triggers in credentials._KEY_NEEDLES:
        if needle.search(low):
            assert not present.isdisjoint(triggers), (needle.pattern, text)
    for triggers, _, pattern in credentials._SPEC_PREFIXED:
        if pattern.search(text):
            assert not present.isdisjoint(triggers), (pattern.pattern, text)
    for prefix, _, _, _ in credentials._CONTEXT_SHAPES:
        if prefix in text:
            assert prefix.lower().encode() in present, (prefix, text)
    for literal, found in (
        (credentials._PEM_TRIGGER, "-----BEGIN " in text),
        (credentials._BEARER_TRIGGER, credentials._BEARER.search(text) is not None),
        (credentials._JWT_TRIGGER, "eyJ" in text),
        (credentials._USERINFO_TRIGGER, "://" in text),
        *((connector, connector in low) for connector in credentials._CONNECTORS),
    ):
        assert literal in present or not found, (literal, text)
    if pii._REMOTE_COMMAND.search(text):
        assert not present.isdisjoint(pii._REMOTE_TRIGGERS), text


def test_triggers_report_the_literals_that_occur_and_named_patterns() -> None:
    triggers = _Triggers()
    triggers.add(b"key", b" is ", b"a.b")
    triggers.add(b"digits", pattern=rb"[0-9]{3}")
    assert triggers.present(b"my key is here") == {b"key", b" is "}
    assert triggers.present(b"axb 12 (x)") == frozenset()
    assert triggers.present(b"a.b 123") == {b"a.b", b"digits"}
    assert triggers.present(b"") == frozenset()
    high = bytes(range(128, 256))  # Latin-1 text, one character a byte (not UTF-8)
    assert triggers.present(high + b"key" + high) == {b"key"}
    assert triggers.present(b"k\xe9y \xff" + high) == frozenset()


def test_a_set_that_gives_up_reports_every_trigger() -> None:
    triggers = _Triggers()
    triggers.add(b"key", b"token")
    assert triggers.present(b"nothing here") == frozenset()

    class GaveUp:  # RE2's set when its DFA runs out of memory: no match reported, not even the end of the text
        def Match(self, haystack: bytes) -> None:  # RE2 names it so
            return None

    triggers._compiled = (GaveUp(), (b"key", b"token"))
    assert triggers.present(b"nothing here") == {b"key", b"token"}


def _clusters_one_search_per_anchor(text: str) -> list[tuple[int, int]]:
    """The clusters as found before the three scans: every anchor searched on its own."""
    classes = _classify(text, pii._DIGIT_CLASS)
    hits: list[int] = []
    for anchor in pii._ANCHORS:
        hits.extend(_find_all(classes, anchor))
    hits.extend(pos for pos in _find_all(classes, b"p") if classes.startswith(pii._PLUS_DIGIT, pos))
    hits.extend(
        run.start()
        for run in _literal_matches(classes, pii._BARE_DIGITS, pii._DIGIT_RUN)
        if text[run.start()] in pii._CARD_FIRST_DIGITS and run.end() - run.start() <= 19
    )
    clusters: list[tuple[int, int]] = []
    right = -1
    for pos in sorted(hits):
        if pos >= right:
            right = classes.find(b"x", pos)
            right = len(classes) if right < 0 else right
            clusters.append((classes.rfind(b"x", 0, pos) + 1, right))
    return clusters


# Groups of digits between separators, as numbers are written (the usual separators drawn most often).
SEPARATORS = st.sampled_from([" ", "-", ".", *" -.+()/\tax\n\u00a0"])
GROUPS = st.tuples(st.text("0123456789", min_size=1, max_size=5), SEPARATORS)
DIGITS = st.lists(GROUPS, max_size=8).map(lambda groups: "".join(digits + sep for digits, sep in groups))


@SETTINGS
@given(DIGITS)
def test_the_three_anchor_scans_find_the_clusters_of_one_search_per_anchor(text: str) -> None:
    assert pii._digit_clusters(text) == _clusters_one_search_per_anchor(text)


# ---- the learning-content classifier's two prefilters (issue 23.3: the bulk import's secret guard) ----------
#
# ``_has_secret_assignment`` skips its marker and ``key: value`` checks when no secret-naming word is in the text,
# and ``_has_secret_shaped_value`` its per-token loop when no token could be secret-shaped. Each is checked
# against the same function with the shortcut taken out, on texts generated from the markers' words, values of
# every shape and the separators, and on the classifier corpus.

CLASSIFIER_PIECES = (
    "token", "key", "secret", "password", "passphrase", "pat", "bearer", "api", "access", "client", "private",
    "refresh", "personal", "x-", "Token", "KEY", " is ", ": ", "=", ":", " = ", "_", "-", " ", "\n", ",", ";", "&",
    "?", "(", ")", "'", "`", ".", "/", "+", "0", "7", "42", "aB3xY9zQ", "kP2mQ9rT4vX7zB1cD5fG",
    "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY", "AbCdEfGhIjKlMnOpQrSt", "abcdefghijklmnopqrstu", "https://x.io/a?b=",
    "sha256", "commit", "\u00e9", "\u0661\u0662\u0663", "\u2003", "$TOKEN", "changeme",
)  # fmt: skip
CLASSIFIER_TEXTS = st.lists(st.sampled_from(CLASSIFIER_PIECES), max_size=14).map("".join)


def _shaped_value_unfiltered(text: str) -> bool:
    saved = classifier._SHAPED_TOKEN
    classifier._SHAPED_TOKEN = re.compile("")  # matches everywhere: the loop always runs
    try:
        return classifier._has_secret_shaped_value(text)
    finally:
        classifier._SHAPED_TOKEN = saved


def _assignment_unfiltered(text: str) -> bool:
    saved = classifier._NAMING_WORDS
    classifier._NAMING_WORDS = ("",)  # in every text: the marker checks always run
    try:
        return classifier._has_secret_assignment(text)
    finally:
        classifier._NAMING_WORDS = saved


@SETTINGS
@given(CLASSIFIER_TEXTS)
def test_the_classifier_prefilters_change_no_answer(text: str) -> None:
    assert classifier._has_secret_shaped_value(text) == _shaped_value_unfiltered(text), text
    assert classifier._has_secret_assignment(text) == _assignment_unfiltered(text), text


def test_the_classifier_prefilters_change_no_answer_on_the_corpus() -> None:
    texts = [*CLASSIFIER_SECRETS, *CLASSIFIER_BENIGN]
    assert any(classifier._has_secret_shaped_value(text) for text in texts)
    for text in texts:
        assert classifier._has_secret_shaped_value(text) == _shaped_value_unfiltered(text), text
        assert classifier._has_secret_assignment(text) == _assignment_unfiltered(text), text


def test_the_shaped_token_prefilter_can_refuse_and_accept() -> None:
    assert classifier._SHAPED_TOKEN.search("plain prose with words (note 12) and longwords") is None
    assert classifier._SHAPED_TOKEN.search("the value aB3xY9zQ here")
    assert classifier._SHAPED_TOKEN.search("AbCdEfGhIjKlMnOpQrSt")


SPOKEN_PIECES = (
    "password", "passphrase", "passcode", "passwd", "pwd", "pin", "pin code", "secret", "api key", "api_key",
    "access-key", "token", "tokens", "PIN", "Pass", " is ", " was ", " to ", " now ", " set ", "set ", "changed ",
    " for the lab", " of ", "my ", "wifi ", "Hunter2", "\t", " ", "x", "\u212a", "é",
)  # fmt: skip


@SETTINGS
@given(st.lists(st.sampled_from(SPOKEN_PIECES), max_size=10).map("".join))
def test_every_spoken_secret_has_a_noun_trigger_present(text: str) -> None:
    """``_redact_spoken`` returns at once when none of ``_SPOKEN_NOUNS`` is present: wherever its pattern
    matches, one of them is."""
    low = _lowered(text)
    if credentials._SPOKEN.search(low):
        assert not _TRIGGERS.present(low).isdisjoint(credentials._SPOKEN_NOUNS), text


def test_a_spoken_secret_is_still_redacted_and_prose_skips_the_search() -> None:
    from memory.scrubbing import redact_secrets

    assert "Hunter2xyz" not in redact_secrets("the wifi password is Hunter2xyz").text
    prose = "the deploy window is on Tuesday and the build was moved to Thursday"
    present = _TRIGGERS.present(_lowered(prose))
    assert present.isdisjoint(credentials._SPOKEN_NOUNS)
    assert credentials._redact_spoken(prose, _lowered(prose), {}, present) is prose
