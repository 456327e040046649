from django.apps import AppConfig


class LearningsConfig(AppConfig):
    default_auto_field = "django.db.models.BigAutoField"
    name = "learnings"
    verbose_name = "Learnings (candidates, published learnings, learning policy)"

    def ready(self) -> None:
        # Imported here, not at the top: models and the modules using them load only once the app registry is
        # ready (Django's rule for AppConfig.ready). The learning plane reacts to memory through memory.hooks.
        from django.db import transaction

        from learnings import policy_in_force, tasks
        from memory import hooks

        def queue_capture(run) -> None:
            run_pk = run.pk
            # Claimed: a replay will not repeat it. robust: the write has committed, so its response is a success
            # even when the database or broker fails here; what was not queued the replay takes (issue 22.2).
            transaction.on_commit(lambda: tasks.queue_captures([run_pk]), robust=True)

        def semantic_capture_enabled() -> bool:
            return policy_in_force.current_policy().capture.semantic_candidates.enabled

        def scope_dependents(scope_key: str) -> dict[str, int]:
            from learnings.models import Learning, LearningCandidate

            return {
                "learnings": Learning.objects.filter(scope_key=scope_key).count(),
                "learning candidates": LearningCandidate.objects.filter(scope_key=scope_key).count(),
            }

        hooks.register(hooks.TERMINAL_RUN, queue_capture)
        hooks.register(hooks.SCOPE_DEPENDENTS, scope_dependents)
        hooks.register(hooks.SEMANTIC_CAPTURE_ENABLED, semantic_capture_enabled)
