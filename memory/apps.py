from django.apps import AppConfig


class MemoryConfig(AppConfig):
    default_auto_field = "django.db.models.BigAutoField"
    name = "memory"
    verbose_name = "Memory (sessions, runs, recovered run memory)"

    def ready(self) -> None:
        # Imported here, not at the top: models and the modules using them load only once the app registry is
        # ready (Django's rule for AppConfig.ready).
        from memory import checks, hooks, run_memory  # noqa: F401 - checks registers the system checks

        hooks.register(hooks.TERMINAL_RUN, lambda run: run_memory.record_terminal_run(run, fresh=True))
