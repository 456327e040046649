"""Throttling for /v1 (issue 14.3): a request-rate cap per principal, and limits on authentication failures.

Two mechanisms, two caches, on purpose:

* ``PrincipalRateThrottle`` (a DRF throttle, in ``DEFAULT_THROTTLE_CLASSES``) caps how many requests one
  principal makes: ``KHEISH_THROTTLE_AGENT`` / ``KHEISH_THROTTLE_OPERATOR`` (``6000/m`` by default, 100 a
  second: a ceiling against a runaway client, never a busy agent's pace). It runs on every request and counts
  in the ``throttle`` cache (``KHEISH_THROTTLE_CACHE_URL``): by default PostgreSQL (``kheish.counters``: one
  atomic upsert, one count for every gunicorn worker and every node, taken by each process a lease of up to
  ``LEASE_MAX`` requests at a time far from the limit, one request at a time near it: ``_Leases``), Redis
  when ``KHEISH_CACHE_URL`` names it; local memory is an explicit choice (each worker then counts on its own).
* ``AuthFailureLimiter`` counts wrong API keys per client address and per key prefix in the ``auth_failures``
  cache (``KHEISH_AUTH_FAILURE_CACHE_URL``, by default Django's database cache: one count for every worker
  and process, kept across restarts). It is only touched when a key has already failed, so valid traffic
  never pays for it. Past a limit, failing requests get 429 (``Retry-After``) instead of 401, and the
  counter is only read, not written, until the window ends.

A valid key is never counted and never refused because of failures, whoever made them: not those of other
clients at its address (shared NAT, one host running many agents) and not wrong secrets sent with its own
prefix (prefixes appear in the admin and the audit log, so refusing the valid secret would let anyone who saw
one lock an agent out). Keys carry 192 random bits, so the limits are not what stops guessing; they bound the
work and the log noise a flood of bad credentials causes and tell a misconfigured client to back off.

Counts use fixed windows (``N/<period>``: ``100/5m`` is 100 per five minutes; units s, m, h, d); a window is
a cache key that expires with it, and ``Retry-After`` is the time left in it.
"""

from __future__ import annotations

import hashlib
import logging
import math
import re
import threading
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from django.conf import settings
from django.core.cache import caches
from django.db import DatabaseError
from rest_framework import exceptions, throttling

if TYPE_CHECKING:  # rest_framework.views imports this module (DEFAULT_THROTTLE_CLASSES): annotations only
    from django.http import HttpRequest
    from rest_framework.request import Request
    from rest_framework.views import APIView

logger = logging.getLogger("kheish.api")

UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400}
RATE_RE = re.compile(r"^\s*(\d+)\s*/\s*(\d*)\s*([smhd])[a-z]*\s*$", re.IGNORECASE)
PREFIX_RE = re.compile(r"^khm_[0-9a-f]{12}$")


