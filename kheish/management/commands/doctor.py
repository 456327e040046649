from django.core import checks
from django.core.management.base import BaseCommand

from kheish import composition


class Command(BaseCommand):
    help = "Run system checks and report health warnings (run memory, learnings, skills)."

    def handle(self, *args, **options):
        problems = checks.run_checks(include_deployment_checks=False)
        serious = [p for p in problems if p.level >= checks.WARNING]
        for p in serious:
            self.stdout.write(f"[{p.id}] {p.msg}" + (f" (hint: {p.hint})" if p.hint else ""))
        status = composition.status_view()
        for warning in status["health"]["warnings"]:
            self.stdout.write(f"[{warning['level']}] {warning['code']}: {warning['message']}")
        ok = status["health"]["ok"] and not [p for p in problems if p.level >= checks.ERROR]
        self.stdout.write(self.style.SUCCESS("doctor: ok") if ok else self.style.ERROR("doctor: problems found"))
        if not ok:
            raise SystemExit(1)
