"""Repair across planes: run memory first, then the skills plane's mounted files."""

from __future__ import annotations

from collections.abc import Callable

from learnings.services.imports import ensure_vector_index
from memory import run_memory
from skills.repair import repair_skills


def repair_all(*, apply: bool, source: str, log: Callable[[str], object] = lambda s: None) -> dict:
    log("run memory: checking records of missing or non-terminal runs, overflow, expiry, scope keys…")
    missing = run_memory.missing_records(apply=apply)
    report = run_memory.enforce_policy(source=source, apply=apply)
    # Records a rebuild pushed out (overflow, expiry) count with what enforce_policy pruned: the report
    # reconciles with the records stored (issue 22.7).
    summary = {
        "run_memory": {
            "missing_records_rebuilt": len(missing.rebuilt),
            "orphans": report["pruned_orphan_file_count"],
            "expired": report["pruned_ttl_count"] + missing.pruned_ttl,
            "overflow": report["pruned_overflow_count"] + missing.pruned_overflow,
            "stale_scope_keys": report["rescoped_record_count"],
            "diagnostics": len(report["diagnostics"]),
        }
    }
    log("skills: checking…")
    summary["skills"] = repair_skills(apply=apply)
    # A big import loads without the learnings' vector index and builds it at its end: one that was killed
    # left it missing (or half built).
    log("learnings: checking the vector index…")
    summary["learnings"] = {"vector_index": ensure_vector_index(apply=apply)}
    return summary
