"""Memory in the agent's loop (issue 24): three measurements through the product's services.

* ``standing``: a workspace with 30 preferences and decisions about unrelated things (and facts); for each of
  8 target preferences, 4 questions that paraphrase what it governs (sharing few or no words with it) must
  recall it in a real run's ``learned_context``; 12 unrelated questions must not fill the section with
  unrelated preferences (printed: how many standing entries they got and the share of the standing budget
  used). The same questions with ``standing_tokens: 0`` give the old figure.
* ``capture``: precision and recall of the deterministic statement extractor on the labelled corpus of
  ``tests/learnings/statement_corpus.py`` (the part it was tuned on, and the held-out part).
* ``loop``: development conversations (LongMemEval-format, ``--recall-data``) replayed through the real path:
  each question's haystack in one agent session (the user's ongoing chat), each round a run opened with
  ``composition.open_run`` (``POST /runs``), started, given the assistant's reply as output and completed;
  capture on (run summaries and semantic capture, no model: labelled statements and the deterministic
  extractor); the capture task and the automation review run as the worker runs them. The policy publishes
  the way a careful operator would: daemon-origin facts, preferences and decisions with their source run, its
  evidence and confidence ≥ 85 are published for prompts (verified against the run-memory record, else kept
  provisional); run summaries are rejected; anything else waits for review. Then the question is asked in that
  session: printed are the evidence recall of what the loop itself remembered (an evidence round whose
  captured learning is in ``learned_context``), the same through ``recovered_memory``, candidates per 100 runs
  and how many reached review.
"""

from __future__ import annotations

import statistics
import time
from collections import Counter

from benchmarks.harness import Results, grant_project
from kheish import composition
from learnings import capture, retrieval, standing
from learnings.models import Learning, LearningCandidate
from learnings.review import review_candidate
from learnings.services import candidate_publish, set_policy
from learnings.services.candidates import candidate_create
from learnings.services.publish import PublishOptions
from learnings.validation import LearningScope
from memory.identity import api_key_create
from memory.runs import RunInput, run_cancel, run_complete, run_start
from memory.sections import estimate_tokens
from memory.sessions import project_create, session_create

# --------------------------------------------------------------------------------------------- standing

TARGETS = {
    "Always report sizes in gigabytes.": [
        "How big is /var/log?",
        "How much space does the database take up?",
        "What's the size of my home folder?",
        "Is the backup drive almost full?",
    ],
    "Show every time in UTC.": [
        "When does the nightly job run?",
        "What time is the standup tomorrow?",
        "When was the last deploy?",
        "At what hour did the outage start?",
    ],
    "Use metric units for distances and weights.": [
        "How far is Lyon from Paris?",
        "How heavy is a full pallet?",
        "How long is the running track?",
        "What's the height of Mont Blanc?",
    ],
    "Quote every price in euros.": [
        "How much does the cloud bill cost per month?",
        "What does a new laptop cost?",
        "Is the premium plan expensive?",
        "What will the conference tickets cost us?",
    ],
    "Use British spelling in everything you write.": [
        "Draft a short note to the team about the office move.",
        "Write a paragraph about colour theory.",
        "Can you proofread my announcement?",
        "Summarise the meeting for the newsletter.",
    ],
    "We decided to use PostgreSQL 16 for analytics.": [
        "Which database should the reporting pipeline use?",
        "Where should we store the event data for dashboards?",
        "Set up the warehouse for the BI team.",
        "What engine backs our analytics?",
    ],
    "Prefer pytest over unittest for new tests.": [
        "Write a test for the parser.",
        "How should I test this function?",
        "Add unit tests to the CLI module.",
        "Which test framework do we use?",
    ],
    "Keep answers to three sentences at most.": [
        "Explain how DNS works.",
        "What is a monad?",
        "Tell me about the history of Rome.",
        "Why is the sky blue?",
    ],
}
DISTRACTORS = [
    "Prefer tabs over spaces for indentation.",
    "Never use emoji in replies.",
    "Write commit messages in the imperative mood.",
    "Prefer dark themes in every editor.",
    "Sign emails with the first name only.",
    "Prefer Terraform for infrastructure code.",
    "Use ISO 8601 dates in file names.",
    "Prefer squash merges.",
    "Avoid meetings before 10am.",
    "Prefer Markdown over Word documents.",
    "We decided to release on Thursdays.",
    "We decided to keep the monolith for now.",
    "Prefer vim keybindings.",
    "Prefer light roast coffee.",
    "Use snake_case for Python names.",
    "We decided the staging database resets on Mondays.",
    "Prefer window seats on flights.",
    "Prefer Rust for command-line tools.",
    "Answer in English.",
    "Prefer GitLab CI over Jenkins.",
    "Prefer short stand-ups of ten minutes.",
    "Prefer bullet lists in summaries.",
]
FACTS = [
    "The backup server is called Nimbus.",
    "The office cat is named Miso.",
    "The VPN gateway is vpn1.",
    "The wiki lives at wiki.example.org.",
    "Our on-call rotation changes on Mondays.",
]
UNRELATED = [
    "hello",
    "thanks!",
    "What's the capital of Peru?",
    "Tell me a joke.",
    "Who wrote Hamlet?",
    "Good morning",
    "Can you help me?",
    "What is 2 + 2?",
    "Recommend a novel.",
    "ok",
    "What does HTTP 418 mean?",
    "Translate 'cat' into Spanish.",
]


