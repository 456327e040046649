"""Promoted procedural skills (spec §1.8): the record, its lifecycle events and its history snapshots.

The record is the authority over the files mounted under the skill root. One row per skill name: a revoked
record keeps its name (and its audit trail); promoting the name again turns the same row into a fresh draft,
after snapshotting the revoked state. Lifecycle events and history snapshots are rows, never edited.
"""

from __future__ import annotations

from django.db import models
from django.db.models import Q

from memory import public_ids
from memory.clock import now_ms
from skills.fingerprint import NAME_MAX_CHARS, SkillDefinition, SkillRuntime
from skills.vocabulary import LADDER as LADDER  # re-exported (skills.admin)
from skills.vocabulary import LifecycleEventKind, RolloutKind, SkillStatus, SkillVerificationStatus


def _choices_check(field: str, choices: type[models.TextChoices], name: str) -> models.CheckConstraint:
    return models.CheckConstraint(condition=Q(**{f"{field}__in": choices.values}), name=name)


class LearningSkill(models.Model):
    """LearningSkillView: one procedure learning promoted into a reusable skill."""

    skill_name = models.CharField(max_length=NAME_MAX_CHARS, unique=True)
    source_learning = models.ForeignKey("learnings.Learning", on_delete=models.PROTECT, related_name="promoted_skills")
    source_scope = models.JSONField(default=dict, help_text="The source learning's scope {kind, id}.")
    status = models.CharField(max_length=16, choices=SkillStatus.choices, default=SkillStatus.DRAFT)
    description = models.TextField()
    when_to_use = models.TextField(null=True, blank=True)
    version = models.CharField(max_length=64, null=True, blank=True)
    instructions = models.TextField()
    runtime = models.JSONField(default=dict, help_text="SkillRuntimeConfig")
    definition_fingerprint = models.CharField(max_length=64)
    skill_path = models.TextField(blank=True, default="")
    skill_root = models.TextField(blank=True, default="")
    digest = models.CharField(max_length=64, blank=True, default="")
    evidence_refs = models.JSONField(default=list, blank=True)
    verification_status = models.CharField(
        max_length=16, choices=SkillVerificationStatus.choices, default=SkillVerificationStatus.UNVERIFIED
    )
    successful_run_count = models.PositiveIntegerField(default=0)
    distinct_session_count = models.PositiveIntegerField(default=0)
    evidence_session_ids = models.JSONField(
        default=list, blank=True, help_text="Sessions of successful evidence runs (distinct count)."
    )
    verifier_run_ids = models.JSONField(
        default=list, blank=True, help_text="Every run recorded as rollout evidence for this definition."
    )
    real_daemon_verified = models.BooleanField(default=False)
    last_verified_workspace_digest = models.CharField(max_length=64, null=True, blank=True)
    canary_success_count = models.PositiveIntegerField(default=0)
    canary_failure_count = models.PositiveIntegerField(default=0)
    promoted_at_ms = models.BigIntegerField(default=now_ms)
    updated_at_ms = models.BigIntegerField(default=now_ms)
    revoked_at_ms = models.BigIntegerField(null=True, blank=True)
    revoked_reason = models.TextField(null=True, blank=True)

    class Meta:
        ordering = ["skill_name"]
        verbose_name = "promoted skill"
        constraints = [
            _choices_check("status", SkillStatus, "learningskill_status_valid"),
            _choices_check("verification_status", SkillVerificationStatus, "learningskill_verification_valid"),
            # One live (non-revoked) skill per learning.
            models.UniqueConstraint(
                fields=["source_learning"],
                condition=~Q(status=SkillStatus.REVOKED),
                name="learningskill_one_live_per_learning",
            ),
            models.CheckConstraint(
                condition=~Q(status=SkillStatus.REVOKED) | Q(revoked_at_ms__isnull=False),
                name="learningskill_revoked_has_time",
            ),
            # An active skill has passed every gate of the ladder.
            models.CheckConstraint(
                condition=~Q(status=SkillStatus.ACTIVE)
                | (
                    Q(verification_status=SkillVerificationStatus.VERIFIED)
                    & Q(real_daemon_verified=True)
                    & Q(successful_run_count__gte=1)
                    & Q(canary_success_count__gte=1)
                    & Q(canary_failure_count=0)
                ),
                name="learningskill_active_gates",
            ),
        ]
        indexes = [models.Index(fields=["status", "skill_name"], name="learningskill_status_idx")]

    def __str__(self) -> str:
        return self.skill_name

    @property
    def source_learning_public_id(self) -> str:
        """``learning-N`` (also the name of the mount directory)."""
        return public_ids.learning_id(self.source_learning_id)

    @property
    def source_scope_key(self) -> str:
        scope = self.source_scope or {}
        return f"{scope.get('kind', '')}:{str(scope.get('id', '')).strip()}"

    @property
    def definition(self) -> SkillDefinition:
        return SkillDefinition(
            name=self.skill_name,
            description=self.description,
            when_to_use=self.when_to_use,
            version=self.version,
            instructions=self.instructions,
            runtime=SkillRuntime.from_dict(self.runtime),
        )

    @property
    def is_active(self) -> bool:
        return self.status == SkillStatus.ACTIVE


