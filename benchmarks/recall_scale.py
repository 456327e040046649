"""The hybrid recall path as the visible set grows (issue 12): N learnings visible to one session (one project
scope, N = 10,000 and 100,000 by default), realistic sentences (LongMemEval user turns when the data is there,
numbered so each learning is distinct).

Measured in-process, hybrid ranker (the default policy): learned_context (the section a new run gets, before
packing), the whole prompt assembly, memory-search, the first run after a write (one learning published
through the candidate → publish path, then a run), publish throughput with embeddings, the embedding
model's load time, and the process's peak RSS after each size. Each timed call starts as a session-scoped
request does: one statement reads the session with its projects, its owner's grants and the policies in force
(``memory.sql.visible_session``), included in the figure. The load is checkpointed before anything is timed,
so the calls do not share the machine with the writing-out of the pages it dirtied."""

from __future__ import annotations

import gzip
import http.client
import json
import random
import time
from urllib.parse import quote

from django.db import connection, transaction

from benchmarks.harness import Results, gunicorn_server, peak_rss_mib, time_calls
from benchmarks.recall import DEFAULT_DATA
from kheish import composition
from learnings import recall_sql, retrieval
from learnings.models import Learning
from learnings.services import candidate_publish
from learnings.services.candidates import candidate_create
from learnings.services.cleaning import semantic_key_digests
from learnings.services.publish import PublishOptions
from learnings.validation import LearningScope
from memory import embedding
from memory import sql as memory_sql
from memory.clock import now_ms
from memory.grants import grants_set
from memory.identity import api_key_create
from memory.sessions import learning_scope_keys, project_create, session_create
from memory.sessions import project_ids as sessions_project_ids

QUERIES = [
    "Where do I keep my old sneakers?",
    "What did I decide about the deploy window?",
    "Which editor do I prefer for writing code?",
    "How many hours did I spend practising guitar?",
    "what is the name of my cat",
    "Remind me what I said about my trip to Japan",
]


def sentences(count: int) -> list[str]:
    source: list[str] = []
    if DEFAULT_DATA.exists():
        with gzip.open(DEFAULT_DATA, "rt", encoding="utf-8") as handle:
            for line in handle:
                for session in json.loads(line)["haystack_sessions"]:
                    source += [t["content"][:600] for t in session if t.get("role") == "user" and t.get("content")]
                if len(source) > 20_000:
                    break
    if not source:
        words = ["alpha", "beta", "deploy", "window", "editor", "helix", "sneakers", "bed", "guitar", "trip"]
        rng = random.Random(5)
        source = [" ".join(rng.choices(words, k=12)) for _ in range(2000)]
    return [f"{source[i % len(source)]} (note {i})" for i in range(count)]


def seed(size: int, project_id: str) -> None:
    texts = sentences(size)
    ts = now_ms()
    started = time.perf_counter()
    for start in range(0, size, 2000):
        chunk = texts[start : start + 2000]
        vectors = embedding.embed_many(chunk)
        rows = []
        for offset, (text, vector) in enumerate(zip(chunk, vectors, strict=True)):
            content_key, subject_key = semantic_key_digests(text)
            rows.append(
                Learning(
                    scope_kind="project",
                    scope_id=project_id,
                    scope_key=f"project:{project_id}",
                    kind="fact",
                    content=text,
                    confidence=90,
                    content_key=content_key,
                    subject_key=subject_key,
                    created_at_ms=ts,
                    published_at_ms=ts - start - offset,
                    updated_at_ms=ts,
                    status="active",
                    publish_tier="active",
                    policy_decision="manual",
                    policy_actor="operator",
                    verification_status="unverified",
                    embedding=[round(float(x), 6) for x in vector],
                )
            )
        with transaction.atomic():
            Learning.objects.bulk_create(rows, batch_size=1000)
    print(f"  seeded {size} learnings in {time.perf_counter() - started:.1f}s", flush=True)
    with connection.cursor() as cursor:  # as autovacuum leaves the table a minute after the load (learnings/0008)
        cursor.execute("VACUUM ANALYZE learnings_learning")


