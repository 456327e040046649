"""Scrubber (spec §4.2) and learning-content secret classifier (spec §4.19): ``memory.scrubbing``.

Plain functions, no database and no Django settings needed:
``.venv/bin/pytest -p no:django --noconftest tests/memory/test_redaction.py``.
Fake credentials are assembled from pieces so that secret scanners do not flag this file.
"""

from __future__ import annotations

import os
import random
import subprocess
import sys
from dataclasses import FrozenInstanceError
from pathlib import Path

import pytest

from memory.scrubbing import (
    CARD_MARKER,
    CONFIG_ERROR_MARKER,
    EMAIL_MARKER,
    PHONE_MARKER,
    PRIVATE_KEY_MARKER,
    REDACTED,
    SSN_MARKER,
    ScrubResult,
    looks_like_secret,
    redact_secrets,
    scrub,
)

SETTINGS = ("KHEISH_REDACT_TOKENS", "KHEISH_REDACT_TOKENS_FILE", "KHEISH_PHONE_REGIONS")
PEM_LABEL = "PRIVATE" + " KEY"
PEM_BODY = "MIIEvQIBADANBgkqhkiG9w0BAQEFAASC"


def pem(label: str = PEM_LABEL) -> str:
    return f"-----BEGIN {label}-----\n{PEM_BODY}\nAnotherBase64Line==\n-----END {label}-----"


@pytest.fixture(autouse=True)
def settings_env(monkeypatch: pytest.MonkeyPatch):
    """Start every test from an unconfigured scrubber; ``set(name, value)`` configures one setting."""

    django_settings = None
    try:
        from django.conf import settings

        if settings.configured:  # under pytest-django the settings module is loaded: override it too
            django_settings = settings
    except ImportError:  # pragma: no cover
        pass

    def set_value(name: str, value: str | None) -> None:
        if value is None:
            monkeypatch.delenv(name, raising=False)
        else:
            monkeypatch.setenv(name, value)
        if django_settings is not None:
            monkeypatch.setattr(django_settings, name, value or "", raising=False)

    for name in SETTINGS:
        set_value(name, None)
    return set_value


# -- spec §5 checklist: the run-memory scrubber ------------------------------------------------------------


def test_spec_checklist_request_and_outcome_are_scrubbed() -> None:
    token_secret = "sk-" + "proj-secret"
    api_key_secret = "sk-" + "proj-colon-secret"
    client_secret = "github" + "_pat_client_secret"
    json_secret = "sk-" + "ant-json-secret"
    request = (
        f"{pem()}\nEmail alice@example.com SSN 123-45-6789 phone 555-123-4567 card 4111-1111-1111-1111 "
        f"token {token_secret} api-key: {api_key_secret} clientSecret: {client_secret} "
        "spaced +1 415 555 2671 card 4242 4242 4242 4242"
    )
    outcome = (
        "Stored webhook https://hooks.example.test/incoming?token=hook-secret&signature=sig-secret jwt "
        "eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxMjM0NTY3ODkwIn0.sflKxwRJSMeKKF2QT4fwpMeJf36POk6yJV_adQssw5c "
        f'bob@example.com with Bearer raw-token and "x-api-key": "{json_secret}" plus +1 415 555 2671 '
        "4242 4242 4242 4242"
    )
    serialized = scrub(request).text + "\n" + scrub(outcome).text
    for forbidden in (
        "alice@example.com", "123-45-6789", "555-123-4567", "4111-1111-1111-1111", "+1 415 555 2671",
        "4242 4242 4242 4242", token_secret, api_key_secret, client_secret, json_secret, "bob@example.com",
        "raw-token", "eyJhbGciOiJIUzI1NiJ9", "hook-secret", "sig-secret", "MIIEvQIBADAN",
    ):  # fmt: skip
        assert forbidden not in serialized
    for marker in (EMAIL_MARKER, SSN_MARKER, PHONE_MARKER, CARD_MARKER, PRIVATE_KEY_MARKER):
        assert marker in serialized
    assert PHONE_MARKER + "1" not in serialized
    assert "token=<redacted>" in serialized
    assert "signature=<redacted>" in serialized