class LearningSkillEvent(models.Model):
    """LearningSkillLifecycleEvent: promote / rollout_result / revoke / rollback, append-only."""

    skill = models.ForeignKey(LearningSkill, on_delete=models.PROTECT, related_name="lifecycle_events")
    event = models.CharField(max_length=20, choices=LifecycleEventKind.choices)
    recorded_at_ms = models.BigIntegerField(default=now_ms)
    from_status = models.CharField(max_length=16, choices=SkillStatus.choices, null=True, blank=True)
    to_status = models.CharField(max_length=16, choices=SkillStatus.choices)
    rollout_kind = models.CharField(max_length=16, choices=RolloutKind.choices, null=True, blank=True)
    run_id = models.CharField(max_length=40, null=True, blank=True)
    session_id = models.CharField(max_length=40, null=True, blank=True)
    success = models.BooleanField(null=True, blank=True)
    definition_fingerprint = models.CharField(max_length=64, null=True, blank=True)
    reason = models.TextField(null=True, blank=True)
    actor = models.CharField(max_length=150, blank=True, default="")

    class Meta:
        ordering = ["skill_id", "recorded_at_ms", "id"]
        verbose_name = "lifecycle event"
        constraints = [_choices_check("event", LifecycleEventKind, "learningskillevent_event_valid")]
        indexes = [models.Index(fields=["skill", "recorded_at_ms", "id"], name="learningskillevent_skill_idx")]

    def __str__(self) -> str:
        return f"{self.event} {self.from_status or '∅'}→{self.to_status}"

    def to_view(self) -> dict:
        view: dict = {"event": self.event, "recorded_at_ms": self.recorded_at_ms}
        if self.from_status is not None:
            view["from_status"] = self.from_status
        view["to_status"] = self.to_status
        for name in ("rollout_kind", "run_id", "session_id", "success", "definition_fingerprint", "reason"):
            value = getattr(self, name)
            if value is not None:
                view[name] = value
        return view


class LearningSkillSnapshot(models.Model):
    """A history snapshot: the whole record as it was just before an update (what rollback restores)."""

    skill = models.ForeignKey(LearningSkill, on_delete=models.PROTECT, related_name="history")
    recorded_at_ms = models.BigIntegerField(default=now_ms)
    status = models.CharField(max_length=16, choices=SkillStatus.choices)
    record = models.JSONField()
    record_digest = models.CharField(max_length=16, help_text="First 16 hex of the SHA-256 of the record JSON.")

    class Meta:
        ordering = ["skill_id", "-recorded_at_ms", "-id"]
        verbose_name = "history snapshot"
        indexes = [
            models.Index(fields=["skill", "status", "-recorded_at_ms", "-id"], name="learningskillsnap_skill_idx")
        ]

    def __str__(self) -> str:
        return f"{self.recorded_at_ms:020d}-{self.status}-{self.record_digest}"
