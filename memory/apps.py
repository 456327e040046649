from django.apps import AppConfig


class MemoryConfig(AppConfig):
    default_auto_field = "django.db.models.BigAutoField"
    name = "memory"
    verbose_name = "Memory (sessions, runs, recovered run memory)"

    def ready(self) -> None:
        from memory import checks, hooks, run_memory  # noqa: F401 - registers system checks

        hooks.register("terminal_run", lambda run: run_memory.record_terminal_run(run, fresh=True))
