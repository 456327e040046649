"""factory-boy factories for the models tests build directly (the API builds the rest)."""

from __future__ import annotations

import factory
from django.contrib.auth import get_user_model

from memory.models import Persona, Project, Session


class UserFactory(factory.django.DjangoModelFactory):
    class Meta:
        model = get_user_model()
        django_get_or_create = ("username",)

    username = factory.Sequence(lambda n: f"agent-{n}")


class PersonaFactory(factory.django.DjangoModelFactory):
    class Meta:
        model = Persona

    persona_id = factory.Sequence(lambda n: f"persona-{n}")
    display_name = factory.Sequence(lambda n: f"Persona {n}")
    capability_scope = None


class ProjectFactory(factory.django.DjangoModelFactory):
    class Meta:
        model = Project

    project_id = factory.Sequence(lambda n: f"project-{n}")
    name = factory.Sequence(lambda n: f"Project {n}")


class SessionFactory(factory.django.DjangoModelFactory):
    class Meta:
        model = Session
        skip_postgeneration_save = True  # the projects hook saves through the m2m manager

    owner = factory.SubFactory(UserFactory)

    @factory.post_generation
    def projects(self, create, extracted, **kwargs):
        """``SessionFactory(projects=[project, ...])`` attaches the session to those projects."""
        if create and extracted:
            self.projects.add(*extracted)
