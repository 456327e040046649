"""Issue 21, "done when": a learning kind added in one place - one member of ``LearningKind`` in
``learnings/vocabulary.py`` (and, for a kind that may reach a prompt, its name in ``PROMPT_KINDS`` in the same
file) - appears in the API schema, the list filters, the console, validation, the policy's JSON Schema, the
prompt gate's SQL and predicate, and the model (so ``makemigrations`` writes its migration).

A child process loads the vocabulary's source with that one edit before Django starts, then reads every surface
(``surfaces``). The same reading in this process, over the unedited vocabulary, must not see the kind: a surface
that kept its own list of kinds would miss it in the child and fail the test.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
NEW_KIND = "insight"
MEMBER = '    PROCEDURE = "procedure"\n'
PROMPT_KINDS_LINE = (
    "PROMPT_KINDS: tuple[str, ...] = (LearningKind.FACT, LearningKind.PREFERENCE, LearningKind.DECISION)"
)

CHILD = f"""
import json, sys, types
from pathlib import Path
source = Path("learnings/vocabulary.py").read_text()
assert source.count({MEMBER!r}) == 1 and source.count({PROMPT_KINDS_LINE!r}) == 1
source = source.replace({MEMBER!r}, {MEMBER!r} + '    INSIGHT = "{NEW_KIND}"\\n')
source = source.replace({PROMPT_KINDS_LINE!r}, {PROMPT_KINDS_LINE[:-1]!r} + ", LearningKind.INSIGHT)")
import learnings
module = types.ModuleType("learnings.vocabulary")
module.__file__ = str(Path("learnings/vocabulary.py").resolve())
sys.modules["learnings.vocabulary"] = module
learnings.vocabulary = module
exec(compile(source, module.__file__, "exec"), module.__dict__)
import django
django.setup()
from tests.learnings.test_vocabulary import surfaces
print(json.dumps(surfaces()))
"""


def surfaces() -> dict:
    """Where a learning kind shows, each surface read as its own code reads it (no database needed)."""
    from django.apps import apps
    from django.db.migrations.autodetector import MigrationAutodetector
    from django.db.migrations.loader import MigrationLoader
    from django.db.migrations.state import ProjectState
    from drf_spectacular.generators import SchemaGenerator

    from kheish.console import explain, review
    from kheish.console.learnings import learnings_list  # noqa: F401 - the list's kind_choices are LearningKind's
    from learnings import extraction, lexical_ranking, recall_sql, selectors, validation
    from learnings.learning_policy import POLICY_SCHEMA
    from learnings.models import Learning, LearningCandidate

    schema = SchemaGenerator().get_schema(request=None, public=True)
    components = schema["components"]["schemas"]

    def list_enum(path: str) -> list:
        [kind] = [p for p in schema["paths"][path]["get"]["parameters"] if p["name"] == "kind"]
        return kind["schema"]["enum"]

    def list_path(plural: str) -> str:  # the list operation's path, with or without a trailing slash
        return next(path for path in schema["paths"] if path.rstrip("/") == f"/v1/{plural}")

    def accepted(check) -> bool:
        try:
            check()
        except validation.LearningValidationError:
            return False
        return True

    def filter_accepts(filterset, model) -> bool:
        return filterset(data={"kind": NEW_KIND}, queryset=model.objects.none()).is_valid()

    loader = MigrationLoader(None, ignore_no_migrations=True)
    changes = MigrationAutodetector(loader.project_state(), ProjectState.from_apps(apps)).changes(graph=loader.graph)
    learning = Learning(
        kind=NEW_KIND,
        status="active",
        publish_tier="active",
        sensitivity="scoped",
        verification_status="unverified",
        policy_decision="manual",
        expires_at_ms=None,
    )
    return {
        "schema_enum": components["LearningKindEnum"]["enum"],
        "schema_learning_list_filter": list_enum(list_path("learnings")),
        "schema_candidate_list_filter": list_enum(list_path("learning-candidates")),
        "schema_propose_help": components["CreateLearningCandidateRequest"]["properties"]["kind"]["description"],
        "filter_choices": [value for value, _ in selectors.LearningFilter.base_filters["kind"].extra["choices"]],
        "filter_accepts": [NEW_KIND]
        if filter_accepts(selectors.LearningFilter, Learning)
        and filter_accepts(selectors.LearningCandidateFilter, LearningCandidate)
        else [],
        "console_review_pills": [value for value, _ in review.KIND_PILLS],
        "console_publish_tiers": [label for _, label in explain.publish_tier_choices(None)],
        "validation_kind": [NEW_KIND] if accepted(lambda: validation.validate_kind(NEW_KIND)) else [],
        "validation_candidate": [NEW_KIND]
        if accepted(
            lambda: validation.validate_candidate(
                {
                    "scope_kind": "workspace",
                    "scope_id": "default",
                    "kind": NEW_KIND,
                    "origin": "api",
                    "content": "The staging cluster is called Borealis.",
                    "confidence": 80,
                }
            )
        )
        else [],
        "policy_rule_kinds": POLICY_SCHEMA["properties"]["publication"]["properties"]["rules"]["items"]["properties"][
            "kind"
        ]["enum"],
        "model_choices": [value for value, _ in Learning._meta.get_field("kind").choices],
        "migration_needed": [NEW_KIND] if "learnings" in changes else [],
        "gate_sql": recall_sql.GATES["prompt"],
        "gate_predicate": [NEW_KIND] if learning.is_prompt_eligible else [],
        "search_labels": list(lexical_ranking.KIND_LABELS),
        "capture_kinds": list(extraction.SEMANTIC_KINDS),
    }


def _seen(observed: dict) -> set[str]:
    """The surfaces that show the new kind (a list naming it, or a text that does)."""
    return {
        name
        for name, value in observed.items()
        if any(NEW_KIND in str(item) for item in (value if isinstance(value, list) else [value]))
    }


@pytest.mark.slow  # starts a child process (Django set up on the edited vocabulary)
def test_a_kind_added_in_the_vocabulary_reaches_every_surface():
    before = surfaces()
    assert _seen(before) == set(), "the unedited vocabulary has no such kind"
    env = {
        **os.environ,
        "DJANGO_SETTINGS_MODULE": "kheish.settings_test",
        # no connection is made: the surfaces are read without a database
        "DATABASE_URL": "postgres://unused:unused@127.0.0.1:9/unused",
    }
    child = subprocess.run(
        [sys.executable, "-c", CHILD], cwd=ROOT, env=env, capture_output=True, text=True, timeout=600
    )
    assert child.returncode == 0, child.stderr[-3000:]
    after = json.loads(child.stdout.strip().splitlines()[-1])
    assert set(after) == set(before)
    missing = set(after) - _seen(after)
    assert missing == set(), {name: after[name] for name in missing}
