"""Evidence recall of the prompt path on LongMemEval-format data (issue 12), through the product's services.

For each question (abstention questions ``*_abs`` skipped): a project; each haystack session becomes a session
linked to it; each round (user turn + assistant reply) a completed run (so run-memory records exist); each
user turn, in chunks of at most 1,600 characters, a published ``fact`` in the project's scope (an API
candidate published by an operator: the real publish path, with its conflict check and embedding). Then, for
each ranker (``hybrid``, ``lexical``) set through the learning policy, a new session in the project opens a
run whose input is the question (``kheish.composition.open_run``, the code ``POST /runs`` runs) with memory
budgets of 500, 1,000 and 2,000 tokens (set through the run's ``model.context_window`` as a client would)
and the default, and memory-search is asked the question.

Reported: session- and round-level ``recall_any`` / ``recall_all`` of the evidence within the learned_context
section per budget (overall and per ``question_type``), memory-search session ``recall_all@5/@10``, median
injected tokens and entries, prompt-assembly p50/p95, publish throughput, and publish refusals/conflicts.
The lexical ranker runs as the reference does (no section budget beyond the prompt window).

The data is read at run time (``--recall-data``, default ``../shared/data/longmemeval/…``), never committed.
"""

from __future__ import annotations

import gzip
import json
import statistics
import time
from collections import Counter, defaultdict
from pathlib import Path

from django.db import connection

from benchmarks.harness import Results, grant_project, percentile
from kheish import composition
from learnings.services import candidate_publish, set_policy
from learnings.services.candidates import candidate_create
from learnings.services.publish import PublishOptions
from learnings.validation import LearningScope
from memory import compaction
from memory.errors import AppError
from memory.identity import api_key_create
from memory.runs import RunInput, run_cancel, run_complete, run_open, run_start
from memory.sections import AUTOCOMPACT_BUFFER_TOKENS, estimate_tokens
from memory.sessions import project_create, session_create

DEFAULT_DATA = Path(__file__).resolve().parents[2] / "shared" / "data" / "longmemeval" / "longmemeval_s_dev.jsonl.gz"
CHUNK_CHARS = 1600
BUDGETS = (500, 1000, 2000, None)  # None: the default (no context window given)
RANKERS = ("hybrid", "lexical")
SPEC_RETRIEVAL = {"ranker": "lexical", "max_tokens": 150_000, "max_entries": 500}
MAX_OUTPUT_TOKENS = 1024
DATED = True
"""Each turn is published with ``stated_at_ms`` = its session's date and the question asked at its date (issue
24.5); ``--recall-undated`` publishes as before (no statement times), for comparison."""


def load(path: Path, limit: int | None) -> list[dict]:
    opener = gzip.open if path.suffix == ".gz" else open
    questions = []
    with opener(path, "rt", encoding="utf-8") as handle:
        for line in handle:
            if line.strip():
                row = json.loads(line)
                if not str(row["question_id"]).endswith("_abs"):
                    questions.append(row)
            if limit is not None and len(questions) >= limit:
                break
    return questions


def _rounds(session_turns: list[dict]) -> list[tuple[str, str, bool]]:
    """(user turn, assistant reply, has_answer anywhere in the round) per round; leading assistant turns join
    the first round."""
    rounds: list[list] = []
    for turn in session_turns:
        if turn.get("role") == "user" or not rounds:
            rounds.append(["", "", False])
        current = rounds[-1]
        if turn.get("role") == "user":
            current[0] = turn.get("content") or ""
        else:
            current[1] = (current[1] + "\n" + (turn.get("content") or "")).strip()
        current[2] = current[2] or bool(turn.get("has_answer"))
    return [tuple(r) for r in rounds]


