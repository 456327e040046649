"""A bounded, thread-safe least-recently-used map: what a process keeps of values it would otherwise read
again on every request (each user says what the key must capture for a value to stay true)."""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Callable, Hashable, Iterable, Mapping
from typing import Generic, TypeVar

K = TypeVar("K", bound=Hashable)
V = TypeVar("V")


class BoundedLRU(Generic[K, V]):
    """At most ``size`` entries; a lookup marks an entry used, and the least recently used go first."""

    def __init__(self, size: int) -> None:
        if size < 1:
            raise ValueError("size must be at least 1")
        self.size = size
        self._items: OrderedDict[K, V] = OrderedDict()
        self._lock = threading.Lock()

    def __len__(self) -> int:
        return len(self._items)

    def get(self, key: K) -> V | None:
        with self._lock:
            value = self._items.get(key)
            if value is not None:
                self._items.move_to_end(key)
            return value

    def put(self, key: K, value: V) -> None:
        self.put_many({key: value})

    def put_unless(self, key: K, value: V, keep: Callable[[V], bool]) -> None:
        """``put``, unless an entry is held for ``key`` and ``keep(entry)`` says it stays (one step, locked)."""
        with self._lock:
            current = self._items.get(key)
            if current is None or not keep(current):
                self._items[key] = value
            if key in self._items:
                self._items.move_to_end(key)
            while len(self._items) > self.size:
                self._items.popitem(last=False)

    def get_many(self, keys: Iterable[K]) -> dict[K, V]:
        """The entries held for these keys (missing keys are left out)."""
        with self._lock:
            found = {}
            for key in keys:
                value = self._items.get(key)
                if value is not None:
                    self._items.move_to_end(key)
                    found[key] = value
            return found

    def put_many(self, items: Mapping[K, V]) -> None:
        with self._lock:
            self._items.update(items)
            for key in items:
                self._items.move_to_end(key)
            while len(self._items) > self.size:
                self._items.popitem(last=False)

    def clear(self) -> None:
        with self._lock:
            self._items.clear()