def test_pii_tokens_each_get_their_marker() -> None:
    text = (
        "Email alice@example.com SSN 123-45-6789 phone 555-123-4567 card 4111-1111-1111-1111 "
        "spaced +1 415 555 2671 card 4242 4242 4242 4242"
    )
    result = scrub(text)
    assert result.text == (
        f"Email {EMAIL_MARKER} SSN {SSN_MARKER} phone {PHONE_MARKER} card {CARD_MARKER} "
        f"spaced {PHONE_MARKER} card {CARD_MARKER}"
    )
    assert result.redaction_count == 6
    assert result.redactions == {"email": 1, "ssn": 1, "phone": 2, "card": 2}


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("+1 415 555 2671 4242 4242 4242 4242", f"{PHONE_MARKER} {CARD_MARKER}"),
        ("call 555-123-4567.", f"call {PHONE_MARKER}."),
        ("(555) 123-4567", PHONE_MARKER),
        ("+1 (415) 555-2671", PHONE_MARKER),
        ("555.123.4567", PHONE_MARKER),
        ("1-800-555-0199", PHONE_MARKER),
        ("+14155552671", PHONE_MARKER),
        ("+44 20 7946 0958 12", f"{PHONE_MARKER} 12"),
        ("ref 12 555-123-4567", f"ref 12 {PHONE_MARKER}"),
        ("4111 1111 1111 1111", CARD_MARKER),
        ("4111-1111-1111-1111", CARD_MARKER),
        ("4111111111111111", CARD_MARKER),
        ("amex 3782 822463 10005", f"amex {CARD_MARKER}"),
        ("ssn 123-45-6789", f"ssn {SSN_MARKER}"),
        ("(123-45-6789),", SSN_MARKER),  # checked trimmed, replaced whole (spec)
        ("SSN:123-45-6789", f"SSN:{SSN_MARKER}"),  # glued to a label: only the number goes
        ("write to <alice@example.com>.", f"write to {EMAIL_MARKER}"),
        ('{"email":"dave@example.com"}', f'{{"email":"{EMAIL_MARKER}"}}'),
        ("mailto:carol@example.net", f"mailto:{EMAIL_MARKER}"),
    ],
)
def test_pii_shapes(text: str, expected: str) -> None:
    assert scrub(text).text == expected


@pytest.mark.parametrize(
    "text",
    [
        "4111-1111-1111-1112",  # Luhn-invalid
        "1700000000000",  # Luhn-valid or not, no card network starts with 1
        "1234 5678 9012 3452",
        "123-456-789",
        "between 100 200 3000",  # NANP area codes start with 2-9
        "x555-123-4567",  # glued to a word
        "ids 123-456-7890-12",
        "@types/node and user@localhost and react@18.2.0",
    ],
)
def test_not_pii(text: str) -> None:
    assert scrub(text) == ScrubResult(text=text, redaction_count=0, redactions={})


# -- step A: PEM, assignments, prefixed tokens, Bearer, JWT, URL parameters ---------------------------------


@pytest.mark.parametrize("label", [PEM_LABEL, "RSA " + PEM_LABEL, "EC " + PEM_LABEL, "OPENSSH " + PEM_LABEL])
def test_pem_private_key_blocks(label: str) -> None:
    result = redact_secrets(f"before\n{pem(label)}\nafter")
    assert result.text == f"before\n{PRIVATE_KEY_MARKER}\nafter"
    assert result.redactions == {"private_key": 1}


def test_truncated_pem_is_redacted_to_the_end() -> None:
    text = f"jwt eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxMjM0\n-----BEGIN {PEM_LABEL}-----\n{PEM_BODY}"
    assert redact_secrets(text).text == f"jwt {REDACTED}\n{PRIVATE_KEY_MARKER}"


def test_pem_inside_an_assignment_and_on_one_json_line() -> None:
    assert redact_secrets(f"PRIVATE_KEY: {pem()}\nnext").text == f"PRIVATE_KEY: {PRIVATE_KEY_MARKER}\nnext"
    escaped = pem().replace("\n", "\\n")
    out = scrub(f'{{"type":"service_account","private_key":"{escaped}\\n","client_email":"x"}}').text
    assert PEM_BODY not in out
    assert '"client_email":"x"}' in out


def test_certificates_are_not_private_keys() -> None:
    text = "-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----"
    assert redact_secrets(text).text == text


