from django.apps import AppConfig


class LearningsConfig(AppConfig):
    default_auto_field = "django.db.models.BigAutoField"
    name = "learnings"
    verbose_name = "Learnings (candidates, published learnings, learning policy)"

    def ready(self) -> None:
        # Imported here, not at the top: models and the modules using them load only once the app registry is
        # ready (Django's rule for AppConfig.ready). The learning plane reacts to memory through memory.hooks.
        from django.db import transaction

        from learnings import policy_store, tasks
        from memory import hooks

        def queue_capture(run) -> None:
            run_pk = run.pk
            # Claimed: a replay will not repeat it. robust: the write has committed, so its response is a success
            # even when the database or broker fails here; what was not queued the replay takes (issue 22.2).
            transaction.on_commit(lambda: tasks.queue_captures([run_pk]), robust=True)

        def semantic_capture_enabled() -> bool:
            return policy_store.current_policy().capture.semantic_candidates.enabled

        hooks.register(hooks.TERMINAL_RUN, queue_capture)
        hooks.register(hooks.SEMANTIC_CAPTURE_ENABLED, semantic_capture_enabled)
