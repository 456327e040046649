"""Conversational recall on multi-speaker chats (issue 24.5), measured the way ``benchmarks/recall.py``
measures (``docs/recall.md``, "Multi-speaker conversations").

**The development set** (:func:`synthesize`, the default, deterministic from a seed, no model): LoCoMo-like
two-person conversations over ``SESSIONS`` dated sessions, both people talking about the same life topics
with different details, among small talk; questions about one of them that paraphrase the evidence —
single-hop, multi-hop (two turns in different sessions), temporal (a month or "last month"; the speaker said
it twice, in different months) and temporal-relative (the turn names its day relatively, the question the
resolved date). Two disjoint phrase banks (``benchmarks.conversation_bank``): ``dev`` (seed 1, looked at and
tuned on) and ``held_out`` (seed 2, the figure of record).

**The older rewrite** (:func:`generate`, ``--conversations-source longmemeval``): each LongMemEval question's
haystack as a chat between two named people, the question in the third person about the first speaker
("Where do I keep my sneakers?" → "Where does Caroline keep Caroline's sneakers?"), evidence at turn level
(``has_answer``) and session level (``answer_session_ids``); only the first speaker's turns are published.

**The measurement**: per conversation a project; each turn (``"<Name>: <text>"``, ≤ 1,600-character chunks)
a published ``fact`` in the project's scope, through an API candidate and an operator publish, with
``stated_at_ms`` = its session's date; then per question a new session in the project, whose
``metadata.reference_time_ms`` is the question date, opens a run with the question (``composition.open_run``)
at learned-context budgets of 1,000 and 2,000 tokens. Printed: round and session ``recall_any`` /
``recall_all`` overall and per question type, with and without the statement times (``undated``: the same
turns published without ``stated_at_ms``), so the effect of the time mechanism is visible.

Expect the figure of record to be checked on conversations this was not built from; LongMemEval data is read
at run time (``--recall-data``), never committed."""

from __future__ import annotations

import re
import time
from collections import defaultdict
from datetime import UTC, datetime, timedelta
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


# ------------------------------------------------------------------------------------------ synthetic set

SESSIONS = 16
MIN_TURNS = 10
SPLIT_SEEDS = {"dev": 1, "held_out": 2}
"""Tune on ``dev`` (its bank, seed 1); report on ``held_out`` (the other bank, seed 2)."""
_RELATIVE_DAYS = (
    ("yesterday", 1),
    ("last Saturday", None),
    ("last Sunday", None),
    ("two days ago", 2),
    ("three days ago", 3),
)
_MONTH_NAMES = (
    "January",
    "February",
    "March",
    "April",
    "May",
    "June",
    "July",
    "August",
    "September",
    "October",
    "November",
    "December",
)


def _fill(template: str, values: dict[str, str]) -> str:
    text = template
    for key, value in values.items():
        text = text.replace("{" + key + "}", value)
    return text


def _values(pools: dict[str, list[str]], speaker: int, draw: int = 0) -> dict[str, str]:
    """The slot values of one statement: distinct per speaker (and per draw of a repeated topic)."""
    return {slot: pool[(2 * speaker + draw) % len(pool)] for slot, pool in pools.items()}


def _relative_day(rng, date: datetime) -> tuple[str, datetime]:
    """A relative day phrase and the day it names, said on ``date``."""
    phrase, back = rng.choice(_RELATIVE_DAYS)
    if back is None:
        target = 5 if phrase.endswith("Saturday") else 6
        back = (date.weekday() - target) % 7 or 7
    return phrase, date - timedelta(days=back)


