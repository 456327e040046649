"""Cross-plane composition: what a new run is given (prompt assembly + injection ledger), memory-context,
memory-search and /v1/status. The planes never merge; this module only reads each through its service and
packs the sections within one budget: learned_context first, then recovered_memory (spec §4.17)."""

from __future__ import annotations

from typing import Any

from django.db import transaction

from learnings import retrieval
from learnings import selectors as learning_selectors
from learnings.sections import LEARNED_CONTEXT_FORMAT, render_learned_context
from memory import compaction, metrics, run_memory
from memory import sql as memory_sql
from memory.models import Run, Session
from memory.runs import OpenedContext, RunInput, run_open
from memory.sections import (
    RECOVERED_MEMORY_FORMAT,
    estimate_tokens,
    memory_budget,
    pack_section,
    render_recovered_memory,
)
from memory.sessions import effective_capability_scope, learning_scope_keys
from skills import selectors as skill_selectors


def assemble_prompt(session: Session, content: str, model: dict | None, *, usage: str = "prompt") -> dict:
    """Pack learned_context then recovered_memory for this input within the memory budget (the learning and
    run-memory policies read in one statement)."""
    counts: dict[str, int] = {}
    with memory_sql.one_policy_read(getattr(session, "policies_read", None)):  # read with it, when it was
        prompt = _assemble_prompt(session, content, model, usage=usage, counts=counts)
    metrics.increment_many(counts)  # one statement for the counters
    return prompt


def _assemble_prompt(
    session: Session,
    content: str,
    model: dict | None,
    *,
    usage: str,
    counts: dict[str, int],
    context: OpenedContext | None = None,
) -> dict:
    """The prompt; for ``usage="prompt"`` the injection counters it moves are added into ``counts`` (for the
    caller to write in one statement). ``context``: the live context as the open's statement read it."""
    model = model or {}
    if context is not None and context.read is not None:
        live = compaction.context_tokens(session, read=context.read, newest=context.newest, known=context.known)
    else:
        live = compaction.context_tokens(session)
    base = live + estimate_tokens(content)
    total_budget = memory_budget(
        base_tokens=base, context_window=model.get("context_window"), max_output_tokens=model.get("max_output_tokens")
    )
    budget = total_budget
    scope_keys = learning_scope_keys(session)
    config = retrieval.current_retrieval()
    sections: list[dict[str, Any]] = []
    # learned_context is bounded by the policy's retrieval.max_tokens under the window budget (the smaller).
    section_budget = min(budget, config.max_tokens)
    learned, learned_truncated = retrieval.learned_records(
        session=session, scope_keys=scope_keys, query=content, usage=usage, config=config, budget_tokens=section_budget
    )
    packed_learned = pack_section(
        learned,
        LEARNED_CONTEXT_FORMAT,
        section_budget,
        truncated=learned_truncated,
        blocks=[record.block for record in learned],
        skip_oversized=config.ranker == "hybrid",
    )
    if packed_learned.text is not None:
        sections.append(
            {
                "name": "learned_context",
                "content": packed_learned.text,
                "entries": [e.learning_id for e in packed_learned.entries],
                "truncated": packed_learned.truncated,
            }
        )
        budget = max(0, budget - estimate_tokens(packed_learned.text))
    bundle = run_memory.recovered_bundle(session, content, usage=usage, ranker=config.ranker, counts=counts)
    packed_recovered = pack_section(bundle.entries, RECOVERED_MEMORY_FORMAT, budget, truncated=bundle.truncated)
    if packed_recovered.text is not None:
        sections.append(
            {
                "name": "recovered_memory",
                "content": packed_recovered.text,
                "entries": [e.run_id for e in packed_recovered.entries],
                "truncated": packed_recovered.truncated,
            }
        )
    if usage == "prompt":
        for name, amount in (
            ("run_memory.injected_total", len(packed_recovered.entries)),
            ("run_memory.prompt_limit_omitted_total", packed_recovered.omitted),
            ("session_memory.prompt_limit_omitted_total", packed_learned.omitted),
        ):
            counts[name] = counts.get(name, 0) + amount
    total = base + sum(estimate_tokens(s["content"]) for s in sections)
    return {"sections": sections, "estimated_tokens": total, "budget_tokens": total_budget}