class Haystack:
    """One question's history built through the services: where each published learning came from."""

    def __init__(self, question: dict, index: int, owner, operator) -> None:
        self.question = question
        self.project_id = f"lme-{index}"
        self.owner = owner
        self.operator = operator
        self.origin: dict[str, tuple[str, int]] = {}  # learning public id -> (haystack session id, round)
        self.evidence_sessions = set(question["answer_session_ids"])
        self.evidence_rounds: set[tuple[str, int]] = set()
        self.published = 0
        self.stated_at: int | None = None
        self.refused: Counter = Counter()
        self.publish_seconds = 0.0

    def build(self) -> None:
        project_create(project_id=self.project_id, name=self.project_id, actor=self.operator)
        grant_project(self.owner, self.project_id)
        scope = LearningScope(kind="project", id=self.project_id)
        dates = self.question.get("haystack_dates") or [None] * len(self.question["haystack_session_ids"])
        for sid, turns, date in zip(
            self.question["haystack_session_ids"], self.question["haystack_sessions"], dates, strict=True
        ):
            self.stated_at = (_date_ms(date) or None) if DATED else None
            session = session_create(owner=self.owner, project_ids=[self.project_id], operator=True)
            for number, (user, reply, evidence) in enumerate(_rounds(turns)):
                if evidence:
                    self.evidence_rounds.add((sid, number))
                if user.strip():
                    run, _ = run_open(session=session, run_input=RunInput(content=user, attachments=[], metadata={}))
                    run_complete(run=run_start(run=run), output=reply or "(no reply)")
                for start in range(0, len(user), CHUNK_CHARS):
                    chunk = user[start : start + CHUNK_CHARS].strip()
                    if chunk:
                        self._publish(scope, chunk, (sid, number))

    def _publish(self, scope: LearningScope, content: str, origin: tuple[str, int]) -> None:
        started = time.perf_counter()
        try:
            candidate = candidate_create(
                actor=self.operator, scope=scope, kind="fact", content=content, stated_at_ms=self.stated_at
            )
            learning = candidate_publish(candidate=candidate, actor=self.operator, options=PublishOptions.manual())
        except AppError as exc:
            reason = "conflict" if "conflicts with active learning" in str(exc) else getattr(exc, "code", "error")
            self.refused[str(reason)] += 1
            return
        finally:
            self.publish_seconds += time.perf_counter() - started
        self.origin.setdefault(learning.public_id, origin)
        self.published += 1


def _model_for(budget: int | None, session, question: str) -> dict | None:
    """The run's ``model`` that gives this memory budget (spec §4.17: window − output − buffer − base)."""
    if budget is None:
        return None
    base = compaction.live_context(session).estimated_tokens + estimate_tokens(question)
    return {
        "context_window": budget + MAX_OUTPUT_TOKENS + AUTOCOMPACT_BUFFER_TOKENS + base,
        "max_output_tokens": MAX_OUTPUT_TOKENS,
    }


def _date_ms(text: str | None) -> int:
    """LongMemEval's ``2023/05/20 (Sat) 02:21`` → epoch ms (UTC); 0 when absent or unreadable."""
    from benchmarks.conversations import parse_date

    return parse_date(text or "")


def _asking_session(hay: Haystack):
    """A session that asks the question at its date (``metadata.reference_time_ms``), as a replay would."""
    asked = _date_ms(hay.question.get("question_date")) if DATED else 0
    metadata = {"reference_time_ms": asked} if asked else None
    return session_create(owner=hay.owner, project_ids=[hay.project_id], operator=True, metadata=metadata)


def measure(hay: Haystack, ranker: str, stats: dict) -> None:
    question = hay.question["question"]
    qtype = hay.question["question_type"]
    for budget in BUDGETS:
        session = _asking_session(hay)
        model = _model_for(budget, session, question)
        started = time.perf_counter()
        run = composition.open_run(
            session=session,
            run_input=RunInput(content=question, attachments=[], metadata={}),
            kind="input",
            idempotency_key=None,
            model=model,
            actor=hay.owner,
        )
        stats["assembly_ms"][ranker].append((time.perf_counter() - started) * 1000)
        sections = {s["name"]: s for s in run.prompt["sections"]}
        learned = sections.get("learned_context")
        entries = learned["entries"] if learned else []
        origins = [hay.origin[e] for e in entries if e in hay.origin]
        sessions = {o[0] for o in origins}
        rounds = set(origins)
        label = "default" if budget is None else str(budget)
        for key in ((ranker, label, "all"), (ranker, label, qtype)):
            bucket = stats["recall"][key]
            bucket["session_any"].append(bool(sessions & hay.evidence_sessions))
            bucket["session_all"].append(hay.evidence_sessions <= sessions)
            bucket["round_any"].append(bool(rounds & hay.evidence_rounds))
            bucket["round_all"].append(bool(hay.evidence_rounds) and hay.evidence_rounds <= rounds)
        stats["tokens"][(ranker, label)].append(estimate_tokens(learned["content"]) if learned else 0)
        stats["entries"][(ranker, label)].append(len(entries))
        run_cancel(run=run)
    session = session_create(owner=hay.owner, project_ids=[hay.project_id], operator=True)
    started = time.perf_counter()
    found = composition.memory_search(session, question, 10)["results"]
    stats["search_ms"][ranker].append((time.perf_counter() - started) * 1000)
    ranked_sessions = [hay.origin[r["source_id"]][0] if r["source_id"] in hay.origin else None for r in found]
    for k in (5, 10):
        stats["search"][(ranker, k)].append(hay.evidence_sessions <= set(ranked_sessions[:k]))


