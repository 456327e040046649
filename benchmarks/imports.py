"""The bulk path (issue 23.3): ``manage.py import_memories FILE`` on generated facts, every gate on (scrubbing,
the secret classifier, the memory-poisoning screen, validation, audit rows, embeddings).

The facts are generated here (seeded; realistic lengths, a few shapes: plain facts, preferences, facts with
dates, numbers and hosts), each in its own external id, into a throw-away JSON Lines file, then imported by
the command itself (``call_command``) in its default batches of 1000. Per size: the end-to-end rate of the
command (file read, every batch, progress output, the vector index's rebuild) with its CPU time per fact (the
process's own CPU and its preparing worker's, which a shared machine does not inflate the way it does wall
time; the database server's is not counted); then the steady-state rate, the marginal cost of
a fact between the two sizes (what a fact costs once the command's fixed costs are paid). A warm-up import
of a few facts in another scope pays the one-off costs first (embedding model load, lazy imports): its time is
printed as the fixed cost."""

from __future__ import annotations

import json
import os
import random
import resource
import tempfile
import time
from io import StringIO
from pathlib import Path

from django.core.management import call_command

from benchmarks.harness import Results

PEOPLE = ["Alice", "Bruno", "Chen", "Dara", "Emeka", "Farah", "Goran", "Hana", "Ivo", "Jun"]
THINGS = [
    "the staging database",
    "the deploy window",
    "the build server",
    "the on-call rotation",
    "the release branch",
    "the metrics dashboard",
    "the backup job",
    "the design review",
    "the billing service",
    "the search index",
]
VALUES = ["db-3", "Tuesday at 10:00", "ci-2.internal", "weekly", "release/2.4", "Grafana", "2am UTC", "Thursday"]
LIKES = ["Helix", "dark mode", "oat milk", "short stand-ups", "typed Python", "tabs", "long walks", "jazz"]
FILLER = (
    "because the team agreed on it after the incident review last quarter and nobody has asked to change it "
    "since then, so it is what new people should assume unless someone says otherwise"
)


def facts(count: int, *, seed: int = 23) -> list[str]:
    """``count`` distinct facts (numbered, each about its own subject), ~40 to ~260 characters (~150 on average;
    LongMemEval's user turns average ~210), in a few everyday shapes."""
    rng = random.Random(seed)
    filler = FILLER.split(" ")
    out = []
    for i in range(count):
        shape = i % 4
        if shape == 0:
            text = f"{rng.choice(THINGS).capitalize()} of service {i} is {rng.choice(VALUES)}"
        elif shape == 1:
            text = f"{rng.choice(PEOPLE)} prefers {rng.choice(LIKES)} over {rng.choice(LIKES)}"
        elif shape == 2:
            when = f"2025-0{1 + i % 9}-1{i % 10}"
            text = f"On {when} {rng.choice(PEOPLE)} moved {rng.choice(THINGS)} to {rng.choice(VALUES)}"
        else:
            text = f"{rng.choice(PEOPLE)} said {rng.choice(THINGS)} costs {rng.randint(2, 900)} euros a month"
        if shape == 0:  # a subject and its value: kept short (a long tail has no subject key)
            out.append(f"{text}.")
            continue
        tail = " ".join(filler[: rng.randint(len(filler) // 3, len(filler))])
        out.append(f"{text} {tail} (fact {i}).")
    return out


def _write(path: Path, texts: list[str], prefix: str) -> None:
    with path.open("w", encoding="utf-8") as handle:
        for i, text in enumerate(texts):
            record = {"external_id": f"{prefix}-{i}", "content": text, "kind": "fact"}
            handle.write(json.dumps(record) + "\n")


def _children_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)  # processes that ended and were waited for
    return usage.ru_utime + usage.ru_stime


def _import(path: Path, scope: str) -> tuple[float, float, float, str]:
    """(wall seconds, CPU seconds of this process, CPU seconds of the worker processes it started, output) of
    ``import_memories path --scope scope``."""
    out = StringIO()
    wall, cpu, children = time.perf_counter(), time.process_time(), _children_cpu()
    call_command("import_memories", str(path), "--scope", scope, stdout=out, stderr=out)
    elapsed = time.perf_counter() - wall
    return elapsed, time.process_time() - cpu, _children_cpu() - children, out.getvalue()


def run(results: Results, *, sizes: list[int]) -> None:
    from memory.models import Project

    sizes = sorted(sizes)
    with tempfile.TemporaryDirectory(prefix="kheish-import-bench-") as folder:
        root = Path(folder)
        Project.objects.get_or_create(project_id="import-warmup", defaults={"name": "import-warmup"})
        _write(root / "warmup.jsonl", facts(50, seed=1), "w")
        wall, _, _, _ = _import(root / "warmup.jsonl", "project:import-warmup")
        results.add("import.warmup", wall, "s", "50 facts: model load, lazy imports and first statements included")
        timings: dict[int, tuple[float, float]] = {}
        for size in sizes:
            project = f"import-{size}-{os.getpid()}"
            Project.objects.get_or_create(project_id=project, defaults={"name": project})
            path = root / f"{size}.jsonl"
            _write(path, facts(size), f"f{size}")
            print(f"import: {size} generated facts, import_memories in batches of 1000…", flush=True)
            wall, own, children, output = _import(path, f"project:{project}")
            cpu = own + children
            if f"{size} published" not in output:
                raise RuntimeError(f"import of {size} facts did not publish them all:\n{output[-2000:]}")
            timings[size] = (wall, cpu)
            label = f"{size} generated facts, one scope, batches of 1000, every gate and embedding"
            results.add(f"import.{size}.end_to_end", size / wall, "facts/s", label + "; the whole command")
            results.add(
                f"import.{size}.cpu_per_fact",
                cpu * 1000 / size,
                "ms",
                label + "; CPU of this process and of its preparing worker process (the server's not counted)",
            )
            results.add(f"import.{size}.writer_cpu_per_fact", own * 1000 / size, "ms", label + "; this process's CPU")
        if len(sizes) >= 2:
            small, large = sizes[0], sizes[-1]
            extra = large - small
            wall = timings[large][0] - timings[small][0]
            cpu = timings[large][1] - timings[small][1]
            if wall > 0:
                label = f"marginal cost of a fact from {small} to {large}"
                results.add("import.steady_state", extra / wall, "facts/s", label)
                results.add("import.steady_state_cpu_per_fact", cpu * 1000 / extra, "ms", label + "; CPU")
