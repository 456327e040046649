"""The composition layer's tables: the embedded broker's messages (``kheish.broker``) and the shared request
counters behind the throttle (``kheish.counters``)."""

from __future__ import annotations

from django.db import models
from django.db.models.functions import Now

from kheish import broker


class BrokerMessage(models.Model):
    """A Celery message queued through ``CELERY_BROKER_URL=database://``: here until acknowledged. Written and
    read only by ``kheish.broker`` (plain SQL through its own connection); the model owns the schema."""

    queue = models.CharField(max_length=200)
    priority = models.SmallIntegerField(default=0)
    payload = models.TextField(help_text="the kombu message, JSON")
    created_at = models.DateTimeField(db_default=Now())
    lease_until = models.DateTimeField(
        null=True,
        blank=True,
        help_text="set while a consumer holds the message (renewed while it lives); null or past: claimable",
    )
    owner = models.CharField(max_length=64, null=True, blank=True, help_text="the consumer channel holding it")
    deliveries = models.IntegerField(default=0, help_text="times claimed (more than 1: redelivered)")

    class Meta:
        db_table = broker.TABLE
        indexes = [models.Index(fields=["queue", "-priority", "id"], name="kheish_broker_claim_idx")]

    def __str__(self) -> str:
        return f"message {self.pk} on {self.queue}"


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
