from django.apps import AppConfig


class KheishConfig(AppConfig):
    name = "kheish"
    verbose_name = "Kheish Memory"


try:
    from axes.apps import AppConfig as _AxesAppConfig
except ImportError:  # pragma: no cover - axes is a declared dependency
    _AxesAppConfig = None

if _AxesAppConfig is not None:

    class SignInLockoutsConfig(_AxesAppConfig):
        """django-axes under the name an operator reads in the admin index ("Axes" says nothing)."""

        verbose_name = "Admin sign-in lockouts"