def test_sensitive_assignments() -> None:
    text = (
        "ANTHROPIC_API_KEY=anthropic-secret-value\nx-api-key: project-secret-value\n"
        '"clientSecret": "json-secret-value"\npassword=hunter2\npassphrase: swordfish\n'
        "private_key=inline-key\ncredential=tenant-credential\napi-key: abc\nAuthorization: Bearer abc123\n"
        "plain text"
    )
    result = redact_secrets(text)
    assert result.text == (
        "ANTHROPIC_API_KEY=<redacted>\nx-api-key: <redacted>\n"
        '"clientSecret": "<redacted>"\npassword=<redacted>\npassphrase: <redacted>\n'
        "private_key=<redacted>\ncredential=<redacted>\napi-key: <redacted>\nAuthorization: Bearer <redacted>\n"
        "plain text"
    )
    assert result.redaction_count == 1
    assert result.redactions == {"assignment": 8, "token": 1}


def test_assignment_value_ends_at_its_token() -> None:
    # Changed for issue 15: the spec's note (the key is everything before the first '=' or ':', so a long line
    # loses the rest) is the over-redaction the issue calls a false positive; the value ends at its token.
    text = "first the api-key: abc then more text"
    assert redact_secrets(text).text == "first the api-key: <redacted> then more text"
    assert redact_secrets("Status: the password is secret").text == "Status: the password is secret"


def test_inline_json_and_logfmt_pairs() -> None:
    text = 'level=info user=bob password=hunter2 msg="ok" {"user":"bob","api_key":"k-123","max_tokens":5}'
    assert redact_secrets(text).text == (
        'level=info user=bob password=<redacted> msg="ok" {"user":"bob","api_key":"<redacted>","max_tokens":5}'
    )
    assert redact_secrets("The key=value syntax is documented").text == "The key=value syntax is documented"


def test_other_authorization_schemes_keep_the_scheme() -> None:
    assert redact_secrets("authorization=Basic dXNlcjpwYXNz").text == "authorization=<redacted>"  # spec A.1
    assert redact_secrets("Authorization: Basic dXNlcjpwYXNzd29yZA==").text == "Authorization: Basic <redacted>"
    assert redact_secrets("authorization: required for all endpoints").text == (
        "authorization: required for all endpoints"
    )


@pytest.mark.parametrize(
    "prefix",
    ["sk-", "sk-" + "ant-", "sk-" + "proj-", "gh" + "p_", "github" + "_pat_", "xo" + "xb-", "xo" + "xp-", "AK" + "IA"],
)
def test_spec_prefixed_tokens_at_a_delimiter(prefix: str) -> None:
    token = prefix + "Secret123"
    assert redact_secrets(f"key {token} used").text == "key <redacted> used"
    assert redact_secrets(f'("{token}")').text == '("<redacted>")'
    assert redact_secrets(f"task{token}").text == f"task{token}"  # not at a delimiter


def test_scikit_learn_is_not_a_key() -> None:
    assert redact_secrets("We use sk-learn for the baseline.").text == "We use sk-learn for the baseline."


def test_bearer_tokens() -> None:
    assert redact_secrets("curl -H 'Bearer abc.def' x").text == "curl -H 'Bearer <redacted>' x"
    assert redact_secrets("authorization: bearer lower-secret").text == "authorization: bearer <redacted>"


JWT = "eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxMjM0NTY3ODkwIn0.sflKxwRJSMeKKF2QT4fwpMeJf36POk6yJV_adQssw5c"


def test_jwts() -> None:
    assert redact_secrets(f"jwt {JWT}").text == "jwt <redacted>"
    assert redact_secrets(f"The token is {JWT}.").text == "The token is <redacted>."
    assert redact_secrets(f"cb?state=1&id_token={JWT}&x=1").text == "cb?state=1&id_token=<redacted>&x=1"
    assert redact_secrets("access_token eyJhbGciOiJIUzI1").text == "access_token <redacted>"  # labelled fragment
    assert redact_secrets("eyJust a word").text == "eyJust a word"


