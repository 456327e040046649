#!/usr/bin/env python
"""Django's command-line utility, under the running service's configuration (``kheish.service_config``): the secret
key in var/secret_key and the service's database - the embedded PostgreSQL (joined while ``make run`` runs,
else started for this command) or the DATABASE_URL it was started with. Nothing to export."""

import os
import signal
import sys


def _exit_on_sigterm(signum, frame) -> None:
    raise SystemExit(128 + signum)  # unwind, so an embedded server started for this command is stopped


def main() -> None:
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "kheish.settings")
    from django.core.management import execute_from_command_line

    from kheish.launcher import command_configuration

    signal.signal(signal.SIGTERM, _exit_on_sigterm)
    with command_configuration():
        execute_from_command_line(sys.argv)


if __name__ == "__main__":
    main()
