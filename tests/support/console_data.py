"""Builders shared by the console tests (tests/kheish/test_console_*.py and the browser tests in tests/e2e).

Everything is made through the services the API uses (sessions, runs, candidates, publication, capture), never
by writing rows, so the console is exercised against the same states real traffic produces.
"""

from __future__ import annotations

from pathlib import Path

from django.contrib.auth import get_user_model

from kheish import composition
from learnings import services as learning_services
from learnings.models import Learning, LearningCandidate
from learnings.validation import LearningScope
from memory import runs as run_services
from memory.models import Run, Session
from memory.runs import RunInput
from memory.sessions import session_create

PREFERENCE_STATEMENT = "Preference: always report sizes in gigabytes, not gibibytes."
PREFERENCE = "always report sizes in gigabytes, not gibibytes"
CORRECTED_PREFERENCE = "always report sizes in gibibytes, not gigabytes"
MARKER = "CHECKLIST_OK"
PROCEDURE = f"To ship a release, run the release checklist and reply with exactly {MARKER}."
PASSWORD = "console-pass-123"


def use_tmp_skill_dirs(settings, tmp_path: Path) -> None:
    """A private skill root and an empty catalog (activating a skill writes files)."""
    from skills import catalog

    root, catalog_dir = tmp_path / "skill-root", tmp_path / "catalog"
    root.mkdir(exist_ok=True)
    catalog_dir.mkdir(exist_ok=True)
    settings.KHEISH_SKILLS_DIR = root
    settings.KHEISH_CATALOG_DIR = catalog_dir
    catalog.clear_cache()


def staff_user(username: str = "operator-console", *, superuser: bool = False):
    """A staff account (the console needs nothing more); ``superuser`` as ``ensure_operator`` creates it, which
    the admin pages the console links to (session, run, candidate records) also need."""
    return get_user_model().objects.create_user(
        username=username, password=PASSWORD, is_staff=True, is_superuser=superuser
    )


def plain_user(username: str = "not-staff"):
    return get_user_model().objects.create_user(username=username, password=PASSWORD)


def agent_user(username: str = "agent-console"):
    return get_user_model().objects.get_or_create(username=username)[0]


def new_session(owner=None) -> Session:
    return session_create(owner=owner or agent_user())


def completed_run(session: Session, content: str, output: str = "Noted.") -> Run:
    """A run opened, started and completed as an agent reports it (the terminal transition records the
    run-memory record and, on commit, queues capture)."""
    run = composition.open_run(
        session=session,
        run_input=RunInput(content=content, attachments=[], metadata={}),
        kind="input",
        idempotency_key=None,
        model=None,
        actor=session.owner,
    )
    run = run_services.run_start(run=run, actor=session.owner)
    return run_services.run_complete(run=run, output=output, actor=session.owner)


def set_learning_policy(policy: dict, actor: str = "tests") -> int:
    return learning_services.set_policy({"policy": policy}, actor=actor)[1]


def capture(run: Run) -> list[LearningCandidate]:
    """Run capture for a terminal run now (tests without on-commit callbacks) and return its candidates."""
    from learnings import capture as capture_module

    capture_module.capture_run(run.pk)
    return list(LearningCandidate.objects.filter(source_run=run).order_by("id"))


def api_candidate(
    content: str, *, kind: str = "fact", scope: tuple[str, str] = ("workspace", "default"), confidence: int = 80
) -> LearningCandidate:
    return learning_services.candidate_create(
        actor="tests",
        scope=LearningScope(kind=scope[0], id=scope[1]),
        kind=kind,
        content=content,
        confidence=confidence,
    )


def published(
    content: str, *, kind: str = "fact", scope: tuple[str, str] = ("workspace", "default"), tier: str = "active"
) -> Learning:
    candidate = api_candidate(content, kind=kind, scope=scope)
    return learning_services.candidate_publish(
        candidate=candidate, actor="tests", options=learning_services.PublishOptions.manual(publish_tier=tier)
    )


def procedure_learning(content: str = PROCEDURE) -> Learning:
    return published(content, kind="procedure")