def run(results: Results, *, sizes: list[int]) -> None:
    started = time.perf_counter()
    embedding.embed_many(["warm up"])
    results.add(
        "recall_scale.embedding_model_load",
        (time.perf_counter() - started) * 1000,
        "ms",
        f"{embedding.MODEL_NAME}, {embedding.DIMENSIONS}-d, from the installed wheel",
    )
    results.add("recall_scale.rss_after_model_load", peak_rss_mib(), "MiB", "process peak so far")
    owner = api_key_create(name="bench-scale", role="agent", actor="bench").api_key.user
    operator = api_key_create(name="bench-scale-ops", role="operator", actor="bench").api_key.user
    granted: list[str] = []
    for size in sizes:
        project_id = f"scale-{size}"
        label = f"{size} learnings visible to one session (one project)"
        print(f"recall_scale: {label}", flush=True)
        project_create(project_id=project_id, name=project_id, actor=operator)
        granted.append(project_id)  # what a session reads is its bindings ∩ its owner's grants
        grants_set(agent=owner, project_ids=granted, persona_ids=[], actor=operator)
        seed(size, project_id)
        session = session_create(owner=owner, project_ids=[project_id], operator=True)
        with connection.cursor() as cursor:  # the load's dirty pages written now, not while the calls are timed
            cursor.execute("CHECKPOINT")

        # Each call reads the session as every session-scoped request does (memory.sql.visible_session: one
        # statement, with its projects, its owner's grants and the policies in force), then does its work.
        def learned(i: int, pk=session.pk) -> None:
            read = memory_sql.visible_session(pk)
            keys = learning_scope_keys(read)
            with memory_sql.one_policy_read(read.policies_read):
                retrieval.learned_records(session=read, scope_keys=keys, query=QUERIES[i % len(QUERIES)])

        def assemble(i: int, pk=session.pk) -> None:
            read = memory_sql.visible_session(pk)
            composition.assemble_prompt(read, QUERIES[i % len(QUERIES)], None, usage="preview")

        def search(i: int, pk=session.pk) -> None:  # as the memory-search view calls it
            read = memory_sql.visible_session(pk)
            with memory_sql.one_policy_read(read.policies_read):
                composition.memory_search(read, QUERIES[i % len(QUERIES)], 10)

        results.latency(f"recall_scale.{size}.learned_context", time_calls(learned, 100), label)
        results.latency(f"recall_scale.{size}.prompt_assembly", time_calls(assemble, 100), label)
        results.latency(f"recall_scale.{size}.memory_search", time_calls(search, 100), label)

        scope = LearningScope(kind="project", id=project_id)
        publish_times: list[float] = []
        first_run: list[float] = []
        for n in range(40):
            begin = time.perf_counter()
            candidate = candidate_create(
                actor=operator,
                scope=scope,
                kind="fact",
                content=f"Fresh fact number {n} about the deploy window for {size}.",
            )
            candidate_publish(candidate=candidate, actor=operator, options=PublishOptions.manual())
            publish_times.append(time.perf_counter() - begin)
            begin = time.perf_counter()
            assemble(n)
            first_run.append((time.perf_counter() - begin) * 1000)
        results.add(
            f"recall_scale.{size}.publish_throughput",
            len(publish_times) / sum(publish_times),
            "facts/s",
            f"{label}; candidate + operator publish, embedding + index updates included",
        )
        results.latency(f"recall_scale.{size}.prompt_assembly_after_write", first_run, label)
        results.add(f"recall_scale.{size}.peak_rss", peak_rss_mib(), "MiB", f"process peak after {label}")
        http_figures(results, size, label, session)
    if sizes:
        with connection.cursor() as cursor:
            sql, params = explain_statement(sizes[-1])
            cursor.execute("EXPLAIN ANALYZE " + sql, params)
            print(
                "EXPLAIN ANALYZE (hybrid pool, largest size):\n" + "\n".join(r[0] for r in cursor.fetchall()),
                flush=True,
            )


def http_figures(results: Results, size: int, label: str, session) -> None:
    """Memory-search over HTTP (gunicorn on loopback, keep-alive) beside the cheapest authenticated read
    (``GET /v1/sessions/{id}``) of the same session, as a client sees them."""
    key = api_key_create(name=f"bench-scale-http-{size}", role="agent", actor="bench")
    Session = type(session)
    Session.objects.filter(pk=session.pk).update(owner=key.api_key.user)
    grants_set(agent=key.api_key.user, project_ids=sessions_project_ids(session), persona_ids=[], actor="bench")
    headers = {"Authorization": f"Bearer {key.plaintext}"}
    with gunicorn_server(connection.settings_dict) as port:
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)

        def get(path: str) -> float:
            start = time.perf_counter()
            conn.request("GET", path, headers=headers)
            response = conn.getresponse()
            response.read()
            if response.status != 200:
                raise RuntimeError(f"{path}: {response.status}")
            return (time.perf_counter() - start) * 1000

        read, search = [], []
        for i in range(110):
            read.append(get(f"/v1/sessions/{session.public_id}"))
            query = quote(QUERIES[i % len(QUERIES)])
            search.append(get(f"/v1/sessions/{session.public_id}/memory-search?query={query}&limit=10"))
        conn.close()
    results.latency(f"recall_scale.{size}.http_session_read", read[10:], label + "; GET /v1/sessions/{id}")
    results.latency(f"recall_scale.{size}.http_memory_search", search[10:], label + "; gunicorn, keep-alive")


def explain_statement(size: int) -> tuple[str, dict]:
    """The pool statement of the hybrid ranker for one query, as ``recall_sql.pool`` runs it."""
    query = QUERIES[0]
    sql, params, _ = recall_sql.pool_statement(
        "prompt",
        scope_keys=[f"project:scale-{size}", "workspace:default"],
        at_ms=now_ms(),
        words=query.lower().split(),
        query_vector=embedding.embed_many([query])[0],
    )
    return sql, params
