"""The kheish app's one table: the shared request counters behind the throttles (``kheish.counters``)."""

from __future__ import annotations

from django.db import models


class RateCounter(models.Model):
    """One fixed-window count (``kheish:throttle:<scope>:<principal>:<period>:<window>``), shared by every
    worker and node that uses the database. Written only through ``kheish.counters.DatabaseCounterCache``;
    the table is UNLOGGED (see the migration): counts are not worth a WAL record, and a crash that empties
    the table only forgives the current windows."""

    key = models.CharField(max_length=255, primary_key=True)
    value = models.BigIntegerField()
    expires = models.DateTimeField(db_index=True)

    class Meta:
        db_table = "kheish_rate_counter"

    def __str__(self) -> str:
        return f"{self.key} = {self.value}"
