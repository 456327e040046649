"""The bounded least-recently-used map every per-process cache keeps its entries in (``memory.lru``)."""

from __future__ import annotations

import pytest

from memory.lru import BoundedLRU


def test_least_recently_used_go_first():
    cache: BoundedLRU[str, str] = BoundedLRU(2)
    cache.put("a", "A")
    cache.put("b", "B")
    assert cache.get("a") == "A"  # a is now the most recent
    cache.put("c", "C")
    assert cache.get("b") is None and cache.get("a") == "A" and cache.get("c") == "C"
    assert len(cache) == 2


def test_many_at_once():
    cache: BoundedLRU[int, str] = BoundedLRU(2)
    cache.put_many({1: "a", 2: "b"})
    cache.get_many([1])  # 1 used last: 2 goes first
    cache.put_many({3: "c"})
    assert cache.get_many([1, 2, 3]) == {1: "a", 3: "c"}
    cache.clear()
    assert cache.get_many([1, 3]) == {}


def test_put_unless_keeps_what_the_caller_says_stays():
    cache: BoundedLRU[str, int] = BoundedLRU(4)
    cache.put_unless("k", 5, lambda current: current > 5)  # nothing held: put
    cache.put_unless("k", 3, lambda current: current > 3)  # 5 stays
    assert cache.get("k") == 5
    cache.put_unless("k", 9, lambda current: current > 9)  # replaced
    assert cache.get("k") == 9


def test_a_size_below_one_is_refused():
    with pytest.raises(ValueError):
        BoundedLRU(0)
