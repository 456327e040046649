"""Every model has a factory, and every factory saves a valid row on PostgreSQL: the defaults pass the
model's check and unique constraints (a second row too), and the row reads back as written."""

from __future__ import annotations

import inspect

import pytest
from django.apps import apps
from django.db import models

from learnings.learning_policy import LearningPolicy
from learnings.models import Learning
from memory.identity import authenticate_key
from memory.models import RunStatus
from skills.models import LearningSkill
from tests import factories

pytestmark = pytest.mark.django_db

PROJECT_APPS = ("memory", "learnings", "skills")

FACTORIES = {
    cls._meta.model: cls
    for _, cls in inspect.getmembers(factories, inspect.isclass)
    if issubclass(cls, factories.DjangoModelFactory)
    and cls._meta.model is not None
    and cls.__module__ == factories.__name__
    and not cls.__name__.startswith("_")
}


def project_models() -> list[type[models.Model]]:
    return [model for app in PROJECT_APPS for model in apps.get_app_config(app).get_models()]


def test_every_model_has_a_factory():
    missing = [model.__name__ for model in project_models() if model not in FACTORIES]
    assert not missing, f"no factory for {missing}"


@pytest.mark.parametrize(
    "factory_class",
    sorted(
        {
            cls
            for _, cls in inspect.getmembers(factories, inspect.isclass)
            if issubclass(cls, factories.DjangoModelFactory)
            and cls.__module__ == factories.__name__
            and not cls.__name__.startswith("_")
        },
        key=lambda cls: cls.__name__,
    ),
    ids=lambda cls: cls.__name__,
)
def test_factory_saves_valid_rows(factory_class):
    first, second = factory_class(), factory_class()
    model = factory_class._meta.model
    for row in (first, second):
        row.full_clean(validate_unique=False, validate_constraints=False, exclude=_unvalidated(model))
        stored = model.objects.get(pk=row.pk)
        for field in model._meta.concrete_fields:
            assert getattr(stored, field.attname) == getattr(row, field.attname), field.name
    assert first.pk != second.pk


def _unvalidated(model: type[models.Model]) -> list[str]:
    # Non-editable and blank-by-design derived columns are the services' business, not full_clean's.
    return [field.name for field in model._meta.fields if not field.editable or isinstance(field, models.JSONField)]


def test_traits_save_valid_rows():
    assert factories.TerminalRunFactory().status == RunStatus.COMPLETED
    assert factories.LearningFactory(provisional=True).publish_tier == "provisional"
    assert factories.LearningFactory(revoked=True).revoked_at_ms is not None
    assert factories.LearningFactory(automatic=True).verification_status == "verified"
    assert factories.LearningCandidateFactory(daemon=True).source_run.is_terminal
    active = factories.LearningSkillFactory(active=True)
    assert LearningSkill.objects.get(pk=active.pk).is_active
    assert factories.PolicyRevisionFactory(run_memory=True).kind == "run_memory"
    assert factories.OperatorFactory().is_staff


def test_rows_read_like_the_services_write_them():
    key = factories.ApiKeyFactory()
    assert authenticate_key(f"{key.prefix}_{factories.API_KEY_SECRET}") == key
    learning = factories.LearningFactory(scope_kind="project", scope_id="atlas")
    assert learning.scope_key == "project:atlas" and learning.content_key and learning.embedding is not None
    assert learning.is_prompt_eligible and Learning.objects.get(pk=learning.pk).embedding == learning.embedding
    candidate = factories.LearningCandidateFactory(content=learning.content)
    assert (candidate.content_key, candidate.subject_key) == (learning.content_key, learning.subject_key)
    assert LearningPolicy.from_dict(factories.PolicyRevisionFactory().policy) == LearningPolicy()
    skill = factories.LearningSkillFactory()
    assert skill.definition.fingerprint() == skill.definition_fingerprint
    grant = factories.AgentGrantFactory(projects=[factories.ProjectFactory()])
    assert grant.projects.count() == 1
