"""Test overrides: eager Celery, fast hashing, a fixed key."""

import os

os.environ.setdefault("SECRET_KEY", "test-only-secret-key-not-for-production")
os.environ.setdefault("LOG_JSON", "0")
os.environ.setdefault("LOG_LEVEL", "WARNING")

from kheish.settings import *  # noqa: F403
from kheish.settings import VAR_DIR

PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]
CELERY_TASK_ALWAYS_EAGER = True
CELERY_TASK_EAGER_PROPAGATES = True
CELERY_BROKER_URL = "memory://"
KHEISH_SKILLS_DIR = VAR_DIR / "test-skills"
STORAGES = {
    "default": {"BACKEND": "django.core.files.storage.FileSystemStorage"},
    "staticfiles": {"BACKEND": "django.contrib.staticfiles.storage.StaticFilesStorage"},
}

(VAR_DIR / "staticfiles").mkdir(parents=True, exist_ok=True)
KHEISH_CATALOG_DIR = VAR_DIR / "test-catalog-empty"  # tests that need catalog skills point settings at tmp_path
KHEISH_CATALOG_DIR.mkdir(parents=True, exist_ok=True)
KHEISH_CATALOG_RESCAN_SECONDS = 0  # tests edit catalog files and expect to see the edit at once
