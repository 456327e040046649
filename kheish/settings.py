"""Kheish Memory settings: one module, driven by the environment (django-environ)."""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path

import environ
from django.core.exceptions import ImproperlyConfigured

from kheish import service_config

BASE_DIR = service_config.REPO_DIR
VAR_DIR = service_config.VAR_DIR  # KHEISH_VAR_DIR, else <repo>/var

env = environ.Env()
environ.Env.read_env(BASE_DIR / ".env", overwrite=False) if (BASE_DIR / ".env").exists() else None

DEBUG = env.bool("DEBUG", default=False)
# SECRET_KEY, else the key `make run` generated in var/secret_key (kheish.service_config).
SECRET_KEY = service_config.secret_key()
if not SECRET_KEY:
    if not DEBUG:
        raise ImproperlyConfigured(service_config.NO_SECRET_KEY.format(path=service_config.SECRET_KEY_FILE))
    SECRET_KEY = "debug-only-insecure-key"  # only with DEBUG=1

ALLOWED_HOSTS = env.list("ALLOWED_HOSTS", default=["127.0.0.1", "localhost"])
CSRF_TRUSTED_ORIGINS = env.list("CSRF_TRUSTED_ORIGINS", default=[])

INSTALLED_APPS = [
    "django.contrib.admin",
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "whitenoise.runserver_nostatic",
    "django.contrib.staticfiles",
    "rest_framework",
    "django_filters",
    "drf_spectacular",
    "drf_spectacular_sidecar",
    "kheish.apps.SignInLockoutsConfig",  # django-axes, labelled for operators
    "memory",
    "learnings",
    "skills",
    "kheish",
]

MIDDLEWARE = [
    "django.middleware.security.SecurityMiddleware",
    "kheish.ops.RequestMetricsMiddleware",  # request latency histograms for /metrics
    "kheish.api.middleware.BodySizeLimitMiddleware",
    "whitenoise.middleware.WhiteNoiseMiddleware",
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
    "django.middleware.clickjacking.XFrameOptionsMiddleware",
    "axes.middleware.AxesMiddleware",  # renders the admin sign-in lockout (must be last)
]

# Admin sign-in: django-axes refuses a locked-out client before the password is hashed (~0.8 s of CPU each).
AUTHENTICATION_BACKENDS = [
    "axes.backends.AxesStandaloneBackend",
    "django.contrib.auth.backends.ModelBackend",
]

ROOT_URLCONF = "kheish.urls"
WSGI_APPLICATION = "kheish.wsgi.application"

TEMPLATES = [
    {
        "BACKEND": "django.template.backends.django.DjangoTemplates",
        "DIRS": [BASE_DIR / "templates"],
        "APP_DIRS": True,
        "OPTIONS": {
            "context_processors": [
                "django.template.context_processors.request",
                "django.contrib.auth.context_processors.auth",
                "django.contrib.messages.context_processors.messages",
            ],
        },
    },
]

# PostgreSQL only: DATABASE_URL, else the URL `make run` was started with, else the running embedded server
# (kheish.service_config). No database → a loud error naming what to run, never a fallback to another database.
_database_url = service_config.configured_database_url()
if not _database_url:
    raise ImproperlyConfigured(service_config.NO_DATABASE.format(pgdata=service_config.PGDATA))
DATABASES = {"default": env.db_url_config(_database_url)}
if DATABASES["default"]["ENGINE"] != "django.db.backends.postgresql":
    raise ImproperlyConfigured(
        f"Kheish Memory runs on PostgreSQL only: DATABASE_URL must be postgres://..., "
        f"not {_database_url.partition(':')[0]}:... (unset it to use the embedded PostgreSQL)."
    )
