"""``make password``: set an operator account's password, from a terminal prompt or from stdin.

Django's ``changepassword`` only prompts; without a terminal and with nothing on stdin it dies with an
``EOFError`` traceback (issue 25.6). This command prompts twice in a terminal, reads the password from
stdin otherwise (one line, or the same line twice as a confirmation: ``printf 'pw\\npw\\n' | make password``),
runs Django's password validators, and refuses in one line when there is nothing to read.
"""

from __future__ import annotations

import getpass
import sys

from django.contrib.auth import get_user_model
from django.contrib.auth.password_validation import validate_password
from django.core.exceptions import ValidationError
from django.core.management.base import BaseCommand, CommandError

NO_INPUT = (
    "no password given: run `make password` in a terminal (it prompts), or pipe the password to it "
    "(printf '%s\\n' 'new-password' | make password OPERATOR={username})"
)


class Command(BaseCommand):
    help = (
        "Set a new password for an operator account: prompted twice in a terminal, else read from stdin "
        "(one line; a second line must repeat it)."
    )

    def add_arguments(self, parser):
        parser.add_argument("username", nargs="?", default="operator")
        parser.add_argument(
            "--stdin", action="store_true", help="read the password from stdin even when it is a terminal"
        )

    def handle(self, *args, username: str, stdin: bool, **options):
        user = get_user_model().objects.filter(username=username).first()
        if user is None:
            raise CommandError(f"no account named {username!r} (operator accounts: make run creates 'operator')")
        if not user.is_staff:
            raise CommandError(f"{username!r} is not an operator account (it holds API keys only)")
        password = self._read(username, from_stdin=stdin or not sys.stdin.isatty())
        try:
            validate_password(password, user)
        except ValidationError as exc:
            raise CommandError("password refused: " + " ".join(exc.messages)) from None
        user.set_password(password)
        user.save(update_fields=["password"])
        self.stdout.write(f"Password changed successfully for user '{username}'")

    def _read(self, username: str, *, from_stdin: bool) -> str:
        if from_stdin:
            lines = sys.stdin.read(100_000).splitlines()
            if not lines or not lines[0]:
                raise CommandError(NO_INPUT.format(username=username))
            if len(lines) > 1 and lines[1] != lines[0]:
                raise CommandError("the two passwords on stdin differ")
            return lines[0]
        try:
            first = getpass.getpass(f"New password for {username}: ")
            second = getpass.getpass("Again: ")
        except (EOFError, KeyboardInterrupt):
            raise CommandError(NO_INPUT.format(username=username)) from None
        if not first:
            raise CommandError("the password cannot be empty")
        if first != second:
            raise CommandError("the two passwords differ")
        return first
