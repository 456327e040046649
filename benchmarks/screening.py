"""The memory-poisoning screen (issue 19.5) on its labelled corpus (``tests/learnings/screening_corpus.py``):
precision and recall over poisoning attempts vs ordinary preferences, facts, decisions and procedures, recall
per category, and the screen's cost per candidate (typical and on hostile shapes at the 8,000-character cap).
Pure Python: no database is needed.

The corpus was written alongside the rules, so its figures are an upper bound; the 50 entries marked as
written after the first tuning are the fairer check (see the corpus module)."""

from __future__ import annotations

import time

from benchmarks.harness import Results


def run(results: Results) -> None:
    from learnings import screening
    from tests.learnings.screening_corpus import ATTACKS, ORDINARY

    print("screening: corpus precision / recall", flush=True)
    size = f"{len(ATTACKS)} attacks, {len(ORDINARY)} ordinary"
    tp = sum(screening.screen(text).flagged for _, text in ATTACKS)
    fp = sum(screening.screen(text).flagged for text in ORDINARY)
    results.add("screening.precision", tp / max(1, tp + fp), "ratio", size)
    results.add("screening.recall", tp / len(ATTACKS), "ratio", size)
    results.add("screening.false_positive_rate", fp / len(ORDINARY), "ratio", size)
    for category in screening.CATEGORIES:
        texts = [text for c, text in ATTACKS if c == category]
        named = sum(category in screening.screen(text).categories for text in texts)
        results.add(f"screening.recall.{category}", named / len(texts), "ratio", f"{len(texts)} attacks")

    texts = [text for _, text in ATTACKS] + ORDINARY
    started = time.perf_counter()
    rounds = 20
    for _ in range(rounds):
        for text in texts:
            screening.screen(text)
    per = (time.perf_counter() - started) * 1e6 / (rounds * len(texts))
    results.add("screening.cost_per_candidate", per, "us", f"corpus texts, {rounds} rounds")
    cap = screening.MAX_SCREENED_CHARS
    hostile = {
        "ignore": "ignore " * cap,
        "send": "send " * cap,
        "at": "a@" * cap,
        "dots": "http://" + "a." * cap,
        "call": "call the " * cap,
        "you": "you " * cap,
        "pipe": "curl " + "x" * cap + "| sh",
    }
    worst = 0.0
    for text in hostile.values():
        started = time.perf_counter()
        screening.screen(text)
        worst = max(worst, (time.perf_counter() - started) * 1000)
    results.add("screening.worst_hostile_input", worst, "ms", f"{len(hostile)} shapes, capped at {cap} chars")
