"""Plane 3 records: learning candidates (proposals) and learnings (published, governed knowledge).

Spec §1.4–§1.6. Public ids keep the reference formats (``learning-candidate-N``, ``learning-N``). The
consistency rules of §1.6 are database constraints; every write goes through ``learnings.services``.

``content_key`` / ``subject_key`` are SHA-256 digests of the §4.13 semantic keys (the keys themselves can be
as long as the content, too long for a B-tree entry); equal digests mean equal keys.
"""

from __future__ import annotations

import hashlib

from django.conf import settings
from django.contrib.postgres.fields import ArrayField
from django.db import models
from django.db.models import Q
from django.db.models.functions import Length
from django.db.models.lookups import LessThanOrEqual

from learnings import gate
from learnings.querysets import LearningCandidateQuerySet, LearningQuerySet
from learnings.speakers import without_label
from learnings.validation import MAX_CONTENT_CHARS
from learnings.vocabulary import (
    CANDIDATE_ID,
    LEARNING_ID,
    LIVE_STATUSES,
    CandidateOrigin,
    CandidateState,
    LearningKind,
    LearningStatus,
    PolicyDecision,
    PublishTier,
    ScopeKind,
    Sensitivity,
    VerificationStatus,
)
from memory import public_ids
from memory.clock import now_ms
from memory.embedding import DIMENSIONS as EMBEDDING_DIMENSIONS
from memory.embedding import embed

CANDIDATE_PREFIX = CANDIDATE_ID
LEARNING_PREFIX = LEARNING_ID


def key_digest(key: str | None) -> str:
    """The stored form of a semantic key ("" for no key)."""
    if not key:
        return ""
    return hashlib.sha256(key.encode("utf-8")).hexdigest()


def _choices_check(field: str, choices: type[models.TextChoices], name: str) -> models.CheckConstraint:
    return models.CheckConstraint(condition=Q(**{f"{field}__in": choices.values}), name=name)


class ScopedRecord(models.Model):
    """Fields shared by candidates and learnings."""

    scope_kind = models.CharField(max_length=16, choices=ScopeKind.choices)
    scope_id = models.CharField(max_length=200)
    scope_key = models.CharField(max_length=220, editable=False)
    kind = models.CharField(max_length=16, choices=LearningKind.choices)
    sensitivity = models.CharField(max_length=16, choices=Sensitivity.choices, default=Sensitivity.SCOPED)
    content = models.TextField()
    confidence = models.PositiveSmallIntegerField(default=80)
    source = models.JSONField(default=dict, blank=True, help_text="LearningSourceRef")
    source_run = models.ForeignKey(
        "memory.Run",
        on_delete=models.SET_NULL,
        null=True,
        blank=True,
        related_name="+",
        help_text="The run it was captured from (or that its source names), when the service knows it.",
    )
    evidence_refs = models.JSONField(default=list, blank=True)
    content_key = models.CharField(max_length=64, blank=True, default="", editable=False)
    subject_key = models.CharField(max_length=64, blank=True, default="", editable=False)
    created_at_ms = models.BigIntegerField(default=now_ms)
    expires_at_ms = models.BigIntegerField(null=True, blank=True)
    updated_at_ms = models.BigIntegerField(default=now_ms, editable=False)
    stated_at_ms = models.BigIntegerField(
        null=True,
        blank=True,
        help_text="When the statement was made (epoch ms), e.g. the conversation turn's date; null: unknown, "
        "read as the record's creation/publication time.",
    )

    class Meta:
        abstract = True

    @property
    def scope(self) -> dict:
        return {"kind": self.scope_kind, "id": self.scope_id}

    def is_expired(self, at_ms: int | None = None) -> bool:
        return self.expires_at_ms is not None and self.expires_at_ms <= (now_ms() if at_ms is None else at_ms)

    @property
    def source_run_id_text(self) -> str | None:
        value = (self.source or {}).get("run_id")
        return value if isinstance(value, str) else None


def _scoped_constraints(prefix: str) -> list[models.BaseConstraint]:
    return [
        _choices_check("scope_kind", ScopeKind, f"{prefix}_scope_kind_valid"),
        _choices_check("kind", LearningKind, f"{prefix}_kind_valid"),
        _choices_check("sensitivity", Sensitivity, f"{prefix}_sensitivity_valid"),
        models.CheckConstraint(
            condition=~Q(scope_kind=ScopeKind.WORKSPACE) | Q(scope_id="default"),
            name=f"{prefix}_workspace_id_default",
        ),
        models.CheckConstraint(condition=~Q(scope_id=""), name=f"{prefix}_scope_id_required"),
        models.CheckConstraint(
            condition=Q(confidence__gte=0) & Q(confidence__lte=100), name=f"{prefix}_confidence_range"
        ),
        models.CheckConstraint(
            condition=LessThanOrEqual(Length("content"), MAX_CONTENT_CHARS), name=f"{prefix}_content_length"
        ),
        models.CheckConstraint(condition=~Q(content=""), name=f"{prefix}_content_required"),
    ]


