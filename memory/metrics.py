"""Monotonic counters stored in the database so every process (web, worker, beat) shares them."""

from __future__ import annotations

from collections.abc import Iterable

from django.db import IntegrityError, transaction
from django.db.models import F

from memory.models import Counter


def increment(name: str, amount: int = 1) -> None:
    if amount <= 0:
        return
    if Counter.objects.filter(name=name).update(value=F("value") + amount):
        return
    try:
        with transaction.atomic():
            Counter.objects.create(name=name, value=amount)
    except IntegrityError:
        Counter.objects.filter(name=name).update(value=F("value") + amount)


def read(names: Iterable[str]) -> dict[str, int]:
    names = list(names)
    found = dict(Counter.objects.filter(name__in=names).values_list("name", "value"))
    return {name: int(found.get(name, 0)) for name in names}


def read_prefix(prefix: str) -> dict[str, int]:
    return dict(Counter.objects.filter(name__startswith=prefix).values_list("name", "value"))
