from django.apps import AppConfig


class SkillsConfig(AppConfig):
    default_auto_field = "django.db.models.BigAutoField"
    name = "skills"
    verbose_name = "Skills (catalog, promoted procedural skills)"

    def ready(self) -> None:
        # Imported here, not at the top: models and the modules using them load only once the app registry is
        # ready (Django's rule for AppConfig.ready). The skills plane reacts to learnings through memory.hooks.
        from memory import hooks
        from skills import checks  # noqa: F401 - registers the doctor checks
        from skills.services import on_learning_revoking

        hooks.register(hooks.LEARNING_REVOKING, on_learning_revoking)