class LearningCandidate(ScopedRecord):
    """A proposed learning, waiting for review (spec §1.5)."""

    origin = models.CharField(max_length=8, choices=CandidateOrigin.choices, default=CandidateOrigin.API)
    state = models.CharField(max_length=16, choices=CandidateState.choices, default=CandidateState.PENDING)
    automation_review = models.JSONField(null=True, blank=True)
    matched_rule_name = models.CharField(
        max_length=200,
        blank=True,
        default="",
        editable=False,
        help_text="automation_review.matched_rule_name, for filtering",
    )
    published_learning = models.ForeignKey(
        "Learning", on_delete=models.PROTECT, null=True, blank=True, related_name="published_candidates"
    )
    reviewed_policy_revision = models.IntegerField(
        null=True, blank=True, editable=False, help_text="Learning-policy revision of the last review"
    )
    review_lease_until_ms = models.BigIntegerField(null=True, blank=True, editable=False)
    external_id = models.CharField(
        max_length=200,
        blank=True,
        default="",
        help_text="The memory's id in the system it was imported from (manage.py import_memories); unique per "
        "scope, so importing the same file again adds nothing.",
    )
    screening = models.JSONField(
        null=True,
        blank=True,
        editable=False,
        help_text="The memory-poisoning screen's findings at write time (learnings.screening): "
        "{version, flagged, categories, findings: [{category, rule, excerpt}]}",
    )
    screen_flagged = models.BooleanField(
        default=False, editable=False, help_text="screening.flagged, for filtering and counting"
    )
    proposed_by = models.ForeignKey(
        settings.AUTH_USER_MODEL,
        on_delete=models.SET_NULL,
        null=True,
        blank=True,
        editable=False,
        related_name="+",
        help_text="Who proposed it: the API caller, or the owner of the session whose run it was captured from. "
        "Agents see only their own candidates.",
    )

    objects = LearningCandidateQuerySet.as_manager()

    class Meta:
        ordering = ["-id"]
        verbose_name = "learning candidate"
        constraints = [
            *_scoped_constraints("candidate"),
            _choices_check("origin", CandidateOrigin, "candidate_origin_valid"),
            _choices_check("state", CandidateState, "candidate_state_valid"),
            models.CheckConstraint(
                condition=~Q(kind=LearningKind.RUN_SUMMARY) | Q(origin=CandidateOrigin.DAEMON),
                name="candidate_run_summary_daemon_owned",
            ),
            models.CheckConstraint(
                condition=~Q(state=CandidateState.PUBLISHED) | Q(published_learning__isnull=False),
                name="candidate_published_has_learning",
            ),
            models.UniqueConstraint(
                fields=["source_run"],
                condition=Q(kind=LearningKind.RUN_SUMMARY),
                name="candidate_one_run_summary_per_run",
            ),
            models.UniqueConstraint(
                fields=["scope_key", "external_id"],
                condition=~Q(external_id=""),
                name="candidate_external_id_per_scope",
            ),
            models.UniqueConstraint(
                fields=["source_run", "scope_key", "kind", "content_key"],
                condition=Q(origin=CandidateOrigin.DAEMON) & Q(source_run__isnull=False),
                name="candidate_daemon_dedup",
            ),
        ]
        indexes = [
            models.Index(fields=["state", "-id"], name="candidate_state_idx"),
            models.Index(fields=["scope_key", "state"], name="candidate_scope_idx"),
            models.Index(fields=["matched_rule_name"], name="candidate_rule_idx"),
            models.Index(fields=["state"], condition=Q(screen_flagged=True), name="candidate_flagged_idx"),
        ]

    def __str__(self) -> str:
        return self.public_id

    @property
    def public_id(self) -> str:
        return public_ids.format_id(CANDIDATE_ID, self.pk)

    @property
    def review_reason(self) -> str:
        """What the review queue shows: the judge's reason when a judge ran, else the rule-level reason."""
        review = self.automation_review or {}
        judge = review.get("judge") or {}
        if judge.get("reason"):
            return f"Judge: {judge['reason']}"
        return review.get("reason") or ""


