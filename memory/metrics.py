"""Monotonic counters stored in the database so every process (web, worker, beat) shares them."""

from __future__ import annotations

from collections.abc import Iterable

from django.db import IntegrityError, transaction
from django.db.models import BigIntegerField, Case, F, Value, When

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


def increment_many(amounts: dict[str, int]) -> None:
    """Several counters in one statement (the hot paths bump two or three at once)."""
    amounts = {name: amount for name, amount in amounts.items() if amount > 0}
    if not amounts:
        return
    if len(amounts) == 1:
        increment(*next(iter(amounts.items())))
        return
    delta = Case(*[When(name=name, then=Value(amount)) for name, amount in amounts.items()],
                 default=Value(0), output_field=BigIntegerField())
    updated = Counter.objects.filter(name__in=list(amounts)).update(value=F("value") + delta)
    if updated < len(amounts):
        present = set(Counter.objects.filter(name__in=list(amounts)).values_list("name", flat=True))
        for name in set(amounts) - present:
            increment(name, amounts[name])


def read(names: Iterable[str]) -> dict[str, int]:
    names = list(names)
    found = dict(Counter.objects.filter(name__in=names).values_list("name", "value"))
    return {name: int(found.get(name, 0)) for name in names}


def read_prefix(prefix: str) -> dict[str, int]:
    return dict(Counter.objects.filter(name__startswith=prefix).values_list("name", "value"))
