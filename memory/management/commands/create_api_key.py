from django.core.management.base import BaseCommand, CommandError

from memory.errors import AppError
from memory.identity import api_key_create
from memory.models import ApiKeyRole


class Command(BaseCommand):
    help = "Create an API key for an agent or operator principal named NAME. Prints only the key."

    def add_arguments(self, parser):
        parser.add_argument("name")
        parser.add_argument("--role", choices=ApiKeyRole.values, default=ApiKeyRole.AGENT)

    def handle(self, *args, name, role, **options):
        try:
            issued = api_key_create(name=name, role=role, actor="manage.py create_api_key")
        except AppError as exc:
            raise CommandError(exc.detail) from exc
        self.stdout.write(issued.plaintext)
