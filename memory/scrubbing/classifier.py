"""Spec §4.19 ``learning_content_has_secret_material``: the learning-content secret classifier.

Used by the learning-candidate guard, skill metadata checks and revoke reasons (through ``looks_like_secret``).
"""

from __future__ import annotations

import re

_WORD_MARKERS = (
    "access token is", "access token:", "access token =", "api key is", "api key:", "api key =",
    "authorization bearer", "authorization: bearer", "bearer token is", "bearer token:", "bearer token =",
    "clientsecret:", "clientsecret =", "clientsecret is", "client secret is", "client secret:",
    "client secret =", "password is", "password:", "password =", "passphrase is", "passphrase:",
    "passphrase =", "private key is", "private key:", "private key =", "personal access token is",
    "personal access token:", "personal access token =", "refresh token is", "refresh token:",
    "refresh token =", "secret key is", "secret key:", "secret key =", "secret token is", "secret token:",
    "secret token =", "token is", "token:", "token =",
)  # fmt: skip
_SQUASHED_MARKERS = (
    "access_token=", "apikey=", "api_key=", "api-key:", "api-key=", "authorization:bearer", "bearer=",
    "clientsecret:", "clientsecret=", "client_secret=", "client-secret:", "client-secret=", "pat:", "pat=",
    "password=", "passphrase=", "personal_access_token=", "personal-access-token:",
    "personal-access-token=", "personalaccesstoken:", "personalaccesstoken=", "privatekey:", "privatekey=",
    "private_key=", "refresh_token=", "secret_key=", "secret_token=", "token=", "x-api-key:", "x-api-key=",
    "x_api_key=", "xapikey:", "xapikey=",
)  # fmt: skip
_SECRET_KEY_PHRASES = (
    ("access", "token"), ("api", "key"), ("x", "api", "key"), ("auth", "token"), ("bearer", "token"),
    ("client", "secret"), ("clientsecret",), ("password",), ("passphrase",), ("pat",),
    ("personal", "access", "token"), ("personalaccesstoken",), ("private", "key"), ("privatekey",),
    ("refresh", "token"), ("secret", "key"), ("secret", "token"), ("token",),
)  # fmt: skip
_NON_WORD = re.compile(r"[^\w]|_")


def _key_looks_secret(key: str) -> bool:
    words = _NON_WORD.sub(" ", key).split()
    if not words:
        return False
    return any(tuple(words[-len(phrase) :]) == phrase for phrase in _SECRET_KEY_PHRASES)


def _has_secret_assignment(lowered: str) -> bool:
    words = " ".join(lowered.split())
    if any(marker in words for marker in _WORD_MARKERS):
        return True
    squashed = "".join(lowered.split())
    if any(marker in squashed for marker in _SQUASHED_MARKERS):
        return True
    for line in lowered.split("\n"):
        for delimiter in (":", "="):
            key, found, value = line.partition(delimiter)
            if found and value.strip() and _key_looks_secret(key):
                return True
    return False
