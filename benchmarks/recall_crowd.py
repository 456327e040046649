"""Recall when the evidence sits in a crowded scope (issue 23: "recall must not drop" at 10,000 and 100,000).

The ``recall`` benchmark gives every LongMemEval question a project of its own, a few hundred learnings, which
the exact nearest-neighbour arm answers (``recall_sql.EXACT_LIMIT``). This one puts the user turns of every
dev question into ONE project (about 22,000 chunks, as ``recall`` publishes them: ≤ 1,600 characters, each
with its session's date), adds generated sentences up to each size asked for, and asks every question in a
session bound to that project. The HNSW arm answers at these sizes, with the other questions' histories as
distractors, so the figures change when the index, its candidate lists (``recall_sql.EF_SEARCH``) or the pool
sizes change.

A hit is a learning whose text came from one of the question's answer sessions (LongMemEval's haystacks share
sessions between questions; a turn published twice is one learning, counted for every session it came from).
Per size: memory-search's top 10 holds a turn of some answer session (``evidence_any@10``) or of every one
(``evidence_all@10``), the same for ``learned_context`` at the default budget (``prompt_evidence_*``), and the
search latency in-process. Loaded with ``import_batches`` (the bulk path)."""

from __future__ import annotations

import statistics
import time
from pathlib import Path

from django.db import connection

from benchmarks.harness import Results, grant_project
from benchmarks.recall import CHUNK_CHARS, DEFAULT_DATA, _date_ms, _rounds, load
from benchmarks.recall_scale import sentences
from kheish import composition
from learnings import retrieval
from learnings.models import LearningCandidate
from learnings.services.imports import ImportItem, import_batches
from learnings.validation import LearningScope
from memory import public_ids
from memory.identity import api_key_create
from memory.sessions import learning_scope_keys, project_create, session_create


def _turn_items(questions: list[dict], scope: LearningScope) -> list[ImportItem]:
    """Every user-turn chunk of every question's haystack, once per (session, round, offset)."""
    items: list[ImportItem] = []
    seen: set[str] = set()
    for question in questions:
        dates = question.get("haystack_dates") or [None] * len(question["haystack_session_ids"])
        sessions = zip(question["haystack_session_ids"], question["haystack_sessions"], dates, strict=True)
        for sid, turns, date in sessions:
            for number, (user, _reply, _evidence) in enumerate(_rounds(turns)):
                for start in range(0, len(user), CHUNK_CHARS):
                    chunk = user[start : start + CHUNK_CHARS].strip()
                    external_id = f"{sid}:{number}:{start}"
                    if chunk and external_id not in seen:
                        seen.add(external_id)
                        items.append(
                            ImportItem(
                                external_id=external_id,
                                content=chunk,
                                kind="fact",
                                scope=scope,
                                stated_at_ms=_date_ms(date) or None,
                            )
                        )
    return items


def run(results: Results, *, sizes: list[int], data: str | None = None, limit: int | None = None) -> None:
    """``sizes``: learnings in the project, each its own project (0: the turns alone); ``limit``: questions."""
    path = Path(data) if data else DEFAULT_DATA
    if not path.exists():
        print(f"recall_crowd: no data at {path} (pass --recall-data PATH): skipped", flush=True)
        return
    questions = load(path, limit)
    operator = api_key_create(name="bench-crowd-ops", role="operator", actor="bench").api_key.user
    agent = api_key_create(name="bench-crowd", role="agent", actor="bench").api_key.user
    for size in sizes:
        project_id = f"crowd-{size or 'turns'}"
        project_create(project_id=project_id, name=project_id, actor=operator)
        grant_project(agent, project_id)
        scope = LearningScope(kind="project", id=project_id)
        items = _turn_items(questions, scope)
        turns = len(items)
        if size > turns:
            filler = sentences(size - turns)
            items += [
                ImportItem(external_id=f"filler:{n}", content=text, kind="fact", scope=scope)
                for n, text in enumerate(filler)
            ]
        print(f"recall_crowd: {len(items)} learnings ({turns} turn chunks) in one project - loading…", flush=True)
        batches = (items[start : start + 1000] for start in range(0, len(items), 1000))
        for _ in import_batches(batches, actor="operator:bench", expected=len(items)):
            pass
        with connection.cursor() as cursor:
            cursor.execute("ANALYZE learnings_learning")
        origin: dict[str, set[str]] = {}
        for external_id, learning_pk in (
            LearningCandidate.objects.filter(scope_key=scope.scope_key)
            .exclude(published_learning_id=None)
            .values_list("external_id", "published_learning_id")
        ):
            origin.setdefault(public_ids.learning_id(learning_pk), set()).add(external_id.split(":")[0])
        session = session_create(owner=agent, project_ids=[project_id], operator=True)
        keys = learning_scope_keys(session)
        hits: dict[str, list[bool]] = {name: [] for name in ("any", "all", "prompt_any", "prompt_all")}
        search_ms: list[float] = []
        for question in questions:
            evidence = set(question["answer_session_ids"])
            started = time.perf_counter()
            found = composition.memory_search(session, question["question"], 10)["results"]
            search_ms.append((time.perf_counter() - started) * 1000)
            sessions = set().union(*(origin.get(hit["source_id"], set()) for hit in found))
            hits["any"].append(bool(sessions & evidence))
            hits["all"].append(evidence <= sessions)
            records, _ = retrieval.learned_records(
                session=session, scope_keys=keys, query=question["question"], usage="preview"
            )
            prompted = set().union(*(origin.get(record.learning_id, set()) for record in records))
            hits["prompt_any"].append(bool(prompted & evidence))
            hits["prompt_all"].append(evidence <= prompted)
        label = f"{len(questions)} questions, {len(items)} learnings in one project ({turns} of them their turns)"
        for name, metric in (
            ("any", "search.evidence_any@10"),
            ("all", "search.evidence_all@10"),
            ("prompt_any", "prompt.evidence_any"),
            ("prompt_all", "prompt.evidence_all"),
        ):
            results.add(f"recall_crowd.{size or 'turns'}.{metric}", sum(hits[name]) / len(hits[name]), "ratio", label)
        results.add(
            f"recall_crowd.{size or 'turns'}.search.p50", statistics.median(search_ms), "ms", label + "; in-process"
        )