@transaction.atomic
def open_run(
    *, session: Session, run_input: RunInput, kind: str, idempotency_key: str | None, model: dict | None, actor: object
) -> Run:
    context = OpenedContext()  # the live context, read by the open's write statement
    run, created = run_open(
        session=session,
        run_input=run_input,
        kind=kind,
        idempotency_key=idempotency_key,
        model=model,
        actor=actor,
        context=context,
    )
    if created:
        counts: dict[str, int] = {}
        with memory_sql.one_policy_read(getattr(session, "policies_read", None)):  # read with the session
            prompt = _assemble_prompt(session, run_input.content, model, usage="prompt", counts=counts, context=context)
        # the prompt and every counter the assembly moved: one statement
        metrics.increment_many_with(counts, *memory_sql.update_statement(Run, run.pk, prompt=prompt))
        run.prompt = prompt
    return run


def memory_context(session: Session, query: str | None) -> dict:
    """The no-side-effect preview of what the next input would be eligible to receive."""
    scope_keys = learning_scope_keys(session)
    config = retrieval.current_retrieval()
    learned, learned_truncated = retrieval.learned_bundle(
        session=session, scope_keys=scope_keys, query=query, usage="preview", config=config
    )
    bundle = run_memory.recovered_bundle(session, query, usage="preview", ranker=config.ranker)
    skills = skill_selectors.session_visible_skills(session=session, scope_keys=scope_keys, query=None)
    return {
        "session_id": session.public_id,
        "effective_capability_scope": effective_capability_scope(session),
        "learning_scopes": scope_keys,
        "retrieval": config.to_dict(),
        "learned_context": {
            "entries": learned,
            "truncated": learned_truncated,
            "rendered": render_learned_context(learned, learned_truncated) if learned else None,
        }
        if learned
        else None,
        "recovered_memory": {
            "entries": [e.to_dict() for e in bundle.entries],
            "truncated": bundle.truncated,
            "rendered": render_recovered_memory(bundle.entries, bundle.truncated),
        }
        if bundle.entries
        else None,
        "visible_skills": skills,
    }


def memory_search(session: Session, query: str | None, limit: int) -> dict:
    normalized = (query or "").strip().lower() or None
    scope_keys = learning_scope_keys(session)
    config = retrieval.current_retrieval()
    results: list[dict] = []
    # limit + 1: enough for the page and to know whether it was truncated (hits are merged by the same order).
    results += retrieval.search_hits(
        session=session, scope_keys=scope_keys, query=normalized, config=config, limit=limit + 1
    )
    results += run_memory.search_hits(session=session, scope_keys=scope_keys, query=query, ranker=config.ranker)
    named: list[dict] = []
    if normalized:
        skill_hits = skill_selectors.search_hits(session=session, scope_keys=scope_keys, query=normalized)
        named = skill_selectors.named_in_query(skill_hits, normalized)
        results += [hit for hit in skill_hits if hit not in named]
    results.sort(key=lambda r: (-r["score"], -r["timestamp_ms"], r["source_id"]))
    # A query that names a visible skill (equal to its name, or containing it) always returns that skill, first,
    # whatever else matches (issue 25.7): many procedure learnings about other skills can outscore it.
    results = named + results
    return {
        "session_id": session.public_id,
        "effective_capability_scope": effective_capability_scope(session),
        "learning_scopes": scope_keys,
        "query": normalized,
        "truncated": len(results) > limit,
        "results": results[:limit],
    }


def status_view() -> dict:
    rm = run_memory.status_view()
    warnings = run_memory.health_warnings(rm)
    omitted = metrics.read(["session_memory.prompt_limit_omitted_total"])["session_memory.prompt_limit_omitted_total"]
    return {
        "health": {"ok": all(w["level"] == "info" for w in warnings), "warnings": warnings},
        "run_memory": rm,
        "session_memory": {"metrics": {"prompt_limit_omitted_total": omitted}},
        "learnings": {"screening": learning_selectors.screening_counts()},
    }
