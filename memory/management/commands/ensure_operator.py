import os
import secrets

from django.contrib.auth import get_user_model
from django.core.management.base import BaseCommand


class Command(BaseCommand):
    help = "Make sure an operator (staff superuser) account exists; print how to log in."

    def add_arguments(self, parser):
        parser.add_argument("--username", default=os.environ.get("KHEISH_OPERATOR_USERNAME", "operator"))

    def handle(self, *args, username, **options):
        user_model = get_user_model()
        port = os.environ.get("PORT", "8000")
        user = user_model.objects.filter(username=username).first()
        if user is None:
            password = os.environ.get("KHEISH_OPERATOR_PASSWORD") or secrets.token_urlsafe(12)
            user_model.objects.create_superuser(username=username, email="", password=password)
            self.stdout.write(self.style.SUCCESS(f"Created operator account '{username}' with password: {password}"))
        else:
            self.stdout.write(
                f"Operator account '{username}' exists (password unchanged; "
                f"set a new one with: make password OPERATOR={username})."
            )
        self.stdout.write(f"Admin console: http://127.0.0.1:{port}/admin/  (log in as '{username}')")
        self.stdout.write(f"API docs:      http://127.0.0.1:{port}/v1/docs/")
        self.stdout.write(
            "API keys:      make key NAME=my-agent ROLE=agent   (ROLE=operator for an operator key; "
            "or Admin → API keys)"
        )
