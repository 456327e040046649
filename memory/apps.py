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
        _forget_verified_keys_on_change()


def _forget_verified_keys_on_change() -> None:
    """A saved or deleted key or user leaves this process's verified-key cache at once (memory.identity)."""
    from django.contrib.auth import get_user_model
    from django.db.models.signals import post_delete, post_save

    from memory.identity import forget_verified
    from memory.models import ApiKey

    def key_changed(sender, instance, **kwargs) -> None:
        forget_verified(key_pk=instance.pk)

    def user_changed(sender, instance, **kwargs) -> None:
        forget_verified(user_pk=instance.pk)

    for name, signal in (("save", post_save), ("delete", post_delete)):
        signal.connect(key_changed, sender=ApiKey, weak=False, dispatch_uid=f"kheish-verified-key-{name}")
        signal.connect(user_changed, sender=get_user_model(), weak=False, dispatch_uid=f"kheish-verified-user-{name}")