def _run_section(session, question: str, operator) -> dict | None:
    run = composition.open_run(
        session=session,
        run_input=RunInput(content=question, attachments=[], metadata={}),
        kind="input",
        idempotency_key=None,
        model=None,
        actor=operator,
    )
    sections = {s["name"]: s for s in run.prompt["sections"]}
    run_cancel(run=run)
    return sections.get("learned_context")


def run_standing(results: Results) -> None:
    owner = api_key_create(name="bench-standing", role="agent", actor="bench").api_key.user
    operator = api_key_create(name="bench-standing-ops", role="operator", actor="bench").api_key.user
    project_create(project_id="standing", name="standing", actor=operator)
    grant_project(owner, "standing")
    scope = LearningScope(kind="project", id="standing")
    ids = {}
    for text in [*TARGETS, *DISTRACTORS, *FACTS]:
        kind = "fact" if text in FACTS else "decision" if text.startswith("We decided") else "preference"
        cand = candidate_create(actor=operator, scope=scope, kind=kind, content=text)
        ids[text] = candidate_publish(candidate=cand, actor=operator, options=PublishOptions.manual()).public_id
    prefs = len(TARGETS) + len(DISTRACTORS)
    size = f"{prefs} preferences/decisions + {len(FACTS)} facts, {sum(map(len, TARGETS.values()))} paraphrases"
    print(f"standing: {size}, {len(UNRELATED)} unrelated questions", flush=True)
    for label, standing_tokens in (("on", 400), ("off", 0)):
        set_policy(
            {"policy": {"mode": "manual_only", "retrieval": {"standing_tokens": standing_tokens}}}, actor="bench"
        )
        hits = []
        for target, questions in TARGETS.items():
            for question in questions:
                session = session_create(owner=owner, project_ids=["standing"], operator=True)
                section = _run_section(session, question, owner)
                hits.append(bool(section) and ids[target] in section["entries"])
        results.add(f"standing.{label}.paraphrase_recall", sum(hits) / len(hits), "ratio", size)
        counts, shares = [], []
        for question in UNRELATED:
            session = session_create(owner=owner, project_ids=["standing"], operator=True)
            selection = retrieval.learned_selection(
                session=session, scope_keys=["project:standing", "workspace:default"], query=question
            )
            chosen = [r for r in selection.records if r.learning_id in selection.standing_ids]
            counts.append(len(chosen))
            budget = standing.budget_for(standing_tokens, 2000)
            used = sum(estimate_tokens(r.block.text) for r in chosen)
            shares.append(used / budget if budget else 0.0)
        results.add(
            f"standing.{label}.unrelated_standing_entries_mean",
            statistics.mean(counts),
            "entries",
            f"{len(UNRELATED)} unrelated questions, {prefs} preferences visible",
        )
        results.add(
            f"standing.{label}.unrelated_standing_budget_share",
            statistics.mean(shares),
            "ratio",
            f"{len(UNRELATED)} unrelated questions (share of the standing budget used)",
        )
    set_policy({"policy": {"mode": "manual_only"}}, actor="bench")


