"""Conversational recall on multi-speaker chats (issue 24.5): a development set generated from LongMemEval-format
conversations, measured the way ``benchmarks/recall.py`` measures (``docs/recall.md``).

**The generator** (:func:`generate`, deterministic, no model): each question's haystack becomes a chat between
two named people. The user's turns are spoken by a person whose name is drawn from ``NAMES`` by the question's
index; the assistant's turns by another. Every turn is rendered as ``"<Name>: <text>"`` ("Caroline said …"),
each haystack session keeps its date (``haystack_dates`` → the session date), and the question is rewritten in
the third person about the first speaker ("Where do I keep my sneakers?" → "Where does Caroline keep
Caroline's sneakers?"), so the question names a speaker as a LoCoMo question does. The evidence is kept at
turn level (``has_answer``) and session level (``answer_session_ids``); ``question_date`` is the time the
question is asked at ("last month" is relative to it).

**The measurement**: per conversation a project; each turn of the first speaker (the one the questions are
about, in chunks of ≤ 1,600 characters) a published ``fact`` in the project's scope, through an API candidate
and an operator publish, with ``stated_at_ms`` = its session's date; then a new session in the project, whose
``metadata.reference_time_ms`` is the question date, opens a run with the question (``composition.open_run``)
at learned-context budgets of 1,000 and 2,000 tokens. Printed: round and session ``recall_any`` /
``recall_all`` overall and per question type, with and without the statement times (``undated``: the same
turns published without ``stated_at_ms``), so the effect of the time mechanism is visible.

The figure of record is checked on conversations this was not tuned on; the data is read at run time
(``--recall-data``), never committed."""

from __future__ import annotations

import re
import time
from collections import defaultdict
from datetime import UTC, datetime
from pathlib import Path

from benchmarks.harness import Results, grant_project
from benchmarks.recall import CHUNK_CHARS, DEFAULT_DATA, _model_for, _rounds, load
from kheish import composition
from learnings.services import candidate_publish, set_policy
from learnings.services.candidates import candidate_create
from learnings.services.publish import PublishOptions
from learnings.validation import LearningScope
from memory.errors import AppError
from memory.identity import api_key_create
from memory.runs import RunInput, run_cancel
from memory.sessions import project_create, session_create

NAMES = (
    "Caroline",
    "Melanie",
    "Dana",
    "Joanna",
    "Nate",
    "Priya",
    "Oskar",
    "Amara",
    "Kenji",
    "Lina",
    "Tim",
    "Audrey",
    "Gina",
    "Jon",
    "Maria",
    "John",
    "Evan",
    "Sam",
    "Deborah",
    "Andrew",
)
BUDGETS = (1000, 2000)
VARIANTS = ("dated", "undated")

_PRONOUNS = [
    (r"\bdo I\b", "does {n}"),
    (r"\bdid I\b", "did {n}"),
    (r"\bam I\b", "is {n}"),
    (r"\bhave I\b", "has {n}"),
    (r"\bwas I\b", "was {n}"),
    (r"\bcan I\b", "can {n}"),
    (r"\bshould I\b", "should {n}"),
    (r"\bwould I\b", "would {n}"),
    (r"\bwill I\b", "will {n}"),
    (r"\bI've\b", "{n} has"),
    (r"\bI'm\b", "{n} is"),
    (r"\bI'd\b", "{n} would"),
    (r"\bI'll\b", "{n} will"),
    (r"\bI am\b", "{n} is"),
    (r"\bI have\b", "{n} has"),
    (r"\bI\b", "{n}"),
    (r"\bmy\b", "{n}'s"),
    (r"\bMy\b", "{n}'s"),
    (r"\bmine\b", "{n}'s"),
    (r"\bmyself\b", "{n}"),
    (r"\bme\b", "{n}"),
]


def third_person(question: str, name: str) -> str:
    for pattern, replacement in _PRONOUNS:
        question = re.sub(pattern, replacement.format(n=name), question)
    return question


def parse_date(text: str) -> int:
    """LongMemEval's ``2023/05/20 (Sat) 02:21`` → epoch ms (UTC)."""
    found = re.match(r"(\d{4})/(\d{2})/(\d{2})(?:\s+\(\w+\))?\s*(\d{2}):(\d{2})", text or "")
    if not found:
        return 0
    year, month, day, hour, minute = (int(part) for part in found.groups())
    return int(datetime(year, month, day, hour, minute, tzinfo=UTC).timestamp() * 1000)


def generate(questions: list[dict]) -> list[dict]:
    """Multi-speaker conversations with known evidence turns, one per question (see the module docstring)."""
    conversations = []
    for index, question in enumerate(questions):
        speaker = NAMES[index % len(NAMES)]
        other = NAMES[(index + 7) % len(NAMES)]
        sessions = []
        for sid, date, turns in zip(
            question["haystack_session_ids"], question["haystack_dates"], question["haystack_sessions"], strict=True
        ):
            rounds = []
            for number, (user, reply, has_answer) in enumerate(_rounds(turns)):
                rounds.append(
                    {
                        "round": number,
                        "speaker": speaker,
                        "text": f"{speaker}: {user}",
                        "reply": f"{other}: {reply}",
                        "evidence": has_answer,
                    }
                )
            sessions.append({"session_id": sid, "date_ms": parse_date(date), "rounds": rounds})
        conversations.append(
            {
                "question_id": question["question_id"],
                "question_type": question["question_type"],
                "speakers": [speaker, other],
                "question": third_person(question["question"], speaker),
                "question_date_ms": parse_date(question["question_date"]),
                "answer_session_ids": list(question["answer_session_ids"]),
                "sessions": sessions,
            }
        )
    return conversations


