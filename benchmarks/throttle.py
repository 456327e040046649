"""What the per-principal request ceiling costs on the request path, by where it counts (issue 22.6).

* ``throttle.count.<store>``: one count (what ``PrincipalRateThrottle.allow_request`` does per request) in
  the store: ``database`` (``kheish.counters``: one upsert in an UNLOGGED table), ``locmem`` (per gunicorn
  worker: not shared, the floor) and ``redis`` (when ``KHEISH_BENCH_REDIS_URL``, default
  ``redis://127.0.0.1:6379/15``, answers; a key prefix of this run's own, deleted after).
* ``throttle.request.<store>``: ``GET /v1/sessions`` through the in-process test client with the ceiling
  counted there, so the difference between the rows is the store's share of a whole request.
"""

from __future__ import annotations

import os
import uuid

from django.core.cache import caches
from django.core.cache.backends.locmem import LocMemCache
from django.test import Client

from benchmarks.harness import Results, time_calls
from kheish import counters

CALLS = 2000
REQUESTS = 300


def _count(cache, key: str) -> None:
    hit = getattr(cache, "hit", None)
    if hit is not None:
        hit(key, timeout=61)
    elif not cache.add(key, 1, timeout=61):
        cache.incr(key)


def _stores() -> dict[str, object]:
    stores: dict[str, object] = {
        "database": counters.DatabaseCounterCache(None, {}),
        "locmem": LocMemCache(f"bench-{uuid.uuid4().hex}", {}),
    }
    url = os.environ.get("KHEISH_BENCH_REDIS_URL", "redis://127.0.0.1:6379/15")
    try:
        from django.core.cache.backends.redis import RedisCache

        prefix = f"kheish-bench-{uuid.uuid4().hex[:8]}"
        redis_cache = RedisCache(url, {"KEY_PREFIX": prefix})
        redis_cache.set("ping", 1, timeout=5)
        redis_cache.bench_cleanup = lambda: _delete_prefix(url, prefix)
        stores["redis"] = redis_cache
    except Exception as exc:  # noqa: BLE001 - no Redis here: that row is left out
        print(f"  (no Redis at {url}: {type(exc).__name__}; the redis rows are left out)")
    return stores


def _delete_prefix(url: str, prefix: str) -> None:
    """Only this run's keys: the database may be shared with tests (never ``clear()``, a FLUSHDB)."""
    import redis

    client = redis.Redis.from_url(url)
    for key in client.scan_iter(match=f"{prefix}*"):
        client.delete(key)


def run(results: Results, *, scale: int = 1) -> None:
    from memory.identity import api_key_create

    calls, requests = CALLS // scale, REQUESTS // scale
    stores = _stores()
    for name, cache in stores.items():
        samples = time_calls(lambda i, c=cache, n=name: _count(c, f"kheish:throttle:agent:{n}:60:{i % 7}"), calls)
        results.latency(f"throttle.count.{name}", samples, f"{calls} counts, 7 keys")

    key = api_key_create(name="bench-throttle", role="agent", actor="bench").plaintext
    client = Client(HTTP_AUTHORIZATION=f"Bearer {key}")
    saved = caches["throttle"]
    try:
        for name, cache in stores.items():
            caches["throttle"] = cache
            samples = time_calls(lambda i: client.get("/v1/sessions?limit=1"), requests)
            results.latency(f"throttle.request.{name}", samples, f"{requests} GET /v1/sessions, 1 principal")
    finally:
        caches["throttle"] = saved
        for cache in stores.values():
            getattr(cache, "bench_cleanup", cache.clear)()