class Learning(ScopedRecord):
    """A published learning (spec §1.6)."""

    source_candidate = models.OneToOneField(
        LearningCandidate, on_delete=models.PROTECT, null=True, blank=True, related_name="source_of"
    )
    published_at_ms = models.BigIntegerField(default=now_ms)
    status = models.CharField(max_length=16, choices=LearningStatus.choices, default=LearningStatus.ACTIVE)
    publish_tier = models.CharField(max_length=16, choices=PublishTier.choices, default=PublishTier.ACTIVE)
    policy_decision = models.CharField(max_length=16, choices=PolicyDecision.choices, null=True, blank=True)
    policy_actor = models.CharField(max_length=150, null=True, blank=True)
    verification_status = models.CharField(
        max_length=16, choices=VerificationStatus.choices, default=VerificationStatus.UNVERIFIED
    )
    supersedes = models.ForeignKey("self", on_delete=models.PROTECT, null=True, blank=True, related_name="replacements")
    superseded_by = models.ForeignKey("self", on_delete=models.PROTECT, null=True, blank=True, related_name="+")
    revoked_at_ms = models.BigIntegerField(null=True, blank=True)
    revoked_reason = models.TextField(null=True, blank=True)
    embedding = ArrayField(models.FloatField(), size=EMBEDDING_DIMENSIONS, null=True, blank=True, editable=False)
    """The content's sentence embedding (``memory.embedding``), derived on save like a slug; the migration adds
    a generated pgvector column (HNSW-indexed) from it where the extension exists, and a generated full-text
    vector (GIN-indexed) from the content (``learnings.recall_sql``)."""

    objects = LearningQuerySet.as_manager()

    class Meta:
        ordering = ["-id"]
        constraints = [
            *_scoped_constraints("learning"),
            _choices_check("status", LearningStatus, "learning_status_valid"),
            _choices_check("publish_tier", PublishTier, "learning_tier_valid"),
            _choices_check("verification_status", VerificationStatus, "learning_verification_valid"),
            models.CheckConstraint(
                condition=Q(policy_decision__isnull=True) | Q(policy_decision__in=PolicyDecision.values),
                name="learning_decision_valid",
            ),
            models.CheckConstraint(
                condition=~Q(status=LearningStatus.PROVISIONAL) | Q(publish_tier=PublishTier.PROVISIONAL),
                name="learning_provisional_tier",
            ),
            models.CheckConstraint(
                condition=~Q(status=LearningStatus.ACTIVE) | Q(publish_tier=PublishTier.ACTIVE),
                name="learning_active_tier",
            ),
            models.CheckConstraint(
                condition=~(Q(status=LearningStatus.ACTIVE) & Q(verification_status=VerificationStatus.FAILED)),
                name="learning_active_not_failed",
            ),
            models.CheckConstraint(
                condition=Q(policy_decision__isnull=True) | (Q(policy_actor__isnull=False) & ~Q(policy_actor="")),
                name="learning_policy_actor_required",
            ),
            models.CheckConstraint(
                condition=~Q(status=LearningStatus.REVOKED) | Q(revoked_at_ms__isnull=False),
                name="learning_revoked_has_time",
            ),
            models.CheckConstraint(
                condition=~Q(status=LearningStatus.SUPERSEDED) | Q(superseded_by__isnull=False),
                name="learning_superseded_has_replacement",
            ),
            models.CheckConstraint(condition=~Q(supersedes=models.F("id")), name="learning_not_self_superseding"),
        ]
        indexes = [
            models.Index(
                fields=["scope_key", "-published_at_ms"],
                condition=Q(status__in=LIVE_STATUSES),
                name="learning_live_scope_idx",
            ),
            models.Index(fields=["scope_key", "kind", "content_key"], name="learning_content_key_idx"),
            models.Index(fields=["scope_key", "kind", "subject_key"], name="learning_subject_key_idx"),
            models.Index(fields=["status", "-id"], name="learning_status_idx"),
        ]

    def __str__(self) -> str:
        return self.public_id

    def save(self, *args, **kwargs) -> None:
        """Fill the derived embedding when a learning is written without one (publish, supersede)."""
        if self.derive_embedding() and kwargs.get("update_fields") is not None:
            kwargs["update_fields"] = {*kwargs["update_fields"], "embedding"}
        super().save(*args, **kwargs)

    def derive_embedding(self) -> bool:
        """Fill the embedding from the content (without its speaker label) when there is none; whether it did.
        What ``save`` does first, for the paths that insert without ``save`` (``memory.sql.insert``)."""
        if self.embedding is None and self.content:
            self.embedding = embed(without_label(self.content))
            return True
        return False

    @property
    def public_id(self) -> str:
        return public_ids.format_id(LEARNING_ID, self.pk)

    @property
    def is_prompt_visible(self) -> bool:
        """§4.7 ``learning_is_prompt_visible`` (``learnings.gate.PROMPT_VISIBLE``; kind eligibility and expiry are
        separate gates)."""
        return gate.is_prompt_visible(self, 0)

    @property
    def is_prompt_eligible(self) -> bool:
        """The record's own prompt gates (``learnings.gate.PROMPT_ELIGIBLE``: kind, prompt-visible, unexpired)."""
        return gate.is_prompt_eligible(self, now_ms())
