"""Issue 22.6: the per-principal request ceiling counts once for every gunicorn worker and node by default.

The ``throttle`` cache is ``kheish.counters.DatabaseCounterCache`` unless configured otherwise: each count is
one atomic statement in PostgreSQL, so concurrent sessions (workers, nodes) never lose or repeat a count.
The service-level proof (two gunicorn workers, one ceiling) is in ``test_node_supervision.py``.
"""

from __future__ import annotations

import threading

import pytest
from django.core.cache import caches
from django.db import connection

from kheish import counters
from kheish.api.throttling import PrincipalRateThrottle

pytestmark = pytest.mark.django_db


def test_the_default_throttle_cache_is_shared_database_counters(settings):
    assert settings.CACHES["throttle"]["BACKEND"] == "kheish.counters.DatabaseCounterCache"
    assert PrincipalRateThrottle.cache_alias == "throttle"
    assert isinstance(caches["throttle"], counters.DatabaseCounterCache)


@pytest.mark.django_db(transaction=True)
def test_hits_from_concurrent_sessions_are_each_counted_once():
    cache = caches["throttle"]
    cache.clear()
    seen: list[int] = []
    lock = threading.Lock()
    errors: list[BaseException] = []

    def hammer() -> None:
        from django.db import connection as own  # each thread has a database session of its own

        try:
            mine = [cache.hit("k:shared", timeout=60) for _ in range(40)]
            with lock:
                seen.extend(mine)
        except BaseException as exc:  # noqa: BLE001
            errors.append(exc)
        finally:
            own.close()

    threads = [threading.Thread(target=hammer) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert not errors, errors
    assert sorted(seen) == list(range(1, 161))  # every count handed out once: none lost, none repeated
    assert cache.get("k:shared") == 160
    cache.clear()


def test_an_expired_window_starts_again_at_one():
    cache = caches["throttle"]
    assert cache.hit("k:w", timeout=0) == 1  # expires at once
    assert cache.hit("k:w", timeout=60) == 1
    assert cache.hit("k:w", timeout=60) == 2
    assert cache.get("k:w") == 2


def test_the_cache_api_keeps_djangos_semantics():
    cache = caches["throttle"]
    assert cache.add("a", 1, timeout=60) is True
    assert cache.add("a", 5, timeout=60) is False
    assert cache.incr("a", 2) == 3
    with pytest.raises(ValueError):
        cache.incr("missing")
    cache.set("b", 7, timeout=60)
    assert cache.get_many(["a", "b", "c"]) == {"a": 3, "b": 7}
    assert cache.has_key("b") and not cache.has_key("c")
    assert cache.touch("b", timeout=0) is True
    assert cache.get("b") is None and cache.get("b", 42) == 42
    assert cache.add("b", 1, timeout=60) is True  # an expired key can be added again
    assert cache.delete("a") is True and cache.get("a") is None
    with pytest.raises(TypeError):
        cache.set("s", "text")


def test_expired_rows_are_culled(monkeypatch):
    monkeypatch.setattr(counters, "CULL_EVERY", 1)
    cache = counters.DatabaseCounterCache(None, {})
    for n in range(5):
        cache.set(f"old:{n}", 1, timeout=0)
    cache.set("live", 1, timeout=60)
    with connection.cursor() as cursor:
        cursor.execute("SELECT key FROM kheish_rate_counter WHERE key LIKE %s", ["%old:%"])
        assert cursor.fetchall() == []
    assert cache.get("live") == 1
