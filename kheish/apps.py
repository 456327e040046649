from django.apps import AppConfig


class KheishConfig(AppConfig):
    name = "kheish"
    verbose_name = "Kheish Memory"
