"""Issue 15 corpus, organised by class: each class has secrets that must not survive (positives, with the
context around them that must) and texts that must come out byte-for-byte unchanged (negatives, at least as
many). Fake credentials are assembled from pieces so that secret scanners do not flag this file.

``.venv/bin/pytest -p no:django --noconftest tests/memory/scrubbing``
"""

from __future__ import annotations

import base64
import json

import pytest

from memory.scrubbing import PHONE_MARKER, SSN_MARKER, ScrubResult, looks_like_secret, scrub
from tests.memory.scrubbing.corpus import CLASSIFIER_BENIGN, CLASSIFIER_SECRETS, SCRUB_CLASSES


def b64url(obj: dict) -> str:
    return base64.urlsafe_b64encode(json.dumps(obj).encode()).rstrip(b"=").decode()


SLACK_ROTATED = "xo" + "xe.xo" + "xp-1-" + "Mi0yLTExNjM0NTY3ODkwLTEyMzQ1Njc4OTAxMjM0"
SLACK_REFRESH = "xo" + "xe-1-" + "My0xLTExNjM0NTY3ODkwLTEyMzQ1Njc4OTAxMjM0NTY3"
SESSION_TOKEN = "IQoJb3JpZ2luX2VjEJr//////////wEaCXVzLWVhc3QtMSJHMEUCIQD+7c3Vq" + "Z9k2L1mN8pR4sT6uW0xY2zA4bC6dE8f=="
SECRET_ACCESS = "wJalrXUtnFEMI/K7MDENG/" + "bPxRfiCYzQ3k9LmN2pQr"
AMZ_SIGNATURE = "4f1c" + "9a7e2b6d8c0f3e5a7b9c1d3e5f7a9b1c3d5e7f9a1b3c5d7e9f1a3b5c7d9e1f3a"
GOOG_SIGNATURE = "7a5b" + "3c1d9e8f7a6b5c4d3e2f1a0b9c8d7e6f5a4b3c2d1e0f9a8b7c6d5e4f3a2b1c0d"
FRAGMENT_TOKEN = "ya" + "29.a0AfH6SMBx3kLmNpQrStUvWxYz0123456789"
UNSIGNED_JWT = b64url({"alg": "none", "typ": "JWT"}) + "." + b64url({"sub": "1234567890", "admin": True}) + "."
DISCORD = "MTA" + "0NTY3ODkwMTIzNDU2Nzg5.GaBcDe." + "fGhIjKlMnOpQrStUvWxYz0123456789ab"
TELEGRAM_SECRET = "AA" + "HdqTcvCH1vGWJxfSeofSAs0K5PALDsawq"

# -- leaks: (text, secrets that must not survive, context that must) ---------------------------------------
LEAKS = {
    "chat-platform rotating tokens": [
        (f"rotated token {SLACK_ROTATED} stored", [SLACK_ROTATED[5:]], ["rotated token", "stored"]),
        (f'{{"refresh_token_v2": "{SLACK_REFRESH}"}}', [SLACK_REFRESH[5:]], ['"refresh_token_v2"']),
        (f"SLACK={SLACK_ROTATED}", [SLACK_ROTATED[5:]], ["SLACK="]),
        (f"discord bot {DISCORD} online", [DISCORD[3:]], ["discord bot", "online"]),
        (f"bot 123456789:{TELEGRAM_SECRET} polling", [TELEGRAM_SECRET], ["bot 123456789:", "polling"]),
    ],
    "cloud temporary-session credentials": [
        (
            f'{{"SessionToken": "{SESSION_TOKEN}", "Expiration": "2025-01-01"}}',
            [SESSION_TOKEN[10:40]],
            ['"Expiration": "2025-01-01"'],
        ),
        (f"SessionToken: {SESSION_TOKEN}\nRegion: us-east-1", [SESSION_TOKEN[10:40]], ["Region: us-east-1"]),
        (f'"SecretAccessKey": "{SECRET_ACCESS}",', [SECRET_ACCESS], ['"SecretAccessKey"']),
        (f"aws_session_token = {SESSION_TOKEN}", [SESSION_TOKEN[10:40]], ["aws_session_token"]),
        (f"X-Amz-Security-Token: {SESSION_TOKEN} next", [SESSION_TOKEN[10:40]], ["next"]),
    ],
    "pre-signed URLs": [
        (
            f"https://b.s3.amazonaws.com/k?X-Amz-Algorithm=AWS4-HMAC-SHA256&X-Amz-Signature={AMZ_SIGNATURE}&x=1",
            [AMZ_SIGNATURE[-16:]],
            ["X-Amz-Algorithm=AWS4-HMAC-SHA256", "&x=1"],
        ),
        (
            f"https://storage.googleapis.com/b/o?X-Goog-Signature={GOOG_SIGNATURE} expires soon",
            [GOOG_SIGNATURE[-16:]],
            ["expires soon"],
        ),
        (
            f"https://x.blob.core.windows.net/c/f?sv=2022-11-02&se=2025&sig={AMZ_SIGNATURE[:43]}%3D",
            [AMZ_SIGNATURE[:43]],
            ["sv=2022-11-02"],
        ),
        (
            f"https://b.s3.amazonaws.com/k?X-Amz-Security-Token={SESSION_TOKEN[:60]}&X-Amz-Date=20250101",
            [SESSION_TOKEN[20:60]],
            ["X-Amz-Date=20250101"],
        ),
        (f"GET /o?Expires=1700000000&Signature={AMZ_SIGNATURE[:40]} 200", [AMZ_SIGNATURE[:40]], ["200"]),
    ],
    "URL fragments": [
        (
            f"https://app.example.com/cb#access_token={FRAGMENT_TOKEN}&token_type=bearer",
            [FRAGMENT_TOKEN[5:]],
            ["&token_type=bearer"],
        ),
        ("redirected to /done#id_token=abc123def456ghi789&state=xyz", ["abc123def456ghi789"], ["&state=xyz"]),
        (f"/oauth#token={FRAGMENT_TOKEN} then", [FRAGMENT_TOKEN[5:]], ["then"]),
    ],
    "unsigned JWTs": [
        (f"jwt {UNSIGNED_JWT} accepted", [UNSIGNED_JWT[:-1]], ["accepted"]),
        (f'{{"t": "{UNSIGNED_JWT}"}}', [UNSIGNED_JWT.split(".")[1]], ['{"t": "']),
        (f"Cookie-less session={UNSIGNED_JWT}", [UNSIGNED_JWT.split(".")[1]], ["session="]),
    ],
    "national identifiers with spaces": [
        ("SSN 078 05 1120 on file", ["078 05 1120"], ["SSN", "on file"]),
        ("ssn: 219 09 9999.", ["219 09 9999"], ["ssn:"]),
        ("employee 123 45 6789 hired", ["123 45 6789"], ["employee", "hired"]),
    ],
}