def test_url_query_parameters() -> None:
    url = "https://x.io/cb?code=abc&state=1&sig=zz&signature=s1&token=t1&key=k1&max_tokens=4096&safe=1"
    result = redact_secrets(url)
    assert result.text == (
        "https://x.io/cb?code=<redacted>&state=1&sig=<redacted>&signature=<redacted>&token=<redacted>"
        "&key=<redacted>&max_tokens=4096&safe=1"
    )
    assert result.redactions == {"url_param": 5}
    assert redact_secrets("postgres://app:s3cr3t@db.internal/prod").text == "postgres://app:<redacted>@db.internal/prod"


# -- provider token shapes beyond the spec ------------------------------------------------------------------

PROVIDER_TOKENS = {
    "google-api-key": "AI" + "za" + "SyA1b2C3d4E5f6G7h8I9j0K1l2M3n4O5p6Q",
    "google-oauth": "ya" + "29." + "a0AfH6SMBx" * 4,
    "stripe-live": "sk" + "_live_" + "4eC39HqLyjWDarjtT1zdp7dc",
    "stripe-test": "sk" + "_test_" + "4eC39HqLyjWDarjtT1zdp7dc",
    "stripe-restricted": "rk" + "_live_" + "4eC39HqLyjWDarjtT1zdp7dc",
    "stripe-publishable": "pk" + "_live_" + "4eC39HqLyjWDarjtT1zdp7dc",
    "stripe-webhook": "wh" + "sec_" + "A1b2C3d4" * 4,
    "gitlab": "gl" + "pat-" + "aB3dE6gH9jK2mN5pQ8sT",
    "npm": "np" + "m_" + "A1b2C3d4E5" * 3 + "F6g7H8",
    "pypi": "py" + "pi-AgEIcHlwaS5vcmc" + "CJDAxMjM0NTY3" * 5,
    "twilio-key": "SK" + "0123456789abcdef" * 2,
    "twilio-account": "AC" + "0123456789abcdef" * 2,
    "sendgrid": "SG" + ".a1B2c3D4e5F6g7H8i9J0kL." + "A1b2C3d4E5f6G7h8I9j0K1l2M3n4O5p6Q7r8S9t0U1v",
    "huggingface": "hf" + "_" + "AbCdEfGhIjKlMnOpQrStUvWxYz01234567",
    "slack-xoxa": "xo" + "xa-" + "1234567890-abcdefABCDEF12345",
    "slack-xoxr": "xo" + "xr-" + "1234567890-abcdefABCDEF12345",
    "slack-xoxs": "xo" + "xs-" + "1234567890-1234567890-abcdef",
    "github-oauth": "gh" + "o_" + "a1B2c3" * 6,
    "github-user": "gh" + "u_" + "a1B2c3" * 6,
    "github-server": "gh" + "s_" + "a1B2c3" * 6,
    "github-refresh": "gh" + "r_" + "a1B2c3" * 6,
    "aws-temporary": "AS" + "IA" + "Y3FDSNDKFKSIDJSW",
    "aws-long-term": "AK" + "IA" + "IOSFODNN7EXAMPL1",
    "anthropic": "sk" + "-ant-api03-" + "A1b2" * 23 + "AA",
    "openai-project": "sk" + "-proj-" + "Ab1Cd2Ef3Gh4" * 4,
}


@pytest.mark.parametrize("name", sorted(PROVIDER_TOKENS))
def test_provider_token_shapes(name: str) -> None:
    token = PROVIDER_TOKENS[name]
    result = redact_secrets(f"use {token}, then continue")
    assert result.text == "use <redacted>, then continue"
    assert result.redactions == {"token": 1}
    # Glued after a separator that the spec's delimiter rule does not accept.
    assert redact_secrets(f"value={token}&next").text == "value=<redacted>&next"
    assert redact_secrets(f'{{"v":"{token}"}}').text == '{"v":"<redacted>"}'
    # Bounded on the left: a token glued to a word is part of that word.
    assert redact_secrets(f"word{token}").text == f"word{token}"


def test_context_bound_provider_credentials() -> None:
    azure = "DefaultEndpointsProtocol=https;AccountName=acct;AccountKey=" + "A1b2+/" * 14 + "==;EndpointSuffix=x"
    assert redact_secrets(azure).text == (
        "DefaultEndpointsProtocol=https;AccountName=acct;AccountKey=<redacted>;EndpointSuffix=x"
    )
    webhook = "post to https://hooks.slack.com/services/" + "T00000000/B00000000/" + "X" * 24 + " now"
    assert redact_secrets(webhook).text == "post to https://hooks.slack.com/services/<redacted> now"


