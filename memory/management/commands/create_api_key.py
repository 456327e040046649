from django.core.management.base import BaseCommand, CommandError
from django.db import transaction

from memory import grants
from memory.errors import AppError
from memory.identity import api_key_create
from memory.models import ApiKeyRole


class Command(BaseCommand):
    help = (
        "Create an API key for an agent or operator principal named NAME. Prints only the key. "
        "--project/--persona (repeatable) add to the agent's grants: what its sessions may bind to."
    )

    def add_arguments(self, parser):
        parser.add_argument("name")
        parser.add_argument("--role", choices=ApiKeyRole.values, default=ApiKeyRole.AGENT)
        parser.add_argument(
            "--project", action="append", default=[], metavar="ID", help="grant the agent this project (repeatable)"
        )
        parser.add_argument(
            "--persona", action="append", default=[], metavar="ID", help="grant the agent this persona (repeatable)"
        )

    def handle(self, *args, name, role, project, persona, **options):
        actor = "manage.py create_api_key"
        try:
            with transaction.atomic():
                issued = api_key_create(name=name, role=role, actor=actor)
                if project or persona:
                    agent = issued.api_key.user
                    current = grants.grants_for(agent)
                    grants.grants_set(
                        agent=agent,
                        actor=actor,
                        project_ids=sorted(set(current.project_ids) | set(project)),
                        persona_ids=sorted(set(current.persona_ids) | set(persona)),
                    )
        except AppError as exc:
            raise CommandError(exc.detail) from exc
        self.stdout.write(issued.plaintext)