def stratified(questions: list[dict], limit: int | None) -> list[dict]:
    """``limit`` questions taken round-robin over the question types (in file order within a type), so a small
    run still holds temporal and multi-session questions; all of them without a limit."""
    if limit is None or limit >= len(questions):
        return questions
    by_type: dict[str, list[dict]] = defaultdict(list)
    for question in questions:
        by_type[question["question_type"]].append(question)
    chosen: list[dict] = []
    while len(chosen) < limit:
        for bucket in by_type.values():
            if bucket and len(chosen) < limit:
                chosen.append(bucket.pop(0))
    return chosen


def _publish(operator, scope: LearningScope, content: str, stated_at_ms: int | None):
    try:
        candidate = candidate_create(
            actor=operator, scope=scope, kind="fact", content=content, stated_at_ms=stated_at_ms
        )
        return candidate_publish(candidate=candidate, actor=operator, options=PublishOptions.manual())
    except AppError:
        return None


def run(results: Results, *, data: str | None = None, limit: int | None = None) -> None:
    path = Path(data) if data else DEFAULT_DATA
    if not path.exists():
        print(f"conversations: no data at {path}: skipped", flush=True)
        return
    conversations = generate(stratified(load(path, None), limit))
    size = f"{len(conversations)} generated two-speaker conversations from {path.name}"
    print(f"conversations: {size}", flush=True)
    owner = api_key_create(name="bench-conv", role="agent", actor="bench").api_key.user
    operator = api_key_create(name="bench-conv-ops", role="operator", actor="bench").api_key.user
    set_policy({"policy": {"mode": "manual_only"}}, actor="bench")
    stats: dict = defaultdict(lambda: defaultdict(list))
    started = time.perf_counter()
    for index, conversation in enumerate(conversations):
        for variant in VARIANTS:
            project_id = f"conv-{index}-{variant}"
            project_create(project_id=project_id, name=project_id, actor=operator)
            grant_project(owner, project_id)
            scope = LearningScope(kind="project", id=project_id)
            origin: dict[str, tuple[str, int]] = {}
            evidence_rounds = set()
            for session in conversation["sessions"]:
                for turn in session["rounds"]:
                    if turn["evidence"]:
                        evidence_rounds.add((session["session_id"], turn["round"]))
                    text = turn["text"]
                    for start in range(0, len(text), CHUNK_CHARS):
                        chunk = text[start : start + CHUNK_CHARS].strip()
                        if not chunk or chunk.endswith(":"):
                            continue
                        stated = session["date_ms"] or None if variant == "dated" else None
                        learning = _publish(operator, scope, chunk, stated)
                        if learning is not None:
                            origin.setdefault(learning.public_id, (session["session_id"], turn["round"]))
            evidence_sessions = set(conversation["answer_session_ids"])
            for budget in BUDGETS:
                metadata = {"reference_time_ms": conversation["question_date_ms"]} if variant == "dated" else {}
                session = session_create(owner=owner, project_ids=[project_id], operator=True, metadata=metadata)
                question = conversation["question"]
                run = composition.open_run(
                    session=session,
                    run_input=RunInput(content=question, attachments=[], metadata={}),
                    kind="input",
                    idempotency_key=None,
                    model=_model_for(budget, session, question),
                    actor=owner,
                )
                sections = {s["name"]: s for s in run.prompt["sections"]}
                entries = (sections.get("learned_context") or {}).get("entries", [])
                found = [origin[e] for e in entries if e in origin]
                rounds, sessions = set(found), {o[0] for o in found}
                for key in ((variant, budget, "all"), (variant, budget, conversation["question_type"])):
                    bucket = stats[key]
                    bucket["round_any"].append(bool(rounds & evidence_rounds))
                    bucket["round_all"].append(bool(evidence_rounds) and evidence_rounds <= rounds)
                    bucket["session_any"].append(bool(sessions & evidence_sessions))
                    bucket["session_all"].append(evidence_sessions <= sessions)
                run_cancel(run=run)
        if (index + 1) % 5 == 0 or index + 1 == len(conversations):
            print(
                f"  {index + 1}/{len(conversations)} conversations ({time.perf_counter() - started:.0f}s)", flush=True
            )
    for variant in VARIANTS:
        for budget in BUDGETS:
            for metric in ("round_any", "round_all", "session_any", "session_all"):
                values = stats[(variant, budget, "all")][metric]
                results.add(
                    f"conversations.{variant}.{budget}.{metric}", sum(values) / max(1, len(values)), "ratio", size
                )
    types = sorted({c["question_type"] for c in conversations})
    for variant in VARIANTS:
        cells = []
        for qtype in types:
            bucket = stats[(variant, 1000, qtype)]
            n = len(bucket["round_any"])
            cells.append(
                f"{qtype} {sum(bucket['round_any']) / max(1, n):.2f}/{sum(bucket['round_all']) / max(1, n):.2f} (n={n})"
            )
        print(f"  {variant:<8} 1000 round any/all: " + "; ".join(cells), flush=True)
