from django.apps import AppConfig

REVOKING_HOOK = "learning_revoking"


class SkillsConfig(AppConfig):
    default_auto_field = "django.db.models.BigAutoField"
    name = "skills"
    verbose_name = "Skills (catalog, promoted procedural skills)"

    def ready(self) -> None:
        from memory import hooks
        from skills import checks  # noqa: F401 - registers the doctor checks
        from skills.services import on_learning_revoking

        try:
            hooks.register(REVOKING_HOOK, on_learning_revoking)
        except KeyError:
            # memory.hooks predates this hook name; the learning plane only fires hooks it finds registered.
            listeners = hooks._hooks.setdefault(REVOKING_HOOK, [])
            if on_learning_revoking not in listeners:
                listeners.append(on_learning_revoking)