# -- over-redaction: texts that must come out byte-for-byte unchanged, by class -------------------------------
UNCHANGED = {
    "values end where they end": [],  # positives with preserved context live in BOUNDED below
    "placeholders and references": [
        "api_key=$OPENAI_API_KEY",
        "password: ${DB_PASSWORD}",
        'token = os.environ["GITHUB_TOKEN"]',
        "const key = process.env.STRIPE_SECRET_KEY;",
        "Authorization: Bearer $TOKEN",
        "Authorization: Bearer ${API_TOKEN}",
        "curl -H 'Authorization: Bearer <your-token-here>' https://api.example.com",
        "x-api-key: <your-key-here>",
        "password=<redacted>",
        "password: ***",
        "secret_key: xxxxxxxxxxxxxxxx",
        "OPENAI_API_KEY=sk-...",
        "aws_secret_access_key = YOUR_SECRET_KEY",
        "client_secret: {{ vault_client_secret }}",
        "token: ${{ secrets.GITHUB_TOKEN }}",
        "https://api.example.com/v1?key=$API_KEY&q=1",
        "postgres://app:${DB_PASSWORD}@db.internal/prod",
        "set PASSWORD=changeme before the first run",
        "api_key = settings.OPENAI_API_KEY",
    ],
    "numbers that are identifiers": [
        "Order 555-123-4567 shipped",
        "Invoice no. 212-555-0199 is overdue",
        "Part number: 0451-203-1178",
        "ticket #415-555-2671 closed",
        "batch 2024-555-1234 processed",
        "archive 2023/0042/1234 restored",
        "SKU 800-555-0100 restocked",
        "ref: 020 7946 0958 (internal)",
        "Tracking no. 0123 4567 84 delivered",
    ],
    "error text after an exception class": [
        "InvalidCredentialsException: 401 Unauthorized for user bob",
        "botocore.exceptions.NoCredentialsError: Unable to locate credentials",
        "TokenExpiredError: jwt expired at 10:30",
        "PasswordResetFailure: mail server down",
    ],
    "prose about secrets": [
        "The Authorization: Bearer header is required on every call.",
        "OpenAI keys start with sk- and GitHub tokens with ghp_.",
        "Password: must be at least 12 characters",
        "token: required",
        "Use Bearer authentication for the API.",
    ],
}

