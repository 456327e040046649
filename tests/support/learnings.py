"""Builders shared by the learning-plane tests (and the skills/console tests that need learnings): candidates
and learnings made through the services (so they carry keys, audit rows and the review queue as in
production), the learning policy, and a terminal run."""

from __future__ import annotations

from learnings import services
from learnings.models import Learning, LearningCandidate
from learnings.services.cleaning import semantic_key_digests
from learnings.validation import LearningScope
from memory import embedding
from memory.clock import now_ms
from memory.models import Run, Session
from memory.runs import RunInput, run_complete, run_open, run_start

WORKSPACE = ("workspace", "default")


def candidate(content="The project codename is Atlas.", *, kind="fact", scope=WORKSPACE, **extra) -> LearningCandidate:
    return services.candidate_create(actor="tests", scope=LearningScope(*scope), kind=kind, content=content, **extra)


def learning(
    content="The project codename is Atlas.",
    *,
    kind="fact",
    scope=WORKSPACE,
    tier="active",
    decision="manual",
    verification="unverified",
    candidate_extra=None,
    **edits,
) -> Learning:
    cand = candidate(content, kind=kind, scope=scope, **(candidate_extra or {}))
    governance = services.Governance(publish_tier=tier, policy_decision=decision, verification_status=verification)
    return services.candidate_publish(
        candidate=cand, actor="tests", options=services.PublishOptions.automated(governance, **edits)
    )


def set_policy(policy: dict, actor="tests"):
    return services.set_policy({"policy": policy}, actor=actor)


def terminal_run(session: Session, content="Preference: keep answers short.") -> Run:
    run, _ = run_open(session=session, run_input=RunInput(content=content, attachments=[], metadata={}))
    run = run_start(run=run)
    return run_complete(run=run, output="Done.")


def bulk_learnings(scope_id: str, texts: list[str]) -> list[Learning]:
    """Active project facts with their keys and embeddings, unsaved, for ``bulk_create``: the many rows a recall
    statement test needs, without the services' per-row cost (the first text is the newest)."""
    ts = now_ms()
    rows = []
    for i, (text, vector) in enumerate(zip(texts, embedding.embed_many(texts), strict=True)):
        content_key, subject_key = semantic_key_digests(text)
        rows.append(
            Learning(
                scope_kind="project",
                scope_id=scope_id,
                scope_key=f"project:{scope_id}",
                kind="fact",
                content=text,
                confidence=90,
                content_key=content_key,
                subject_key=subject_key,
                created_at_ms=ts,
                published_at_ms=ts - i,
                updated_at_ms=ts,
                status="active",
                publish_tier="active",
                policy_decision="manual",
                policy_actor="operator",
                verification_status="unverified",
                embedding=[round(float(x), 6) for x in vector],
            )
        )
    return rows