@dataclass(frozen=True)
class Rate:
    limit: int
    period: int  # seconds

    def window(self, now: float) -> tuple[int, int]:
        """(index of the fixed window holding ``now``, whole seconds left in it, at least 1)."""
        index = int(now // self.period)
        left = math.ceil((index + 1) * self.period - now)
        return index, max(left, 1)


def parse_rate(value: str | None) -> Rate | None:
    """``"6000/m"`` → Rate(6000, 60); ``"100/5m"`` → Rate(100, 300); ``""``, ``"off"``, ``"none"`` → None."""
    if value is None or str(value).strip().lower() in {"", "off", "none", "0"}:
        return None
    match = RATE_RE.match(str(value))
    if not match:
        raise ValueError(f"rate {value!r}: expected N/<period>, e.g. 6000/m or 100/5m (units s, m, h, d)")
    count, multiple, unit = match.groups()
    period = int(multiple or 1) * UNITS[unit.lower()]
    if int(count) <= 0 or period <= 0:
        return None
    return Rate(int(count), period)


def client_address(request: HttpRequest | Request) -> str | None:
    """The address limits are counted against: the peer address of the connection (``REMOTE_ADDR``).

    Forwarded headers are not trusted (a client could name any address); the service binds loopback and a
    reverse proxy in front of it should be the one that limits per end client. Also axes' address
    (``AXES_CLIENT_IP_CALLABLE``), so one address means the same thing for API keys and admin sign-ins."""
    request = getattr(request, "_request", request)
    meta: dict[str, Any] = getattr(request, "META", None) or {}
    address: str = (meta.get("REMOTE_ADDR") or "").strip()
    return address or None


def _hashed(value: str) -> str:
    return hashlib.sha256(value.encode("utf-8", "surrogatepass")).hexdigest()[:32]


class Throttled(exceptions.Throttled):
    """A 429 with a code and domain of its own (the error handler renders it as problem+json)."""

    def __init__(self, wait: int, *, detail: str, code: str = "throttled", domain: str = "api"):
        super().__init__(wait=wait, detail=detail)
        self.problem_code = code
        self.problem_domain = domain


class AuthFailuresThrottled(Throttled):
    def __init__(self, wait: int, *, scope: str):
        what = "this client address" if scope == "address" else "this key prefix"
        # DRF appends "Expected available in N seconds."
        super().__init__(
            wait, code="too_many_auth_failures", domain="auth", detail=f"Too many failed authentications from {what}."
        )


class AuthFailureLimiter:
    """Counts failed API-key authentications per client address and per presented key prefix."""

    cache_alias = "auth_failures"

    def rates(self) -> dict[str, Rate | None]:
        return {
            "address": parse_rate(getattr(settings, "KHEISH_AUTH_FAILURES_PER_ADDRESS", "100/5m")),
            "prefix": parse_rate(getattr(settings, "KHEISH_AUTH_FAILURES_PER_PREFIX", "20/5m")),
        }

    def record_failure(self, request: HttpRequest | Request, presented: str) -> None:
        """Call after a credential failed. Raises AuthFailuresThrottled when a limit is exceeded, else returns
        (the caller then answers 401)."""
        now = time.time()
        idents = {"address": client_address(request) or "unknown"}
        prefix = presented.rsplit("_", 1)[0] if "_" in presented else ""
        if PREFIX_RE.match(prefix):
            idents["prefix"] = prefix
        windows: dict[str, tuple[str, Rate, int]] = {}
        for scope, rate in self.rates().items():
            if rate is None or scope not in idents:
                continue
            index, left = rate.window(now)
            key = f"kheish:authfail:{scope}:{_hashed(idents[scope])}:{rate.period}:{index}"
            windows[scope] = (key, rate, left)
        if not windows:
            return
        try:
            over = self._count(windows)
        except DatabaseError:  # e.g. the cache table was never made: the key is still refused (401)
            logger.exception("auth-failure counter unavailable (run `manage.py createcachetable`)")
            return
        if over is not None:
            raise AuthFailuresThrottled(over[0], scope=over[1])

    def _count(self, windows: dict[str, tuple[str, Rate, int]]) -> tuple[int, str] | None:
        """(seconds left, scope) of the limit this failure is over, else None (and the failure counted)."""
        cache = caches[self.cache_alias]
        counts = cache.get_many([key for key, _, _ in windows.values()])
        blocked = [(left, scope) for scope, (key, rate, left) in windows.items() if counts.get(key, 0) >= rate.limit]
        if blocked:  # already over: answer 429 without writing (a flood costs one read per request)
            return max(blocked)
        for scope, (key, rate, left) in windows.items():
            if counts.get(key) is None and cache.add(key, 1, timeout=left + 1):
                continue
            try:
                count = cache.incr(key)
            except ValueError:  # expired in between
                cache.add(key, 1, timeout=left + 1)
                continue
            if count > rate.limit:
                return left, scope
        return None


auth_failures = AuthFailureLimiter()


class PrincipalRateThrottle(throttling.BaseThrottle):
    """Requests per principal per window, by role: ``KHEISH_THROTTLE_AGENT``, ``KHEISH_THROTTLE_OPERATOR``.

    API-key callers count per key holder (the principal); session callers (an operator in the console)
    count as operators. Unauthenticated requests are not counted here: every /v1 view needs a principal, so
    they are refused before throttles run, and bad credentials are the AuthFailureLimiter's."""

    cache_alias = "throttle"
    leases: _Leases  # this process's (set below the class)

    def __init__(self) -> None:
        self._wait = 0

    def scope_for(self, request: Request) -> str | None:
        user = getattr(request, "user", None)
        if not getattr(user, "is_authenticated", False):
            return None
        role = getattr(getattr(request, "auth", None), "role", None)
        if role is None:
            role = "operator" if getattr(user, "is_staff", False) else "agent"
        return "operator" if role == "operator" else "agent"

    def allow_request(self, request: Request, view: APIView) -> bool:
        scope = self.scope_for(request)
        if scope is None:
            return True
        rate = parse_rate(getattr(settings, f"KHEISH_THROTTLE_{scope.upper()}", "6000/m"))
        if rate is None:
            return True
        index, left = rate.window(time.time())
        key = f"kheish:throttle:{scope}:{request.user.pk}:{rate.period}:{index}"
        cache = caches[self.cache_alias]
        hit = getattr(cache, "hit", None)  # kheish.counters: count in one statement
        if hit is not None:
            return self._allow_leased(hit, key, rate, left)
        # One cache operation per request once the window's counter exists (incr first; add only when it
        # does not yet): one round trip to a shared cache, one lock of local memory.
        try:
            count = cache.incr(key)
        except ValueError:  # the window's first request (or the counter expired): start it
            if cache.add(key, 1, timeout=left + 1):
                return True
            try:  # another worker started it in between
                count = cache.incr(key)
            except ValueError:
                return True
        if count > rate.limit:
            self._wait = left
            return False
        return True

    def _allow_leased(self, hit: Any, key: str, rate: Rate, left: int) -> bool:
        """The shared count, taken a lease at a time (``_LEASES``): most requests spend a token this process
        already counted, and only one in ``LEASE_MAX`` or so costs the upsert."""
        leases = self.leases
        if leases.take(key):
            return True
        block = leases.size_for(key, rate.limit)
        count = hit(key, timeout=left + 1, delta=block)
        before = count - block  # what every process had counted in this window before this lease
        if before >= rate.limit:
            leases.refused(key, count)
            self._wait = left
            return False
        leases.granted(key, min(block, rate.limit - before) - 1, count)
        return True

    def wait(self) -> float | None:
        return self._wait or None


LEASE_MAX = 16
"""The most requests one upsert of the shared counter counts for a process (``_Leases``)."""
LEASE_SHARE = 64
"""A lease is at most this fraction (1/64) of what the window has left, as last seen: near the limit every
request is counted on its own, exactly as without leases."""


class _Leases:
    """Per process: requests of a principal's current window already counted in the shared counter and not yet
    made (tokens), and the count that upsert returned. With the database counter (``kheish.counters``) a
    request used to cost one upsert; a process now counts ``size_for`` requests at once and spends them
    locally, so the counter's round trip is paid about once in ``LEASE_MAX`` requests.

    The cap holds exactly: a lease is never more than the window has left (``min(block, limit - before)``),
    so no more than ``limit`` requests are ever allowed in a window, across every worker and node. What a
    lease costs is tokens a process counted and did not use before its window ended - at most ``LEASE_MAX``
    per process, and only while more than ``LEASE_MAX * LEASE_SHARE`` requests are left in the window (the
    lease shrinks to one request as the count nears the limit) - so a principal spread over many processes
    can be refused a few requests before its count truly reaches the limit, never after. A window's key
    holds its index, so a new window starts with no tokens."""

    MAX_KEYS = 4096

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._held: dict[str, list[int]] = {}  # key -> [tokens, count last returned]

    def take(self, key: str) -> bool:
        with self._lock:
            entry = self._held.get(key)
            if entry is None or entry[0] <= 0:
                return False
            entry[0] -= 1
            return True

    def size_for(self, key: str, limit: int) -> int:
        """How many requests the next upsert counts: one while this process has not seen the window's count
        (its first request in the window), then a share of what was left."""
        with self._lock:
            entry = self._held.get(key)
        if entry is None:
            return 1
        return max(1, min(LEASE_MAX, (limit - entry[1]) // LEASE_SHARE))

    def granted(self, key: str, tokens: int, count: int) -> None:
        with self._lock:
            if len(self._held) >= self.MAX_KEYS and key not in self._held:
                self._held.clear()  # old windows' keys: a new window never reads them
            entry = self._held.setdefault(key, [0, count])
            entry[0] += tokens
            entry[1] = max(entry[1], count)

    def refused(self, key: str, count: int) -> None:
        self.granted(key, 0, count)

    def clear(self) -> None:
        with self._lock:
            self._held.clear()


PrincipalRateThrottle.leases = _Leases()
