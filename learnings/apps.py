from django.apps import AppConfig


class LearningsConfig(AppConfig):
    default_auto_field = "django.db.models.BigAutoField"
    name = "learnings"
    verbose_name = "Learnings (candidates, published learnings, learning policy)"

    def ready(self) -> None:
        from django.db import transaction

        from learnings import policy_store, tasks
        from memory import hooks

        hooks._hooks.setdefault("learning_revoking", [])

        def queue_capture(run) -> None:
            run_pk = run.pk
            transaction.on_commit(lambda: tasks.capture_run.delay(run_pk))

        hooks.register("terminal_run", queue_capture)
        hooks.semantic_capture_enabled = lambda: (
            policy_store.current_policy().capture.semantic_candidates.enabled
        )
