"""Monotonic counters stored in the database so every process (web, worker, beat) shares them."""

from __future__ import annotations

from collections.abc import Iterable

from django.db import IntegrityError, transaction

from memory.models import Counter
from memory.sql import counters_add_statement as add_statement
from memory.sql import prepared_cursor


def _add(amounts: dict[str, int]) -> int:
    """``value += amount`` for each named counter in one statement; returns how many rows existed."""
    with prepared_cursor(transaction.get_connection().alias) as cursor:  # planned once per connection
        cursor.execute(*add_statement(amounts))
        return cursor.rowcount


def create_missing(amounts: dict[str, int]) -> None:
    """Create the counters of ``amounts`` that do not exist yet, at their amount (first use)."""
    present = set(Counter.objects.filter(name__in=list(amounts)).values_list("name", flat=True))
    for name in set(amounts) - present:
        try:
            with transaction.atomic():
                Counter.objects.create(name=name, value=amounts[name])
        except IntegrityError:  # created concurrently
            _add({name: amounts[name]})


def increment(name: str, amount: int = 1) -> None:
    increment_many({name: amount})


def increment_many(amounts: dict[str, int]) -> None:
    """Several counters in one statement (the hot paths bump two or three at once). Counters are created on
    first use; the hot path is a single hand-written UPDATE."""
    amounts = {name: amount for name, amount in amounts.items() if amount > 0}
    if amounts and _add(amounts) < len(amounts):
        create_missing(amounts)


def increment_many_with(amounts: dict[str, int], statement: str, params: list) -> None:
    """``increment_many(amounts)`` and ``statement`` (a data-modifying statement, such as
    ``memory.sql.update_statement``'s) in one round trip: the counters' UPDATE is a data-modifying CTE of it.
    Counters that do not exist yet are created after it, as :func:`increment_many` creates them."""
    amounts = {name: amount for name, amount in amounts.items() if amount > 0}
    with prepared_cursor(transaction.get_connection().alias) as cursor:  # planned once per connection
        if not amounts:
            cursor.execute(statement, params)
            return
        add_sql, add_params = add_statement(amounts)
        cursor.execute(
            f"WITH counted AS ({add_sql} RETURNING 1), changed AS ({statement}) SELECT count(*) FROM counted",  # noqa: S608 - statements built here
            [*add_params, *params],
        )
        existing = cursor.fetchone()[0]
    if existing < len(amounts):
        create_missing(amounts)


def read(names: Iterable[str]) -> dict[str, int]:
    names = list(names)
    found = dict(Counter.objects.filter(name__in=names).values_list("name", "value"))
    return {name: int(found.get(name, 0)) for name in names}


def read_prefix(prefix: str) -> dict[str, int]:
    return dict(Counter.objects.filter(name__startswith=prefix).values_list("name", "value"))