DATABASES["default"]["ATOMIC_REQUESTS"] = False
# OLTP tuning: the service's queries are small and indexed; parallel workers and JIT only add latency.
# HNSW (pgvector) searches scan iteratively until the scope filters are met (learnings.recall_sql); on a server
# without pgvector the two hnsw.* options are plain placeholders. Prepared statements run from their generic plan
# (``plan_cache_mode``): only the statements ``memory.sql.prepared_cursor`` binds on the server are prepared with
# parameters, each written for one plan whatever the values; left to choose, PostgreSQL planned the recall pool
# afresh on every call (its custom plans look cheaper than the generic one), ~1.5-2.4 ms a call.
DATABASES["default"].setdefault("OPTIONS", {}).setdefault(
    "options",
    "-c max_parallel_workers_per_gather=0 -c jit=off -c hnsw.iterative_scan=relaxed_order -c hnsw.ef_search=120 "
    "-c plan_cache_mode=force_generic_plan",
)
# Server-side prepared statements (psycopg): a statement run through ``memory.sql.prepared_cursor`` (the recall
# pool's, the hand-written hot reads of ``memory.sql.select``, a run open's write, the counters, the publication
# of a fact: texts that are stable, values all parameters) is prepared after this many runs on a connection, then
# planned once instead of on every call. Django's own cursors (the ORM) bind client-side and are never prepared.
# "off" disables it (e.g. behind a connection pooler in transaction mode that does not track prepared statements).
_prepare_threshold = env.str("KHEISH_DB_PREPARE_THRESHOLD", default="2").strip().lower()
DATABASES["default"]["OPTIONS"].setdefault(
    "prepare_threshold", None if _prepare_threshold in {"off", "none", ""} else int(_prepare_threshold)
)
DATABASES["default"]["CONN_MAX_AGE"] = env.int("DB_CONN_MAX_AGE", default=60)
DATABASES["default"]["CONN_HEALTH_CHECKS"] = True
# The same backend, with a health check that asks the socket first and the server only when in doubt
# (kheish/postgres/base.py): no ``SELECT 1`` round trip on every request.
DATABASES["default"]["ENGINE"] = "kheish.postgres"
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"

AUTH_PASSWORD_VALIDATORS = [
    {"NAME": "django.contrib.auth.password_validation.MinimumLengthValidator"},
    {"NAME": "django.contrib.auth.password_validation.CommonPasswordValidator"},
]

LANGUAGE_CODE = "en-us"
TIME_ZONE = "UTC"
USE_I18N = True
USE_TZ = True

STATIC_URL = "static/"
STATIC_ROOT = VAR_DIR / "staticfiles"
STORAGES = {
    "default": {"BACKEND": "django.core.files.storage.FileSystemStorage"},
    "staticfiles": {"BACKEND": "whitenoise.storage.CompressedStaticFilesStorage"},
}

LOGIN_URL = "/admin/login/"

# Request bodies: reject oversized JSON with a 413 problem (see kheish.api.middleware).
KHEISH_MAX_BODY_BYTES = env.int("KHEISH_MAX_BODY_BYTES", default=1_048_576)
DATA_UPLOAD_MAX_MEMORY_SIZE = KHEISH_MAX_BODY_BYTES
# What one object may store as metadata, and what one list page may carry (memory.limits, issue 19.8).
KHEISH_MAX_METADATA_BYTES = env.int("KHEISH_MAX_METADATA_BYTES", default=16 * 1024)
KHEISH_MAX_PAGE_BYTES = env.int("KHEISH_MAX_PAGE_BYTES", default=2 * 1024 * 1024)

REST_FRAMEWORK = {
    "DEFAULT_AUTHENTICATION_CLASSES": [
        "kheish.api.authentication.ApiKeyAuthentication",
        "rest_framework.authentication.SessionAuthentication",
    ],
    "DEFAULT_PERMISSION_CLASSES": ["rest_framework.permissions.IsAuthenticated"],
    "DEFAULT_PAGINATION_CLASS": "kheish.api.pagination.LimitOffsetPagination",
    "DEFAULT_FILTER_BACKENDS": ["django_filters.rest_framework.DjangoFilterBackend"],
    "DEFAULT_METADATA_CLASS": "kheish.api.metadata.V1Metadata",
    "DEFAULT_SCHEMA_CLASS": "drf_spectacular.openapi.AutoSchema",
    "EXCEPTION_HANDLER": "kheish.api.errors.problem_exception_handler",
    "DEFAULT_RENDERER_CLASSES": ["rest_framework.renderers.JSONRenderer"],
    "DEFAULT_PARSER_CLASSES": ["kheish.api.parsers.SafeJSONParser"],
    "UNAUTHENTICATED_USER": None,
    "DEFAULT_THROTTLE_CLASSES": ["kheish.api.throttling.PrincipalRateThrottle"],
}

