"""Plane 3 at 100,000 learnings across 1,000 projects and the workspace, 10,000 sessions: learned_context,
the whole prompt assembly (learned_context + recovered_memory), memory-search, candidate review throughput
(judge off), and the EXPLAIN of the retrieval queries."""

from __future__ import annotations

import random
import time

from django.db import connection, transaction

from benchmarks.harness import Results, time_calls
from kheish import composition
from learnings import retrieval
from learnings.models import CandidateOrigin, Learning, LearningCandidate
from learnings.retrieval import learned_records
from learnings.review import review_candidate
from learnings.semantic import semantic_keys
from memory.clock import now_ms
from memory.identity import api_key_create
from memory.models import AgentGrant, Project, Session
from memory.sessions import learning_scope_keys

SUBJECTS = [
    "report sizes",
    "deploy window",
    "on-call rotation",
    "preferred editor",
    "database engine",
    "release codename",
    "time zone",
    "currency",
    "ticket tracker",
    "backup cadence",
    "log retention",
    "alert channel",
]
VALUES = [
    "gigabytes",
    "tuesday mornings",
    "weekly",
    "helix",
    "postgresql",
    "atlas",
    "utc",
    "euro",
    "linear",
    "nightly",
    "thirty days",
    "#ops-alerts",
]
KINDS = ["fact", "preference", "decision"]


def learning_row(rng: random.Random, scope_kind: str, scope_id: str, ts: int, n: int) -> Learning:
    content = f"The {rng.choice(SUBJECTS)} for unit {n} is {rng.choice(VALUES)}."
    keys = semantic_keys(content)
    return Learning(
        scope_kind=scope_kind,
        scope_id=scope_id,
        scope_key=f"{scope_kind}:{scope_id}",
        kind=rng.choice(KINDS),
        content=content,
        confidence=90,
        content_key=keys.content_key[:64],
        subject_key=(keys.subject_key or "")[:64],
        created_at_ms=ts,
        published_at_ms=ts - n,
        updated_at_ms=ts,
        status="active",
        publish_tier="active",
        policy_decision="manual",
        policy_actor="operator",
        verification_status="unverified",
    )


def seed(scale: int) -> list[int]:
    rng = random.Random(13)
    ts = now_ms()
    projects = 1000 // scale
    per_project = 99
    Project.objects.bulk_create(
        [Project(project_id=f"bench-p{i}", name=f"P{i}") for i in range(projects)], batch_size=2000
    )
    project_pks = list(Project.objects.filter(project_id__startswith="bench-p").values_list("pk", flat=True))
    rows = [learning_row(rng, "workspace", "default", ts, n) for n in range(1000 // scale)]
    for i in range(projects):
        rows += [learning_row(rng, "project", f"bench-p{i}", ts, n) for n in range(per_project)]
        if len(rows) > 20000:
            Learning.objects.bulk_create(rows, batch_size=5000)
            rows = []
    Learning.objects.bulk_create(rows, batch_size=5000)
    owner = api_key_create(name="bench-learnings", role="agent", actor="bench").api_key.user
    AgentGrant.objects.create(user=owner).projects.set(project_pks)  # what a session reads is bound ∩ granted
    sessions = 10_000 // scale
    Session.objects.bulk_create(
        [Session(owner=owner, created_at_ms=ts, updated_at_ms=ts) for _ in range(sessions)], batch_size=2000
    )
    ids = list(Session.objects.filter(owner=owner).values_list("pk", flat=True))
    through = Session.projects.through
    through.objects.bulk_create(
        [through(session_id=sid, project_id=project_pks[i % len(project_pks)]) for i, sid in enumerate(ids)],
        batch_size=5000,
    )
    with connection.cursor() as cursor:
        cursor.execute("ANALYZE")
    return ids


def run(results: Results, *, scale: int = 1) -> None:
    size = f"{100_000 // scale} learnings, {1000 // scale} projects + workspace, {10_000 // scale} sessions"
    print(f"learnings: seeding {size}…", flush=True)
    start = time.perf_counter()
    with transaction.atomic():
        ids = seed(scale)
    print(f"  seeded in {time.perf_counter() - start:.1f}s", flush=True)
    rng = random.Random(17)
    sample = list(Session.objects.filter(pk__in=rng.sample(ids, 200)).prefetch_related("projects"))
    scope_keys = {s.pk: learning_scope_keys(s) for s in sample}
    query = "what preferred editor and report sizes should I use for unit 42?"

    def bundle(i: int) -> None:  # the section a new run gets (before packing), as assemble_prompt reads it
        s = sample[i % len(sample)]
        learned_records(session=s, scope_keys=scope_keys[s.pk], query=query, usage="preview")

    # A process prepares each visible set (a project's learnings and the workspace's) on its first run there,
    # then reads only the set's fingerprint until a row changes: both figures, the first runs on their own.
    retrieval.clear_prepared()
    results.latency(
        "learnings.learned_context_first_run",
        time_calls(bundle, len(sample), warmup=0),
        f"{size}, first run of {len(sample)} sessions (set not yet prepared)",
    )
    results.latency("learnings.learned_context", time_calls(bundle, 1000 // scale + 20, warmup=len(sample)), size)

    def prompt(i: int) -> None:
        composition.assemble_prompt(sample[i % len(sample)], query, None, usage="preview")

    results.latency(
        "learnings.prompt_assembly_both_sections", time_calls(prompt, 500 // scale + 20, warmup=len(sample)), size
    )

    def search(i: int) -> None:
        composition.memory_search(sample[i % len(sample)], "preferred editor", 12)

    results.latency("learnings.memory_search", time_calls(search, 500 // scale + 20, warmup=len(sample)), size)

    s = sample[0]
    qs = Learning.objects.for_prompt(scope_keys[s.pk], now_ms()).order_by()  # as retrieval runs it
    plan = qs.explain(analyze=True)
    print("EXPLAIN (learned_context retrieval, a set's first run):\n" + plan, flush=True)
    statement = Learning.objects.fingerprint_statement("for_prompt", scope_keys[s.pk], now_ms())
    if statement is not None:  # None only for a session without scope keys
        with connection.cursor() as cursor:
            cursor.execute("EXPLAIN ANALYZE " + statement[0], statement[1])
            plan = "\n".join(row[0] for row in cursor.fetchall())
        print("EXPLAIN (learned_context fingerprint, every run):\n" + plan, flush=True)

    ts = now_ms()
    candidates = LearningCandidate.objects.bulk_create(
        [
            LearningCandidate(
                origin=CandidateOrigin.DAEMON,
                scope_kind="session",
                scope_id=f"session-{s.pk}",
                scope_key=f"session:session-{s.pk}",
                kind="preference",
                content=f"Preferred unit for report {n} is gigabytes",
                confidence=90,
                created_at_ms=ts,
                updated_at_ms=ts,
                state="pending",
            )
            for n in range(300 // scale + 10)
        ]
    )
    start = time.perf_counter()
    for c in candidates:
        review_candidate(c.pk)
    elapsed = time.perf_counter() - start
    results.add(
        "learnings.review_throughput",
        len(candidates) / elapsed,
        "candidates/s",
        f"{len(candidates)} candidates, shadow mode, judge off",
    )