# -- international phones (phonenumbers) --------------------------------------------------------------------


@pytest.mark.parametrize(
    "number",
    [
        "+44 20 7946 0958",  # UK
        "020 7946 0958",
        "07700 900123",
        "+33 1 23 45 67 89",  # France
        "01 23 45 67 89",
        "06.12.34.56.78",
        "+49 30 12345678",  # Germany
        "030 12345678",
        "0151 23456789",
        "+91 98765 43210",  # India
        "98765 43210",
        "+81 3-1234-5678",  # Japan
        "03-1234-5678",
        "090-1234-5678",
    ],
)
def test_international_phone_numbers(number: str) -> None:
    result = scrub(f"Call {number} today")
    assert result.text == f"Call {PHONE_MARKER} today"
    assert result.redactions == {"phone": 1}


def test_phone_regions_are_configurable(settings_env) -> None:
    settings_env("KHEISH_PHONE_REGIONS", "US")
    assert scrub("Paris 01 23 45 67 89").text == "Paris 01 23 45 67 89"
    assert scrub("Paris +33 1 23 45 67 89").text == f"Paris {PHONE_MARKER}"  # the country code decides
    settings_env("KHEISH_PHONE_REGIONS", "US,FR")
    assert scrub("Paris 01 23 45 67 89").text == f"Paris {PHONE_MARKER}"


NOT_PHONES = [
    "2024-01-15",
    "2024-01-15T10:30:00Z",
    "2024-01-15 10:30:00",
    "1.2.3",
    "v10.4.12",
    "550e8400-e29b-41d4-a716-446655440000",
    "04125588-4944-ec87-1c21-4c5784360d2b",  # UUIDs whose first groups are all digits
    "56468307-8327-0076-ce4d-c0dc20dc15fa",
    "3f786850e387550fdab836ed7e6dc881de23001b",
    "$1,234.56",
    "€ 99,00",
    "192.168.10.10",
    "10.0.0.1",
    "2001:db8::8a2e:370:7334",
    "fe80::1ff:fe23:4567:890a",
    "ORD-2024-000123",
    "#123456",
    "48.8566, 2.3522",
    "48.8566 2.3522",
    "-33.8688 151.2093",
    "1700000000000",
    "1700000000",
    "max_tokens=4096",
    "https://api.example.com/v1/chat?max_tokens=4096&model=m",
]


@pytest.mark.parametrize("text", NOT_PHONES)
def test_no_false_positives(text: str) -> None:
    assert scrub(text) == ScrubResult(text=text, redaction_count=0, redactions={})


def test_no_false_positives_in_context() -> None:
    text = "On " + ", ".join(NOT_PHONES) + " nothing happened."
    assert scrub(text).text == text


# -- operator literal tokens ----------------------------------------------------------------------------------


def test_operator_tokens_from_settings(settings_env) -> None:
    settings_env("KHEISH_REDACT_TOKENS", "tenant-secret, another-secret\nthird-secret")
    result = redact_secrets("visible tenant-secret and another-secret, third-secret")
    assert result.text == "visible <redacted> and <redacted>, <redacted>"
    assert result.redactions == {"operator_token": 3}


def test_operator_tokens_longest_first(settings_env) -> None:
    settings_env("KHEISH_REDACT_TOKENS", "opaque-token,opaque-token-v2")
    assert redact_secrets("rotated secret opaque-token-v2").text == "rotated secret <redacted>"


def test_operator_tokens_never_rewrite_markers(settings_env) -> None:
    settings_env("KHEISH_REDACT_TOKENS", "dacted,zz9")
    assert redact_secrets("password=x zz9").text == "password=<redacted> <redacted>"


def test_auth_store_tokens_are_redacted(monkeypatch: pytest.MonkeyPatch) -> None:
    from memory.scrubbing import config as redaction

    monkeypatch.setattr(redaction, "_TOKEN_SOURCES", [])
    live = ["opaque-auth-canary"]
    redaction.register_literal_token_source(lambda: live)
    assert redact_secrets("tool output leaked opaque-auth-canary").text == "tool output leaked <redacted>"
    live[:] = ["rotated-canary"]
    assert redact_secrets("opaque-auth-canary rotated-canary").text == "opaque-auth-canary <redacted>"