# Throttling (kheish.api.throttling). Rates are N/<period>: 6000/m, 100/5m (units s, m, h, d); "off" disables.
# Requests per principal: a ceiling for runaway clients, far above a busy agent's pace.
KHEISH_THROTTLE_AGENT = env.str("KHEISH_THROTTLE_AGENT", default="6000/m")
KHEISH_THROTTLE_OPERATOR = env.str("KHEISH_THROTTLE_OPERATOR", default="6000/m")
# A verified API key is remembered by each process for this many seconds (memory.identity), so a request costs
# no key lookup; a revocation made elsewhere (another worker, the admin of another process) takes effect within
# this time, one made in the same process at once. 0 looks the key up on every request.
KHEISH_API_KEY_CACHE_SECONDS = env.float("KHEISH_API_KEY_CACHE_SECONDS", default=5.0)
# Failed API-key authentications; past these, failures get 429 + Retry-After (a valid key is never refused).
KHEISH_AUTH_FAILURES_PER_ADDRESS = env.str("KHEISH_AUTH_FAILURES_PER_ADDRESS", default="100/5m")
KHEISH_AUTH_FAILURES_PER_PREFIX = env.str("KHEISH_AUTH_FAILURES_PER_PREFIX", default="20/5m")
# Caches. "default": KHEISH_CACHE_URL (redis://... to share it between workers and nodes), local memory if unset.
# "throttle": where the per-principal request counts live (KHEISH_THROTTLE_CACHE_URL): "database" (one atomic
# upsert per request in an UNLOGGED table, kheish.counters: one count for every worker and node on this
# database), a redis://... URL (shared too, no database round trip), or locmemcache:// (free, but each
# gunicorn worker then counts on its own, so the ceiling multiplies with the workers). Unset: the
# KHEISH_CACHE_URL cache when that is set, else "database". "auth_failures": the failed-key counts
# (KHEISH_AUTH_FAILURE_CACHE_URL), Django's database cache by default, shared the same way (its table is made
# by `createcachetable`, which `make run` and the test database run).
_DATABASE_COUNTERS = {"BACKEND": "kheish.counters.DatabaseCounterCache"}
_cache_url = env.str("KHEISH_CACHE_URL", default="")
_throttle_cache_url = env.str("KHEISH_THROTTLE_CACHE_URL", default="") or _cache_url or "database"
CACHES = {
    "default": env.cache_url_config(_cache_url or "locmemcache://"),
    "throttle": dict(_DATABASE_COUNTERS)
    if _throttle_cache_url == "database"
    else env.cache_url_config(_throttle_cache_url),
    "auth_failures": env.cache_url("KHEISH_AUTH_FAILURE_CACHE_URL", default="dbcache://kheish_auth_failures"),
}

# Admin sign-in lockout (django-axes): after KHEISH_ADMIN_LOCKOUT_FAILURES failed sign-ins from one address
# that address may not sign in for KHEISH_ADMIN_LOCKOUT_MINUTES (each further try restarts the wait). Clear it
# early with `manage.py axes_reset_ip ADDRESS` (or `axes_reset` for all).
AXES_FAILURE_LIMIT = env.int("KHEISH_ADMIN_LOCKOUT_FAILURES", default=10)
AXES_COOLOFF_TIME = timedelta(minutes=env.int("KHEISH_ADMIN_LOCKOUT_MINUTES", default=15))
AXES_LOCKOUT_PARAMETERS = ["ip_address"]
AXES_RESET_ON_SUCCESS = True
AXES_CLIENT_IP_CALLABLE = "kheish.api.throttling.client_address"
AXES_LOCKOUT_CALLABLE = "kheish.admin_lockout.lockout_response"
AXES_ONLY_ADMIN_SITE = False
AXES_VERBOSE = False  # no start-up banner on every manage.py command

SPECTACULAR_SETTINGS = {
    "TITLE": "Kheish Memory API",
    "DESCRIPTION": "Governed memory for AI agents: session journal, recovered run memory, learnings, skills.",
    "VERSION": "1.0.0",
    "SERVE_INCLUDE_SCHEMA": False,
    "SERVE_PERMISSIONS": ["rest_framework.permissions.IsAuthenticated"],
    "SCHEMA_PATH_PREFIX": "/v1",
    "COMPONENT_SPLIT_REQUEST": True,
    "POSTPROCESSING_HOOKS": [
        "drf_spectacular.hooks.postprocess_schema_enums",
        "kheish.api.schema.problem_responses",
    ],  # problem+json errors (issue 14.15)
    "ENUM_NAME_OVERRIDES": {"LearningKindEnum": "learnings.vocabulary.LearningKind"},
    "SWAGGER_UI_DIST": "SIDECAR",
    "SWAGGER_UI_FAVICON_HREF": "SIDECAR",
    "REDOC_DIST": "SIDECAR",
}