# ---------------------------------------------------------------------------------------------- capture


def run_capture(results: Results) -> None:
    from learnings import statements
    from tests.learnings import statement_corpus as corpus

    for split, positives, negatives in (
        ("tuned", corpus.STATEMENTS + corpus.EVENTS, corpus.NON_STATEMENTS + corpus.EVENT_NON_STATEMENTS),
        ("held_out", corpus.HELD_OUT_STATEMENTS, corpus.HELD_OUT_NON_STATEMENTS),
        ("narrative", corpus.NARRATIVE_STATEMENTS, corpus.NARRATIVE_NON_STATEMENTS),
    ):
        found = [statements.extract(text, 4) for text, _ in positives]
        false = sum(bool(statements.extract(text, 4)) for text in negatives)
        true = sum(bool(d) for d in found)
        kinds = sum(d[0].kind == kind for d, (_, kind) in zip(found, positives, strict=True) if d)
        size = f"{len(positives)} statements + {len(negatives)} non-statements ({split})"
        results.add(f"capture.extractor.{split}.precision", true / (true + false) if true + false else 0, "ratio", size)
        results.add(f"capture.extractor.{split}.recall", true / len(positives), "ratio", size)
        results.add(f"capture.extractor.{split}.kind_accuracy", kinds / max(1, true), "ratio", size)


# ------------------------------------------------------------------------------------------------- loop

CAREFUL_OPERATOR = {
    "mode": "enabled",
    "capture": {"run_summary_candidates": True, "semantic_candidates": {"enabled": True, "max_candidates_per_run": 4}},
    "publication": {
        "default_action": "manual_review",
        "rules": [
            {"name": "summaries are review material", "kind": "run_summary", "action": "reject"},
            *(
                {
                    "name": f"captured {kind}",
                    "kind": kind,
                    "min_confidence": 85,
                    "require_source_run": True,
                    "require_evidence": True,
                    "action": "publish_active",
                }
                for kind in ("fact", "preference", "decision")
            ),
        ],
    },
}