# (text, secret that must not survive, context that must)
BOUNDED = [
    (
        "Authorization: Bearer abcdef123456 GET https://api.example.com/v1/items",
        "abcdef123456",
        "GET https://api.example.com/v1/items",
    ),
    ("Cookie: session=s3cr3tv4lue; theme=dark then we retried", "s3cr3tv4lue", "theme=; then we retried"),
    ("Set-Cookie: sid=q8Zr0pLm3x; Path=/; HttpOnly; Secure", "q8Zr0pLm3x", "Path=/; HttpOnly; Secure"),
    (
        '"api_key": "k-123abc", "url": "https://x.io/a", "retries": 3',
        "k-123abc",
        '"url": "https://x.io/a", "retries": 3',
    ),
    ("password=hunter2 user=bob host=db1", "hunter2", "user=bob host=db1"),
    (
        "api-key: abc987zyx see https://docs.example.com/keys for rotation",
        "abc987zyx",
        "see https://docs.example.com/keys for rotation",
    ),
    (
        "-----BEGIN " + "PRIVATE KEY-----\nMIIEvQIBADANBgkq\n-----END " + "PRIVATE KEY-----\nnext: keep me",
        "MIIEvQIBADANBgkq",
        "next: keep me",
    ),
    ("db:\n  password: |\n    l0ng-s3cret\n    line-two\n  host: db.internal", "l0ng-s3cret", "host: db.internal"),
    ("authorization=Basic dXNlcjpwYXNz&next=/home", "dXNlcjpwYXNz", ""),
    ('{"credentials": ["tok-1a2b3c"], "region": "eu"}', "tok-1a2b3c", '"region": "eu"'),
]


def _cases(table: dict[str, list]) -> list:
    return [pytest.param(case, id=f"{cls}-{i}") for cls, cases in table.items() for i, case in enumerate(cases)]


@pytest.mark.parametrize("case", _cases(LEAKS))
def test_leak_classes_never_survive(case) -> None:
    text, secrets, context = case
    out = scrub(text).text
    for secret in secrets:
        assert secret not in out, out
        assert secret[-16:] not in out, out
    for kept in context:
        assert kept in out, out
    assert scrub(out) == ScrubResult(out, 0, {})  # idempotent


@pytest.mark.parametrize("case", _cases(UNCHANGED))
def test_over_redaction_classes_come_out_unchanged(case) -> None:
    assert scrub(case) == ScrubResult(case, 0, {})


@pytest.mark.parametrize("case", BOUNDED, ids=[str(i) for i in range(len(BOUNDED))])
def test_values_end_where_they_end(case) -> None:
    text, secret, kept = case
    out = scrub(text).text
    assert secret not in out, out
    for piece in kept.split("; then"):
        assert piece.replace("theme=", "theme=dark") in out or piece in out, out


def test_spaced_ssn_gets_the_ssn_marker_and_phones_still_work() -> None:
    assert scrub("SSN 078 05 1120").text == f"SSN {SSN_MARKER}"
    assert scrub("call 415-555-2671 now").text == f"call {PHONE_MARKER} now"
    assert scrub("not an ssn: 000 12 3456, 666 12 3456, 912 34 5678").redactions.get("ssn") is None
    assert scrub("totals 10 123 45 6789 11").redactions.get("ssn") is None  # one group of a longer sequence


def test_corpus_has_at_least_as_many_negatives_as_positives() -> None:
    positives = sum(len(cases) for cases in LEAKS.values()) + len(BOUNDED)
    negatives = sum(len(cases) for cases in UNCHANGED.values()) + len(CLASSIFIER_BENIGN)
    positives += len(CLASSIFIER_SECRETS)
    assert negatives >= positives


@pytest.mark.parametrize("content", CLASSIFIER_SECRETS)
def test_classifier_finds_secret_values(content: str) -> None:
    assert looks_like_secret(content)


@pytest.mark.parametrize("content", CLASSIFIER_BENIGN)
def test_classifier_accepts_talk_about_secrets(content: str) -> None:
    assert not looks_like_secret(content)


# -- issue 20 classes (tests/memory/scrubbing/corpus.py) ------------------------------------------------------------


def _class_cases(part: str) -> list:
    return [pytest.param(case, id=f"{cls}-{i}") for cls, table in SCRUB_CLASSES.items()
            for i, case in enumerate(table[part])]  # fmt: skip


@pytest.mark.parametrize("case", _class_cases("positives"))
def test_issue20_secrets_never_survive_and_their_neighbours_do(case) -> None:
    text, secret, context = case
    out = scrub(text).text
    assert secret not in out, out
    assert not [secret[i : i + 8] for i in range(len(secret) - 7) if secret[i : i + 8] in out], out
    for kept in context:
        assert kept in out, out
    assert scrub(out) == ScrubResult(out, 0, {})  # idempotent


@pytest.mark.parametrize("case", _class_cases("negatives"))
def test_issue20_ordinary_text_comes_out_unchanged(case) -> None:
    assert scrub(case) == ScrubResult(case, 0, {})


@pytest.mark.parametrize("cls", list(SCRUB_CLASSES))
def test_issue20_each_class_has_at_least_as_many_negatives_as_positives(cls: str) -> None:
    assert len(SCRUB_CLASSES[cls]["negatives"]) >= len(SCRUB_CLASSES[cls]["positives"]) >= 1