# Celery: Redis/RabbitMQ when CELERY_BROKER_URL is set, else `database://`: a queue table in the service's own
# PostgreSQL (kheish.broker). A message stays in the table until acknowledged; a claimed message carries a lease
# (KHEISH_BROKER_LEASE_S) that its live worker renews, so a killed worker's messages are taken again once it lapses.
CELERY_BROKER_URL = env.str("CELERY_BROKER_URL", default="database://")
if CELERY_BROKER_URL.startswith("database://"):
    CELERY_BROKER_TRANSPORT_OPTIONS = {
        "lease_seconds": env.float("KHEISH_BROKER_LEASE_S", default=30.0),
        # An idle worker is woken by a notification when a task is queued; this is the longest it waits anyway.
        "polling_interval": env.float("KHEISH_BROKER_POLL_S", default=1.0),
    }
# Beat sends only while it holds a PostgreSQL advisory lock: one beat schedules across all nodes (kheish.beat).
CELERY_BEAT_SCHEDULER = "kheish.beat:LeaderScheduler"
CELERY_TASK_ACKS_LATE = True
CELERY_TASK_REJECT_ON_WORKER_LOST = True
CELERY_WORKER_PREFETCH_MULTIPLIER = 1
CELERY_TASK_IGNORE_RESULT = True
CELERY_TASK_ALWAYS_EAGER = False
CELERY_TIMEZONE = "UTC"
CELERY_BEAT_SCHEDULE = {
    "prune-run-memory": {"task": "memory.tasks.prune_run_memory", "schedule": 300.0},
    "repair-all-planes": {"task": "kheish.tasks.repair_all_planes", "schedule": 3600.0},
    "learning-shadow-review": {"task": "learnings.tasks.shadow_review_sweep", "schedule": 120.0},
    "learning-replay-captures": {
        "task": "learnings.tasks.replay_pending_captures",
        "schedule": env.float("KHEISH_REPLAY_EVERY_S", default=20.0),
    },
}
# A queued task's claim on its run (capture) or candidate (review): while it holds, a replay or sweep does not
# queue the id again; a claim whose task was lost or failed (its worker died, the database went away while it ran)
# lapses after this many seconds and the next replay (KHEISH_REPLAY_EVERY_S) takes the id again.
KHEISH_QUEUE_LEASE_S = env.float("KHEISH_QUEUE_LEASE_S", default=40.0)

# Model provider (OpenAI-compatible). Unset → model-backed steps are off.
KHEISH_LLM_BASE_URL = env.str("KHEISH_LLM_BASE_URL", default="")
KHEISH_LLM_MODEL = env.str("KHEISH_LLM_MODEL", default="")
KHEISH_LLM_API_KEY = env.str("KHEISH_LLM_API_KEY", default="not-needed")
KHEISH_LLM_TIMEOUT_MS = env.int("KHEISH_LLM_TIMEOUT_MS", default=15000)

# Scrubbing.
KHEISH_REDACT_TOKENS = env.str("KHEISH_REDACT_TOKENS", default="")
KHEISH_REDACT_TOKENS_FILE = env.str("KHEISH_REDACT_TOKENS_FILE", default="")
KHEISH_PHONE_REGIONS = env.str("KHEISH_PHONE_REGIONS", default="")

# Skills directory owned by the service.
KHEISH_SKILLS_DIR = Path(env.str("KHEISH_SKILLS_DIR", default=str(VAR_DIR / "skills")))
KHEISH_CATALOG_DIR = Path(env.str("KHEISH_CATALOG_DIR", default=str(BASE_DIR / "catalog")))
# How long one walk of the catalog directory is reused (edits on disk show up within this many seconds).
KHEISH_CATALOG_RESCAN_SECONDS = env.float("KHEISH_CATALOG_RESCAN_SECONDS", default=2.0)

LOG_LEVEL = env.str("LOG_LEVEL", default="INFO")
LOG_JSON = env.bool("LOG_JSON", default=not DEBUG)
LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "formatters": {
        "json": {
            "()": "pythonjsonlogger.json.JsonFormatter",
            "fmt": "%(asctime)s %(levelname)s %(name)s %(message)s",
        },
        "plain": {"format": "%(asctime)s %(levelname)s %(name)s %(message)s"},
    },
    "handlers": {"console": {"class": "logging.StreamHandler", "formatter": "json" if LOG_JSON else "plain"}},
    "root": {"handlers": ["console"], "level": LOG_LEVEL},
    "loggers": {"django.db.backends": {"level": "WARNING"}},
}

if not DEBUG:
    SESSION_COOKIE_HTTPONLY = True
    X_FRAME_OPTIONS = "DENY"
    SECURE_CONTENT_TYPE_NOSNIFF = True
