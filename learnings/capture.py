"""Capture from a terminal run (spec §4.3 tail, §4.8, §4.9): the run_summary candidate and, for completed
runs, semantic candidates (heuristic labels first, else the model-backed extractor).

Exactly once per run: the run-memory record row is locked and its ``semantic_capture`` receipt checked; the
unique constraints on candidates back this up. An extraction failure leaves the receipt ``pending`` (the beat
job replays it, least-tried first); a run that did not complete marks it ``skipped``; while semantic capture is
turned off a ``pending`` receipt is left as it is, for when it is turned back on.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field

from django.db import transaction
from django.db.models import Exists, F, OuterRef

from learnings import extraction, policy_in_force, services, statements
from learnings.extraction import collapse_whitespace
from learnings.learning_policy import SemanticCaptureConfig
from learnings.models import CandidateOrigin, LearningCandidate, LearningKind
from memory import llm, metrics, run_memory
from memory.errors import AppError
from memory.models import TERMINAL_STATUSES, Run, RunMemoryRecord, RunStatus, SemanticCapture

logger = logging.getLogger(__name__)

REPLAY_BATCH = 100
CAPTURE_CHARS = 20_000
"""Semantic capture reads the run's whole input up to this many characters (scrubbed first: a secret across
the cut is removed whole), not the 160-character request preview: a labelled statement anywhere in it counts."""
SCRUB_MARGIN = 2_000


def capture_text(run: Run) -> str | None:
    """The run's request text (spec §4.1 step 1's source: input content or items), scrubbed as run memory
    scrubs (secrets always; PII when the run-memory policy redacts it), bounded by ``CAPTURE_CHARS``."""
    source = run_memory.request_text(run)
    if not source:
        return None
    from memory.scrubbing import scrub

    scrubbed = scrub(source[: CAPTURE_CHARS + SCRUB_MARGIN], redact_pii=run_memory.current_policy().redact_pii)
    return scrubbed.text[:CAPTURE_CHARS]


def input_attests(run_pk: int | None, content: str) -> bool:
    """Whether the run's own input (what capture read: ``capture_text``) holds ``content`` verbatim (whitespace
    collapsed; the first letter's case aside, as the extractor capitalises a clause it cuts out). A statement
    captured past the 160-character request preview is attested by the input it was read from."""
    needle = collapse_whitespace(content or "")
    if run_pk is None or len(needle) < 8:
        return False
    run = Run.objects.filter(pk=run_pk).select_related("session").first()
    text = capture_text(run) if run is not None else None
    if not text:
        return False
    text = collapse_whitespace(text)
    return needle in text or (needle[0].lower() + needle[1:]) in text


def draft_statements(text: str | None, max_candidates: int) -> list[extraction.Draft]:
    """Labelled statements (98) first; when there are none, the deterministic extractor's (below 98). The
    model extractor is asked only when both yield nothing."""
    drafts = extraction.heuristic_candidates(text, max_candidates)
    drafts = drafts or statements.extract(text, max_candidates)
    return [draft for draft in drafts if not _lost_to_scrubbing(draft.content)]


def _lost_to_scrubbing(content: str) -> bool:
    """A statement whose value the scrubber removed ("the deploy token is <redacted>") holds nothing worth
    remembering: it is not drafted (the canonical journal keeps what was said)."""
    return "<redacted" in content


@dataclass
class CaptureOutcome:
    run_id: str
    receipt: str
    run_summary_candidate_id: str | None = None
    created: list[str] = field(default_factory=list)
    error: str | None = None


def _run_view(run: Run, record: RunMemoryRecord) -> dict:
    return {
        "run_id": run.public_id,
        "session_id": run.session.public_id,
        "agent_id": run.session.owner.get_username(),
        "kind": run.kind,
        "status": run.status,
        "request_preview": record.request_preview,
        "outcome_preview": record.outcome_preview,
        "summary": record.summary,
        "failure_markers": list(record.failure_markers or []),
    }


def _model_drafts(config: SemanticCaptureConfig, run: Run, record: RunMemoryRecord) -> list[extraction.Draft]:
    """The model-backed extractor; no model configured → no drafts. Raises ModelError on failure."""
    model = config.model.generation.model if config.model and config.model.generation else None
    model_config = llm.model_config(model=model, timeout_ms=config.effective_timeout_ms)
    if model_config is None:
        return []
    limit = config.max_candidates_per_run
    payload = llm.chat_json(
        model_config,
        extraction.build_extraction_messages(_run_view(run, record), limit),
        schema=extraction.extraction_json_schema(limit, strict=False),
        schema_name="learning_extraction",
        strict=False,
    )
    return extraction.normalise_model_candidates(payload, limit)


def _set_receipt(record: RunMemoryRecord, receipt: str) -> None:
    RunMemoryRecord.objects.filter(pk=record.pk, semantic_capture=SemanticCapture.PENDING).update(
        semantic_capture=receipt
    )


def capture_run(run_pk: int) -> CaptureOutcome | None:
    """Capture everything a terminal run yields. Idempotent: a second delivery finds the receipt done and
    the run_summary candidate present, and creates nothing."""
    policy = policy_in_force.current_policy()
    with transaction.atomic():
        record = RunMemoryRecord.objects.select_for_update().filter(run_id=run_pk).first()
        if record is None:  # run memory disabled, or nothing to summarise: nothing to capture from
            return None
        run = Run.objects.select_related("session__owner", "session__persona").filter(pk=run_pk).first()
        if run is None or run.status not in TERMINAL_STATUSES:
            return None
        outcome = CaptureOutcome(run_id=run.public_id, receipt=record.semantic_capture)
        if policy.capture.run_summary_candidates:
            summary, created = services.run_summary_candidate_ensure(run=run, record=record)
            if summary is not None:
                outcome.run_summary_candidate_id = summary.public_id
                if created:
                    outcome.created.append(summary.public_id)
        if record.semantic_capture != SemanticCapture.PENDING:
            return outcome
        semantic = policy.capture.semantic_candidates
        if not semantic.enabled:  # capture runs only when enabled; the receipt waits for it to be turned back on
            return outcome
        if run.status != RunStatus.COMPLETED:
            _set_receipt(record, SemanticCapture.SKIPPED)
            outcome.receipt = SemanticCapture.SKIPPED
            return outcome
        already = (
            LearningCandidate.objects.filter(source_run=run, origin=CandidateOrigin.DAEMON)
            .exclude(kind=LearningKind.RUN_SUMMARY)
            .exists()
        )
        if not already:
            drafts = draft_statements(capture_text(run), semantic.max_candidates_per_run)
            if not drafts:
                try:
                    drafts = _model_drafts(semantic, run, record)
                except llm.ModelError as exc:
                    logger.warning("semantic capture of %s failed: %s", run.public_id, exc)
                    outcome.error = str(exc)
                    RunMemoryRecord.objects.filter(pk=record.pk).update(
                        semantic_capture_attempts=F("semantic_capture_attempts") + 1
                    )
                    return outcome  # receipt stays pending; the replay job retries
            evidence = extraction.evidence_refs_for_run(run.public_id, list(record.artifact_ids or []))
            semantic_created = 0
            for draft in drafts[: semantic.max_candidates_per_run]:
                try:
                    candidate, created = services.daemon_candidate_create(
                        run=run,
                        kind=draft.kind,
                        content=draft.content,
                        confidence=draft.confidence,
                        evidence_refs=evidence,
                        created_at_ms=record.recorded_at_ms,
                        stated_at_ms=run.submitted_at_ms,  # the statement was made when the input was sent
                    )
                except AppError as exc:  # e.g. an over-long model draft: dropped, the others still count
                    logger.info("semantic draft of %s dropped: %s", run.public_id, exc.detail)
                    continue
                if created:
                    outcome.created.append(candidate.public_id)
                    semantic_created += 1
            metrics.increment("learning.capture.semantic_candidates_total", semantic_created)
        _set_receipt(record, SemanticCapture.COMPLETED)
        outcome.receipt = SemanticCapture.COMPLETED
        return outcome


def pending_capture_run_ids(limit: int = REPLAY_BATCH, *, among=None) -> list[int]:
    """Terminal runs whose capture is unfinished: a ``pending`` receipt (while semantic capture is on), or
    (when run_summary capture is on) a record without its run_summary candidate. The least-tried receipts
    come first, so runs whose extraction keeps failing cannot crowd newer ones out of a batch. ``among``
    narrows the records looked at (the replay passes those no capture task is queued for)."""
    capture_policy = policy_in_force.current_policy().capture
    records = RunMemoryRecord.objects.all() if among is None else among
    terminal = records.filter(run__status__in=TERMINAL_STATUSES)
    ids = []
    if capture_policy.semantic_candidates.enabled:
        ids = list(
            terminal.filter(semantic_capture=SemanticCapture.PENDING)
            .order_by("semantic_capture_attempts", "recorded_at_ms")
            .values_list("run_id", flat=True)[:limit]
        )
    if capture_policy.run_summary_candidates and len(ids) < limit:
        summaries = LearningCandidate.objects.filter(source_run=OuterRef("run_id"), kind=LearningKind.RUN_SUMMARY)
        ids += list(
            terminal.exclude(run_id__in=ids)
            .filter(~Exists(summaries))
            .exclude(summary="")
            .order_by("recorded_at_ms")
            .values_list("run_id", flat=True)[: limit - len(ids)]
        )
    return ids
