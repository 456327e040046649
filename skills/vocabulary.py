"""The skills plane's vocabulary, written once (issue 21.1): skill statuses and the rollout ladder,
verification statuses, lifecycle event kinds and rollout kinds. ``skills.models`` re-exports them; the
transition table (``skills.services.rules``), the API and the console read them from here.
"""

from __future__ import annotations

from django.db import models


class SkillStatus(models.TextChoices):
    DRAFT = "draft"
    VERIFIED = "verified"
    CANARY = "canary"
    ACTIVE = "active"
    REVOKED = "revoked"


# The rollout ladder, in order (the admin stepper).
LADDER = (SkillStatus.DRAFT, SkillStatus.VERIFIED, SkillStatus.CANARY, SkillStatus.ACTIVE)


class SkillVerificationStatus(models.TextChoices):
    UNVERIFIED = "unverified"
    PENDING = "pending"
    VERIFIED = "verified"
    FAILED = "failed"


class LifecycleEventKind(models.TextChoices):
    PROMOTE = "promote"
    ROLLOUT_RESULT = "rollout_result"
    REVOKE = "revoke"
    ROLLBACK = "rollback"


class RolloutKind(models.TextChoices):
    VERIFICATION = "verification"
    CANARY = "canary"