def synthesize(split: str, count: int, seed: int | None = None) -> list[dict]:
    """``count`` two-person conversations from the ``split`` bank (``benchmarks.conversation_bank``),
    deterministic for a seed (the split's own by default): ``SESSIONS`` dated sessions each, every topic of
    the bank said by both speakers with different values (the other speaker's statement is a distractor),
    and questions about one speaker with their evidence turns (the module docstring of the bank)."""
    import random

    from benchmarks.conversation_bank import BANKS

    bank = BANKS[split]
    seed = SPLIT_SEEDS[split] if seed is None else seed
    conversations = []
    for index in range(count):
        rng = random.Random(f"{split}-{seed}-{index}")
        speakers = rng.sample(list(bank["names"]), 2)
        start = datetime(2023, 1, 2, tzinfo=UTC) + timedelta(days=rng.randrange(0, 90))
        dates, day = [], start
        for _ in range(SESSIONS):
            dates.append(day.replace(hour=rng.randrange(8, 22), minute=rng.randrange(60)))
            day += timedelta(days=rng.randrange(6, 21))
        question_date = dates[-1] + timedelta(days=rng.randrange(2, 9))
        planned: dict[int, list[tuple[str, str, str]]] = defaultdict(list)  # session → (speaker, text, tag)
        asks: list[tuple[str, str, list[str]]] = []  # (type, question, evidence tags)
        for topic in bank["topics"]:
            kind = topic["kind"]
            pools = {slot: rng.sample(values, len(values)) for slot, values in topic["slots"].items()}
            items = rng.sample(topic["say"], len(topic["say"])) if kind == "multi" else []
            for number, who in enumerate(speakers):
                tag = f"{topic['id']}-{number}"
                ask = rng.choice(topic["ask"])

                if kind == "single":
                    session = rng.randrange(SESSIONS)
                    planned[session].append((who, _fill(rng.choice(topic["say"]), _values(pools, number)), tag))
                    asks.append(("single-hop", _fill(ask, {"who": who}), [tag]))
                elif kind == "multi":
                    sessions = sorted(rng.sample(range(SESSIONS), 2))
                    for part, session in enumerate(sessions):
                        planned[session].append((who, items[2 * number + part], f"{tag}.{part}"))
                    asks.append(("multi-hop", _fill(ask, {"who": who}), [f"{tag}.0", f"{tag}.1"]))
                elif kind == "repeat":
                    while True:
                        first, second = sorted(rng.sample(range(SESSIONS), 2))
                        if (dates[first].year, dates[first].month) != (dates[second].year, dates[second].month):
                            break
                    for part, session in enumerate((first, second)):
                        text = _fill(topic["say"][part % len(topic["say"])], _values(pools, number, part))
                        planned[session].append((who, text, f"{tag}.{part}"))
                    part = rng.randrange(2)
                    asked = dates[(first, second)[part]]
                    previous = question_date.replace(day=1) - timedelta(days=1)
                    if (asked.year, asked.month) == (previous.year, previous.month):
                        when_text = "last month"
                    else:
                        when_text = f"in {_MONTH_NAMES[asked.month - 1]} {asked.year}"
                    asks.append(("temporal", _fill(ask, {"who": who, "when": when_text}), [f"{tag}.{part}"]))
                else:  # dated: the statement names its own day relatively
                    session = rng.randrange(SESSIONS)
                    phrase, target = _relative_day(rng, dates[session])
                    slot_values = {
                        **_values(pools, number),
                        "rel": phrase,
                        "rel_cap": phrase[0].upper() + phrase[1:] + ",",
                    }
                    planned[session].append((who, _fill(rng.choice(topic["say"]), slot_values), tag))
                    on = f"on {target.day} {_MONTH_NAMES[target.month - 1]} {target.year}"
                    asks.append(("temporal-relative", _fill(ask, {"who": who, "date": on}), [tag]))
        sessions, where = [], {}
        for number, date in enumerate(dates):
            fillers = rng.sample(bank["filler"], len(bank["filler"]))  # no line twice in one session
            pending = {who: [item for item in planned[number] if item[0] == who] for who in speakers}
            rounds, turn = [], 0
            while turn < MIN_TURNS or any(pending.values()):
                who = speakers[turn % 2]
                if pending[who] and (rng.random() < 0.6 or turn >= MIN_TURNS - 2):
                    _, text, tag = pending[who].pop(0)
                    if rng.random() < 0.3:
                        text = f"{fillers.pop()} {text}"
                    where[tag] = (f"s{number}", turn)
                else:
                    text = fillers.pop()
                rounds.append({"round": turn, "speaker": who, "text": f"{who}: {text}", "evidence": False})
                turn += 1
            sessions.append({"session_id": f"s{number}", "date_ms": int(date.timestamp() * 1000), "rounds": rounds})
        questions = [
            {
                "question_type": qtype,
                "question": question,
                "question_date_ms": int(question_date.timestamp() * 1000),
                "evidence": sorted({where[tag] for tag in tags}),
                "evidence_sessions": sorted({where[tag][0] for tag in tags}),
            }
            for qtype, question, tags in asks
        ]
        conversations.append(
            {"id": f"{split}-{seed}-{index}", "speakers": speakers, "sessions": sessions, "questions": questions}
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


def _from_longmemeval(generated: list[dict]) -> list[dict]:
    """:func:`generate`'s conversations (one question each, only the first speaker's turns published) in the
    shape :func:`synthesize` returns."""
    converted = []
    for conversation in generated:
        speaker = conversation["speakers"][0]
        evidence = sorted(
            (session["session_id"], turn["round"])
            for session in conversation["sessions"]
            for turn in session["rounds"]
            if turn["evidence"]
        )
        sessions = [
            {**session, "rounds": [turn for turn in session["rounds"] if turn["speaker"] == speaker]}
            for session in conversation["sessions"]
        ]
        question = {
            "question_type": conversation["question_type"],
            "question": conversation["question"],
            "question_date_ms": conversation["question_date_ms"],
            "evidence": evidence,
            "evidence_sessions": conversation["answer_session_ids"],
        }
        converted.append(
            {
                "id": conversation["question_id"],
                "speakers": conversation["speakers"],
                "sessions": sessions,
                "questions": [question],
            }
        )
    return converted


def _ask(owner, project_id: str, question: dict, budget: int, dated: bool) -> list[str]:
    metadata = {"reference_time_ms": question["question_date_ms"]} if dated else {}
    session = session_create(owner=owner, project_ids=[project_id], operator=True, metadata=metadata)
    run = composition.open_run(
        session=session,
        run_input=RunInput(content=question["question"], attachments=[], metadata={}),
        kind="input",
        idempotency_key=None,
        model=_model_for(budget, session, question["question"]),
        actor=owner,
    )
    sections = {s["name"]: s for s in run.prompt["sections"]}
    run_cancel(run=run)
    return (sections.get("learned_context") or {}).get("entries", [])


def measure(
    results: Results, conversations: list[dict], label: str, size: str, variants: tuple[str, ...] = VARIANTS
) -> dict:
    """Publish every conversation's turns (one project per conversation and variant), ask its questions at
    each budget, add the figures under ``conversations.<label>.…`` and return the per-key hit lists."""
    owner = api_key_create(name=f"bench-conv-{label}", role="agent", actor="bench").api_key.user
    operator = api_key_create(name=f"bench-conv-ops-{label}", role="operator", actor="bench").api_key.user
    set_policy({"policy": {"mode": "manual_only"}}, actor="bench")
    stats: dict = defaultdict(lambda: defaultdict(list))
    started = time.perf_counter()
    for index, conversation in enumerate(conversations):
        for variant in variants:
            project_id = f"conv-{label}-{index}-{variant}"
            project_create(project_id=project_id, name=project_id, actor=operator)
            grant_project(owner, project_id)
            scope = LearningScope(kind="project", id=project_id)
            origin: dict[str, tuple[str, int]] = {}
            for session in conversation["sessions"]:
                for turn in session["rounds"]:
                    text = turn["text"]
                    for begin in range(0, len(text), CHUNK_CHARS):
                        chunk = text[begin : begin + CHUNK_CHARS].strip()
                        if not chunk or chunk.endswith(":"):
                            continue
                        stated = session["date_ms"] or None if variant == "dated" else None
                        learning = _publish(operator, scope, chunk, stated)
                        if learning is not None:
                            origin.setdefault(learning.public_id, (session["session_id"], turn["round"]))
            for question in conversation["questions"]:
                evidence_rounds = {tuple(item) for item in question["evidence"]}
                evidence_sessions = set(question["evidence_sessions"])
                for budget in BUDGETS:
                    entries = _ask(owner, project_id, question, budget, variant == "dated")
                    found = [origin[e] for e in entries if e in origin]
                    rounds, sessions = set(found), {o[0] for o in found}
                    for key in ((variant, budget, "all"), (variant, budget, question["question_type"])):
                        bucket = stats[key]
                        bucket["round_any"].append(bool(rounds & evidence_rounds))
                        bucket["round_all"].append(bool(evidence_rounds) and evidence_rounds <= rounds)
                        bucket["session_any"].append(bool(sessions & evidence_sessions))
                        bucket["session_all"].append(evidence_sessions <= sessions)
        if (index + 1) % 5 == 0 or index + 1 == len(conversations):
            print(
                f"  {label}: {index + 1}/{len(conversations)} conversations ({time.perf_counter() - started:.0f}s)",
                flush=True,
            )
    for variant in variants:
        for budget in BUDGETS:
            for metric in ("round_any", "round_all", "session_any", "session_all"):
                values = stats[(variant, budget, "all")][metric]
                results.add(
                    f"conversations.{label}.{variant}.{budget}.{metric}",
                    sum(values) / max(1, len(values)),
                    "ratio",
                    size,
                )
    types = sorted({q["question_type"] for c in conversations for q in c["questions"]})
    for variant in variants:
        for budget in BUDGETS:
            cells = []
            for qtype in ["all", *types]:
                bucket = stats[(variant, budget, qtype)]
                n = len(bucket["round_any"])
                cells.append(
                    f"{qtype} {sum(bucket['round_any']) / max(1, n):.2f}/"
                    f"{sum(bucket['round_all']) / max(1, n):.2f} (n={n})"
                )
            print(f"  {label} {variant:<8} {budget} round any/all: " + "; ".join(cells), flush=True)
    return stats


def run(
    results: Results,
    *,
    data: str | None = None,
    limit: int | None = None,
    source: str = "synthetic",
    splits: tuple[str, ...] = ("dev", "held_out"),
) -> None:
    """``source`` ``synthetic``: :func:`synthesize`'s conversations, ``limit`` of them per split (6 by
    default); ``longmemeval``: :func:`generate`'s rewrite of the LongMemEval-format file ``data``."""
    if source == "longmemeval":
        path = Path(data) if data else DEFAULT_DATA
        if not path.exists():
            print(f"conversations: no data at {path}: skipped", flush=True)
            return
        conversations = _from_longmemeval(generate(stratified(load(path, None), limit)))
        size = f"{len(conversations)} two-speaker rewrites of {path.name}"
        print(f"conversations: {size}", flush=True)
        measure(results, conversations, "longmemeval", size)
        return
    for split in splits:
        conversations = synthesize(split, limit or 6)
        turns = sum(len(s["rounds"]) for c in conversations for s in c["sessions"])
        asked = sum(len(c["questions"]) for c in conversations)
        size = (
            f"{split} split (seed {SPLIT_SEEDS[split]}): {len(conversations)} conversations x {SESSIONS} "
            f"sessions, {turns} turns, {asked} questions"
        )
        print(f"conversations: {size}", flush=True)
        measure(results, conversations, split, size)