def _rate(values: list[bool]) -> float:
    return sum(values) / len(values) if values else float("nan")


def run(results: Results, *, data: Path | None = None, limit: int | None = None) -> None:
    path = Path(data) if data else DEFAULT_DATA
    if not path.exists():
        print(f"recall: no data at {path} (pass --recall-data PATH): skipped", flush=True)
        return
    questions = load(path, limit)
    size = f"{len(questions)} questions from {path.name}"
    print(f"recall: {size}", flush=True)
    owner = api_key_create(name="bench-recall", role="agent", actor="bench").api_key.user
    operator = api_key_create(name="bench-recall-ops", role="operator", actor="bench").api_key.user
    stats: dict = {
        "recall": defaultdict(lambda: defaultdict(list)),
        "tokens": defaultdict(list),
        "entries": defaultdict(list),
        "assembly_ms": defaultdict(list),
        "search_ms": defaultdict(list),
        "search": defaultdict(list),
    }
    published = 0
    refused: Counter = Counter()
    publish_seconds = 0.0
    build_started = time.perf_counter()
    for index, question in enumerate(questions):
        hay = Haystack(question, index, owner, operator)
        set_policy({"policy": {"mode": "manual_only"}}, actor="bench")
        hay.build()
        published += hay.published
        refused.update(hay.refused)
        publish_seconds += hay.publish_seconds
        with connection.cursor() as cursor:
            cursor.execute("ANALYZE learnings_learning")
        for ranker in RANKERS:
            retrieval = {"ranker": "hybrid"} if ranker == "hybrid" else SPEC_RETRIEVAL
            set_policy({"policy": {"mode": "manual_only", "retrieval": retrieval}}, actor="bench")
            measure(hay, ranker, stats)
        if (index + 1) % 5 == 0 or index + 1 == len(questions):
            print(f"  {index + 1}/{len(questions)} questions ({time.perf_counter() - build_started:.0f}s)", flush=True)
    attempts = published + sum(refused.values())
    results.add(
        "recall.publish_throughput",
        published / publish_seconds if publish_seconds else 0,
        "facts/s",
        f"{published} facts published (candidate + operator publish, embedding included)",
    )
    results.add(
        "recall.publish_refused",
        sum(refused.values()),
        "turns",
        f"of {attempts}: " + (", ".join(f"{k} {v}" for k, v in sorted(refused.items())) or "none"),
    )
    results.add(
        "recall.publish_conflict_rate",
        refused.get("conflict", 0) / attempts if attempts else 0,
        "ratio",
        f"{attempts} publish attempts",
    )
    for ranker in RANKERS:
        for label in ("500", "1000", "2000", "default"):
            bucket = stats["recall"][(ranker, label, "all")]
            for metric in ("session_all", "session_any", "round_all", "round_any"):
                results.add(f"recall.{ranker}.{label}.{metric}", _rate(bucket[metric]), "ratio", size)
            results.add(
                f"recall.{ranker}.{label}.median_tokens",
                statistics.median(stats["tokens"][(ranker, label)]),
                "tokens",
                size,
            )
            results.add(
                f"recall.{ranker}.{label}.median_entries",
                statistics.median(stats["entries"][(ranker, label)]),
                "entries",
                size,
            )
        for k in (5, 10):
            results.add(
                f"recall.{ranker}.search.session_recall_all@{k}", _rate(stats["search"][(ranker, k)]), "ratio", size
            )
        results.latency(f"recall.{ranker}.prompt_assembly", stats["assembly_ms"][ranker], size)
        results.latency(f"recall.{ranker}.memory_search", stats["search_ms"][ranker], size)
    print("\nrecall by question_type (session_all / round_all):", flush=True)
    types = sorted({q["question_type"] for q in questions})
    for ranker in RANKERS:
        for label in ("1000", "2000"):
            cells = []
            for qtype in types:
                bucket = stats["recall"][(ranker, label, qtype)]
                cells.append(
                    f"{qtype} {_rate(bucket['session_all']):.2f}/{_rate(bucket['round_all']):.2f}"
                    f" (n={len(bucket['session_all'])})"
                )
            print(f"  {ranker:<8} {label:>5}: " + "; ".join(cells), flush=True)
    _ = percentile