def test_operator_tokens_from_file_follow_changes(settings_env, tmp_path: Path) -> None:
    path = tmp_path / "tokens.txt"
    path.write_text("file-secret-one\n\nfile, secret two\n", encoding="utf-8")
    settings_env("KHEISH_REDACT_TOKENS_FILE", str(path))
    assert redact_secrets("a file-secret-one b file, secret two c").text == "a <redacted> b <redacted> c"
    path.write_text("file-secret-three\n", encoding="utf-8")
    stat = path.stat()
    os.utime(path, ns=(stat.st_atime_ns, stat.st_mtime_ns + 1_000_000_000))
    assert redact_secrets("file-secret-one file-secret-three").text == "file-secret-one <redacted>"


@pytest.mark.parametrize("kind", ["missing", "directory"])
def test_unreadable_token_file_fails_closed(settings_env, tmp_path: Path, kind: str) -> None:
    path = tmp_path / "missing.txt" if kind == "missing" else tmp_path
    settings_env("KHEISH_REDACT_TOKENS_FILE", str(path))
    result = scrub("visible text with alice@example.com")
    assert result == ScrubResult(CONFIG_ERROR_MARKER, 1, {"operator_token": 1})
    assert redact_secrets("anything").text == CONFIG_ERROR_MARKER
    assert looks_like_secret("Preferred editor is Helix")


# -- counts, idempotence, API shape ---------------------------------------------------------------------------


def test_counts_step_a_once_and_step_b_per_replacement() -> None:
    text = f"note token {PROVIDER_TOKENS['npm']} at https://x.io/?sig=abc\nmail bob@example.com or 555-123-4567"
    result = scrub(text)
    assert (
        result.text
        == "note token <redacted> at https://x.io/?sig=<redacted>\nmail <redacted:email> or <redacted:phone>"
    )
    assert result.redaction_count == 1 + 2
    assert result.redactions == {"token": 1, "url_param": 1, "email": 1, "phone": 1}
    without_pii = scrub(text, redact_pii=False)
    assert without_pii.redaction_count == 1
    assert without_pii.redactions == {"token": 1, "url_param": 1}
    assert "bob@example.com" in without_pii.text


def test_clean_text_is_untouched() -> None:
    text = "Preferred editor is Helix. Deploy at 10:30 on 2024-01-15 using 4 workers."
    assert scrub(text) == ScrubResult(text, 0, {})
    assert scrub("") == ScrubResult("", 0, {})


def test_scrubbing_is_idempotent() -> None:
    text = (
        f"{pem()}\npassword=hunter2 Bearer abc {JWT} https://x.io/?token=t&code=c bob@example.com "
        "555-123-4567 +44 20 7946 0958 4111 1111 1111 1111 123-45-6789"
    )
    once = scrub(text)
    assert once.redaction_count > 0
    assert scrub(once.text) == ScrubResult(once.text, 0, {})


def test_scrub_result_is_frozen() -> None:
    result = scrub("x")
    with pytest.raises(FrozenInstanceError):
        result.text = "y"  # type: ignore[misc]


@pytest.mark.slow  # starts a process
def test_module_imports_without_django_settings() -> None:
    env = {key: value for key, value in os.environ.items() if key != "DJANGO_SETTINGS_MODULE"}
    code = "import memory.scrubbing as r; print(r.scrub('mail a@b.co').text)"
    out = subprocess.run(
        [sys.executable, "-c", code], cwd=Path(__file__).resolve().parents[3], env=env,
        capture_output=True, text=True, check=True,
    )  # fmt: skip
    assert out.stdout.strip() == f"mail {EMAIL_MARKER}"


# -- §4.19 secret classifier for learning content -----------------------------------------------------------


@pytest.mark.parametrize(
    "content",
    [
        "api-key: abc123456789",
        "x-api-key: abc123456789",
        "clientSecret: hunter2hunter2",
        "personal access token = " + "gh" + "p_1234567890",
        f"PRIVATE_KEY: -----BEGIN {PEM_LABEL}-----",
        "secret_token=abc123456789",
        "pat: " + "gh" + "p_1234567890",
        '{"clientSecret":"hunter2hunter2"}',
        "The API key is " + "sk-" + "proj-secret.",
    ],
)
def test_key_shape_corpus_is_secret(content: str) -> None:
    assert looks_like_secret(content)


