from django.core.management.base import BaseCommand

from kheish import maintenance


class Command(BaseCommand):
    help = "Find and fix derived-state drift (run memory, skills). Dry run unless --apply."

    def add_arguments(self, parser):
        parser.add_argument("--apply", action="store_true", help="change things (default: report only)")

    def handle(self, *args, apply, **options):
        summary = maintenance.repair_all(apply=apply, source="repair_command", log=self.stdout.write)
        verb = "fixed" if apply else "would fix"
        for section, result in summary.items():
            self.stdout.write(f"{section}: {verb} {result}")
        if not apply:
            self.stdout.write("dry run: nothing changed (use --apply)")
