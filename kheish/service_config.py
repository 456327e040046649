"""The runtime configuration every process of one checkout shares: where ``var/`` is, the secret key and the
database. Standard library only: the settings, ``manage.py`` and the launcher all read it before Django starts.

* ``var/``: ``KHEISH_VAR_DIR``, else ``<repo>/var`` (embedded PostgreSQL data, secret key,
  static files, skills).
* secret key: ``SECRET_KEY``, else ``var/secret_key`` (generated once, mode 0600, by ``make run`` or
  ``manage.py``).
* database (PostgreSQL only): ``DATABASE_URL``; else the ``DATABASE_URL`` that ``make run`` was last started
  with (``var/service.json``); else the embedded PostgreSQL under ``var/pgdata``. The settings find the
  embedded server's address in its ``postmaster.pid`` while it runs and refuse to start otherwise;
  ``manage.py`` joins the running server, or starts it for the command's duration (``kheish.launcher``).

So a command typed in a second shell reaches the same database, with the same secret key, as the running
service, without exporting anything - and never falls back to another database.
"""

from __future__ import annotations

import json
import os
import secrets
from pathlib import Path

REPO_DIR = Path(__file__).resolve().parent.parent
VAR_DIR = Path(os.environ.get("KHEISH_VAR_DIR") or REPO_DIR / "var").resolve()
PGDATA = VAR_DIR / "pgdata"
SECRET_KEY_FILE = VAR_DIR / "secret_key"
SERVICE_FILE = VAR_DIR / "service.json"
DB_NAME = "kheish"
DB_USER = "postgres"

NO_DATABASE = (
    "No database configured: DATABASE_URL is unset and the embedded PostgreSQL ({pgdata}) is not running. "
    "Start the service with `make run` (it starts the embedded server), run management commands as "
    "`.venv/bin/python manage.py ...` (it starts or joins the embedded server for the command), "
    "or set DATABASE_URL=postgres://USER:PASSWORD@HOST:PORT/NAME."
)
NO_SECRET_KEY = (
    "No secret key: SECRET_KEY is unset and {path} does not exist. Run `make run` once (it generates the key "
    "there), run commands as `.venv/bin/python manage.py ...` (same), or set SECRET_KEY."
)


def database_url(host: str, port: int, name: str = DB_NAME) -> str:
    """The embedded server's URL. django-environ maps it to HOST='' + OPTIONS={'host': <socket dir>, 'port':
    ...}, which Django's psycopg backend passes straight to libpq (a percent-encoded socket path in the
    netloc is not decoded)."""
    return f"postgres://{DB_USER}@/{name}?host={host}&port={port}"


def embedded_url() -> str | None:
    """The URL of the embedded PostgreSQL under ``PGDATA`` while it runs (its socket exists), else None.
    ``postmaster.pid`` names the port (line 4) and the socket directory (line 5)."""
    try:
        lines = (PGDATA / "postmaster.pid").read_text().splitlines()
        port, socket_dir = int(lines[3]), lines[4].strip()
    except (OSError, IndexError, ValueError):
        return None
    if not socket_dir or not (Path(socket_dir) / f".s.PGSQL.{port}").exists():
        return None
    return database_url(socket_dir, port)


def recorded_service() -> dict:
    """What ``make run`` last ran with: ``{"database_url": <its DATABASE_URL> | None (embedded), "port": ...}``;
    ``{}`` when it never ran here."""
    try:
        data = json.loads(SERVICE_FILE.read_text())
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def record_service(*, database_url: str | None, port: str) -> None:
    """Remember the service's configuration for commands run beside it (0600: the URL may hold a password)."""
    VAR_DIR.mkdir(parents=True, exist_ok=True)
    tmp = SERVICE_FILE.with_suffix(".tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as fh:
        json.dump({"database_url": database_url, "port": port, "pid": os.getpid()}, fh)
    tmp.replace(SERVICE_FILE)


def configured_database_url() -> str | None:
    """``DATABASE_URL``, else the one the service was started with, else the running embedded server's URL."""
    return os.environ.get("DATABASE_URL") or recorded_service().get("database_url") or embedded_url()


def secret_key() -> str:
    """``SECRET_KEY``, else the key ``make run`` generated in ``var/secret_key``; "" when neither exists."""
    key = os.environ.get("SECRET_KEY", "")
    if key:
        return key
    try:
        return SECRET_KEY_FILE.read_text().strip()
    except FileNotFoundError:
        return ""


def ensure_secret_key() -> str:
    """Never run with a hard-coded key: generate one once in ``var/secret_key`` (0600), export it, return it."""
    if os.environ.get("SECRET_KEY"):
        return os.environ["SECRET_KEY"]
    VAR_DIR.mkdir(parents=True, exist_ok=True)
    try:
        fd = os.open(SECRET_KEY_FILE, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    except FileExistsError:
        key = SECRET_KEY_FILE.read_text().strip()
    else:
        key = secrets.token_urlsafe(50)
        with os.fdopen(fd, "w") as fh:
            fh.write(key + "\n")
    if not key:
        raise SystemExit(f"{SECRET_KEY_FILE} is empty: delete it (a new key is generated) or set SECRET_KEY")
    os.environ["SECRET_KEY"] = key
    return key