@pytest.mark.parametrize(
    "content",
    [
        "Token budget is 1000.",
        "The client secretariat prefers written updates.",
        "Pat prefers concise reports.",
        "Authentication strategy is still undecided.",
        "The private roadmap is still draft.",
        "Access token is <redacted>.",  # already redacted: a marker is not a secret (issue 20)
        "",
        "   ",
    ],
)
def test_benign_learning_content(content: str) -> None:
    assert not looks_like_secret(content)


def labelled_corpus() -> list[tuple[str, bool]]:
    rnd = random.Random(4190)

    def value(n: int = 16) -> str:
        return "".join(rnd.choice("abcdefghijkmnpqrstuvwxyzABCDEFGH23456789") for _ in range(n))

    secrets = [
        lambda: f"The API key is {'sk-' + 'proj-' + value()}.",
        lambda: f"api-key: {value()}",
        lambda: f"x-api-key: {value()}",
        lambda: f"clientSecret: {value()}",
        lambda: f"personal access token = {'gh' + 'p_' + value(36)}",
        lambda: f"secret_token={value()}",
        lambda: f"pat: {'gh' + 'p_' + value(36)}",
        lambda: f'{{"clientSecret":"{value()}"}}',
        lambda: f"The password is {value(10)}",
        lambda: f"refresh_token={value(24)}",
        lambda: f"Authorization: Bearer {value(32)}",
        lambda: f"Use the AWS key {'AK' + 'IA' + value(16).upper()} for uploads.",
        lambda: f"Database URL is postgres://app:{value(12)}@db.internal/prod",
        lambda: f"Stripe key {'sk' + '_live_' + value(24)} is in the vault.",
        lambda: f"export OPENAI_API_KEY={value(40)}",
        lambda: f"My passphrase: {value(8)} {value(8)}",
    ]
    benign = [
        lambda: f"Token budget is {rnd.randint(100, 9000)}.",
        lambda: f"The project token budget is {rnd.randint(100, 9000)}.",
        lambda: "The client secretariat prefers written updates.",
        lambda: f"Pat prefers {rnd.choice(['concise', 'compact', 'weekly'])} status reports.",
        lambda: "Authentication strategy is still undecided.",
        lambda: f"The private roadmap is still {rnd.choice(['draft', 'under review', 'secret-free'])}.",
        lambda: f"Preferred editor is {rnd.choice(['Helix', 'Vim', 'Zed', 'VS Code'])}.",
        lambda: f"Project codename is {rnd.choice(['Atlas', 'Borealis', 'Cobalt'])}.",
        lambda: f"Requests use about {rnd.randint(100, 4000)} tokens on average.",
        lambda: "The key insight is that caching the catalog halves latency.",
        lambda: f"Our password policy requires {rnd.randint(10, 20)} characters.",
        lambda: f"Deploys happen every {rnd.choice(['Monday', 'Tuesday', 'Friday'])} at 10:30.",
        lambda: f"Budget: {rnd.randint(100, 9000)} tokens per run.",
        lambda: "We use sk-learn for the baseline model.",
        lambda: f"Timezone: {rnd.choice(['Europe/Paris', 'UTC', 'Asia/Tokyo'])}",
        lambda: f"max_tokens should stay at {rnd.choice([1024, 2048, 4096])}.",
    ]
    corpus = [(make(), True) for make in secrets for _ in range(4)]
    corpus += [(make(), False) for make in benign for _ in range(4)]
    return corpus


def test_labelled_corpus_precision_and_recall() -> None:
    corpus = labelled_corpus()
    assert len(corpus) >= 100
    true_positive = false_positive = false_negative = 0
    mistakes = []
    for content, expected in corpus:
        actual = looks_like_secret(content)
        true_positive += actual and expected
        false_positive += actual and not expected
        false_negative += expected and not actual
        if actual != expected:
            mistakes.append(content)
    precision = true_positive / max(1, true_positive + false_positive)
    recall = true_positive / max(1, true_positive + false_negative)
    assert precision >= 0.99, mistakes
    assert recall >= 0.99, mistakes