def run_loop(results: Results, *, data=None, limit: int | None = 5) -> None:
    from benchmarks.recall import DEFAULT_DATA, _rounds, load

    path = data or DEFAULT_DATA
    if not path.exists():
        print(f"loop: no data at {path}: skipped", flush=True)
        return
    questions = load(path, limit)
    owner = api_key_create(name="bench-loop", role="agent", actor="bench").api_key.user
    operator = api_key_create(name="bench-loop-ops", role="operator", actor="bench").api_key.user
    set_policy({"policy": CAREFUL_OPERATOR}, actor="bench")
    runs = 0
    kinds: Counter = Counter()
    states: Counter = Counter()
    learned_any, learned_all, recovered_any, captured_any = [], [], [], []
    evidence_total = evidence_captured = 0
    started = time.perf_counter()
    for index, question in enumerate(questions):
        project_create(project_id=f"loop-{index}", name=f"loop-{index}", actor=operator)
        grant_project(owner, f"loop-{index}")
        session = session_create(owner=owner, project_ids=[f"loop-{index}"], operator=True)
        origin: dict[int, tuple[str, int]] = {}
        evidence: set[tuple[str, int]] = set()
        for sid, turns in zip(question["haystack_session_ids"], question["haystack_sessions"], strict=True):
            for number, (user, reply, has_answer) in enumerate(_rounds(turns)):
                if has_answer:
                    evidence.add((sid, number))
                if not user.strip():
                    continue
                run = composition.open_run(
                    session=session,
                    run_input=RunInput(content=user, attachments=[], metadata={}),
                    kind="input",
                    idempotency_key=None,
                    model=None,
                    actor=owner,
                )
                run = run_complete(run=run_start(run=run), output=reply or "(no reply)")
                runs += 1
                origin[run.pk] = (sid, number)
                outcome = capture.capture_run(run.pk)
                for candidate_id in outcome.created if outcome else []:
                    review_candidate(int(candidate_id.rsplit("-", 1)[1]))
        candidates = LearningCandidate.objects.filter(source_run_id__in=list(origin))
        for kind, state in candidates.values_list("kind", "state"):
            kinds[kind] += 1
            states[(kind == "run_summary", state)] += 1
        learned_rounds = {
            origin[run_pk]
            for run_pk in Learning.objects.filter(source_run_id__in=list(origin), status="active").values_list(
                "source_run_id", flat=True
            )
        }
        captured_any.append(bool(learned_rounds & evidence))
        evidence_total += len(evidence)
        evidence_captured += len(learned_rounds & evidence)
        run = composition.open_run(
            session=session,
            run_input=RunInput(content=question["question"], attachments=[], metadata={}),
            kind="input",
            idempotency_key=None,
            model=None,
            actor=owner,
        )
        sections = {s["name"]: s for s in run.prompt["sections"]}
        entries = (sections.get("learned_context") or {}).get("entries", [])
        by_learning = dict(
            Learning.objects.filter(pk__in=[int(e.rsplit("-", 1)[1]) for e in entries]).values_list(
                "pk", "source_run_id"
            )
        )
        in_context = {origin[run_pk] for run_pk in by_learning.values() if run_pk in origin}
        learned_any.append(bool(in_context & evidence))
        learned_all.append(bool(evidence) and evidence <= in_context)
        recovered = {
            origin.get(int(e.rsplit("-", 1)[1])) for e in (sections.get("recovered_memory") or {}).get("entries", [])
        }
        recovered_any.append(bool(recovered & evidence))
        run_cancel(run=run)
        print(
            f"  loop {index + 1}/{len(questions)} ({runs} runs, {time.perf_counter() - started:.0f}s): "
            f"{len(learned_rounds & evidence)}/{len(evidence)} evidence rounds captured, "
            f"{len(in_context & evidence)} in learned_context, {len(recovered & evidence)} in recovered_memory",
            flush=True,
        )
    size = f"{len(questions)} conversations, {runs} runs, {evidence_total} evidence rounds, from {path.name}"
    semantic = sum(n for kind, n in kinds.items() if kind != "run_summary")
    results.add("loop.semantic_candidates_per_100_runs", 100 * semantic / max(1, runs), "candidates", size)
    results.add("loop.run_summaries_per_100_runs", 100 * kinds.get("run_summary", 0) / max(1, runs), "candidates", size)
    review = sum(n for (summary, state), n in states.items() if not summary and state in ("pending", "escalated"))
    results.add("loop.reached_review", review, "candidates", f"{semantic} semantic candidates; {size}")
    results.add(
        "loop.published_automatically",
        sum(n for (summary, state), n in states.items() if not summary and state == "published"),
        "candidates",
        size,
    )
    results.add("loop.evidence_captured_any", _rate(captured_any), "ratio", size)
    results.add("loop.evidence_rounds_captured", evidence_captured / max(1, evidence_total), "ratio", size)
    results.add("loop.learned_context.evidence_recall_any", _rate(learned_any), "ratio", size)
    results.add("loop.learned_context.evidence_recall_all", _rate(learned_all), "ratio", size)
    results.add("loop.recovered_memory.evidence_recall_any", _rate(recovered_any), "ratio", size)
    print("  candidates by kind: " + ", ".join(f"{k} {v}" for k, v in sorted(kinds.items())), flush=True)
    set_policy({"policy": {"mode": "manual_only"}}, actor="bench")


def _rate(values: list[bool]) -> float:
    return sum(values) / len(values) if values else float("nan")
