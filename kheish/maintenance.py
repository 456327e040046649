"""Repair across planes: run memory first, then whatever the higher planes register."""

from __future__ import annotations

from collections.abc import Callable

from memory import run_memory

_repairers: dict[str, Callable[..., dict]] = {}


def register(name: str, func: Callable[..., dict]) -> None:
    _repairers[name] = func


def repair_all(*, apply: bool, source: str, log: Callable[[str], object] = lambda s: None) -> dict:
    log("run memory: checking records of missing or non-terminal runs, overflow, expiry, scope keys…")
    missing = run_memory.missing_records(apply=apply)
    report = run_memory.enforce_policy(source=source, apply=apply)
    summary = {"run_memory": {
        "missing_records_rebuilt": len(missing), "orphans": report["pruned_orphan_file_count"],
        "expired": report["pruned_ttl_count"], "overflow": report["pruned_overflow_count"],
        "stale_scope_keys": report["rescoped_record_count"], "diagnostics": len(report["diagnostics"])}}
    try:
        from skills.repair import repair_skills

        register("skills", repair_skills)
    except ModuleNotFoundError as exc:
        if exc.name not in ("skills.repair",):
            raise
    for name, func in _repairers.items():
        log(f"{name}: checking…")
        summary[name] = func(apply=apply)
    return summary
