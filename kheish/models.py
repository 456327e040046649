"""The one table of the composition layer: the embedded broker's messages (``kheish.broker``)."""

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
