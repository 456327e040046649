from django.apps import AppConfig


class LearningsConfig(AppConfig):
    default_auto_field = "django.db.models.BigAutoField"
    name = "learnings"
