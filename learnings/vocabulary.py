"""The learning plane's vocabulary, written once (issue 21.1): scope kinds, learning kinds, sensitivities,
candidate origins and states, learning statuses, publish tiers, policy decisions, verification statuses, the
groups of them the rules name, and the public ids of candidates and learnings.

The models' fields and check constraints, the serializers and the OpenAPI text, the list filters, validation,
the learning policy's JSON Schema, the prompt gate (``learnings.gate``) and the console all read these; none
keeps its own list. A new learning kind is one member of ``LearningKind`` here (plus ``PROMPT_KINDS`` if it may
reach a prompt) and the migration ``makemigrations`` then writes for the choices and constraints;
``tests/learnings/test_vocabulary.py`` shows it reaching the schema, the filters, the console and validation.

Plain data and Django's ``TextChoices`` only: no model, no database (``learnings.models`` re-exports these).
"""

from __future__ import annotations

from django.db import models

from memory import public_ids
from memory.vocabulary import listing as listing  # the words helper, shared by every plane


class ScopeKind(models.TextChoices):
    """Where a learning applies, narrowest first (the order is the §4.6 / §4.7 scope priority)."""

    SESSION = "session"
    PERSONA = "persona"
    PROJECT = "project"
    WORKSPACE = "workspace"


class LearningKind(models.TextChoices):
    RUN_SUMMARY = "run_summary", "Run summary"
    FACT = "fact"
    PREFERENCE = "preference"
    DECISION = "decision"
    PROCEDURE = "procedure"


class Sensitivity(models.TextChoices):
    SCOPED = "scoped"
    SENSITIVE = "sensitive"


class CandidateOrigin(models.TextChoices):
    # The wire values are the spec's (``api`` | ``daemon``); the labels are what an operator reads.
    API = "api", "Posted through the API"
    DAEMON = "daemon", "Captured from a run"


class CandidateState(models.TextChoices):
    PENDING = "pending"
    ESCALATED = "escalated"
    PUBLISHED = "published"
    REJECTED = "rejected"


class LearningStatus(models.TextChoices):
    PROVISIONAL = "provisional"
    ACTIVE = "active"
    SUPERSEDED = "superseded"
    REVOKED = "revoked"


class PublishTier(models.TextChoices):
    PROVISIONAL = "provisional"
    ACTIVE = "active"


class PolicyDecision(models.TextChoices):
    MANUAL = "manual"
    AUTOMATIC = "automatic"
    ESCALATED = "escalated"


class VerificationStatus(models.TextChoices):
    UNVERIFIED = "unverified"
    PENDING = "pending"
    VERIFIED = "verified"
    FAILED = "failed"


# ---- the groups the rules name ------------------------------------------------------------------------------

PROMPT_KINDS: tuple[str, ...] = (LearningKind.FACT, LearningKind.PREFERENCE, LearningKind.DECISION)
"""The semantic kinds: the only ones that may reach a prompt (§4.7), that carry semantic content/subject keys
(§4.13), that the secret classifier guards (§4.19) and that semantic capture drafts (§4.9, in this order)."""
SEMANTIC_KINDS = PROMPT_KINDS

CAPTURED_ONLY_KINDS: tuple[str, ...] = (LearningKind.RUN_SUMMARY,)
"""Written by the service only (one per run, §4.8): an API caller cannot propose one, and the review queue shows
them apart, as review material that never reaches a prompt."""

PROMOTABLE_KINDS: tuple[str, ...] = (LearningKind.PROCEDURE,)
"""The kinds a skill can be promoted from (``skills.services.rules``)."""

PROPOSABLE_KINDS: tuple[str, ...] = tuple(kind for kind in LearningKind.values if kind not in CAPTURED_ONLY_KINDS)
"""What ``POST /v1/learning-candidates`` accepts."""

LIVE_STATUSES: tuple[str, ...] = (LearningStatus.ACTIVE, LearningStatus.PROVISIONAL)
"""§4.7 visibility: the statuses a learning is visible (and can shadow another) in."""

REVIEW_STATES: tuple[str, ...] = (CandidateState.PENDING, CandidateState.ESCALATED)
"""Candidates still waiting for a decision."""

SCOPE_PRIORITY: dict[str, int] = {kind: rank for rank, kind in enumerate(ScopeKind.values)}
"""Narrowest scope first (§4.6, §4.7): session 0, persona 1, project 2, workspace 3."""

DEFAULT_WORKSPACE_SCOPE_ID = "default"

CANDIDATE_ID = public_ids.LEARNING_CANDIDATE
LEARNING_ID = public_ids.LEARNING
"""The public id prefixes (``learning-candidate-N``, ``learning-N``), formatted and parsed by ``memory.public_ids``."""

KIND_NOTES: dict[str, str] = {
    **{kind: "can reach a prompt" for kind in PROMPT_KINDS},
    **{kind: "promotable to a skill" for kind in PROMOTABLE_KINDS},
    **{kind: "written by capture only" for kind in CAPTURED_ONLY_KINDS},
}
SENSITIVITY_NOTES: dict[str, str] = {
    Sensitivity.SCOPED: "default",
    Sensitivity.SENSITIVE: "never in prompts or search",
}
TIER_NOTES: dict[str, str] = {
    PublishTier.ACTIVE: "reaches prompts; default",
    PublishTier.PROVISIONAL: "visible, not in prompts",
}


# ---- words ---------------------------------------------------------------------------------------------------


def kind_label(kind: str) -> str:
    """The kind as prose: ``run summary``, ``fact`` (an unknown value as it is)."""
    try:
        return str(LearningKind(kind).label).lower()
    except ValueError:
        return kind


def kind_plural(kind: str) -> str:
    """``run summaries``, ``facts``."""
    label = kind_label(kind)
    return label[:-1] + "ies" if label.endswith("y") else label + "s"
