"""Measurement helpers: percentiles, a timer, peak memory, the results table and results.json."""

from __future__ import annotations

import contextlib
import json
import os
import resource
import socket
import statistics
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path

RESULTS_PATH = Path(__file__).resolve().parent / "results.json"


def percentile(samples: list[float], p: float) -> float:
    ordered = sorted(samples)
    if not ordered:
        return float("nan")
    k = (len(ordered) - 1) * p / 100
    lo, hi = int(k), min(int(k) + 1, len(ordered) - 1)
    return ordered[lo] + (ordered[hi] - ordered[lo]) * (k - lo)


def time_calls(func: Callable[[int], object], count: int, *, warmup: int = 5) -> list[float]:
    for i in range(warmup):
        func(i)
    samples = []
    for i in range(count):
        start = time.perf_counter()
        func(i)
        samples.append((time.perf_counter() - start) * 1000)
    return samples


def peak_rss_mib() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def grant_project(agent: object, project_id: str) -> None:
    """Let a benchmark's agent read a project's learnings (a session reads its bindings ∩ its owner's grants)."""
    from memory.models import AgentGrant, Project

    AgentGrant.objects.get_or_create(user=agent)[0].projects.add(Project.objects.get(project_id=project_id))


class Results:
    def __init__(self) -> None:
        self.rows: dict[str, dict] = {}

    def add(self, name: str, value: float, unit: str, size: str) -> None:
        self.rows[name] = {"value": round(value, 3), "unit": unit, "size": size}
        print(f"  {name:<48} {value:>12.3f} {unit:<6} ({size})", flush=True)

    def latency(self, name: str, samples: list[float], size: str) -> None:
        self.add(f"{name}.p50", percentile(samples, 50), "ms", size)
        self.add(f"{name}.p95", percentile(samples, 95), "ms", size)

    def write(self, path: Path = RESULTS_PATH) -> None:
        existing = {}
        if path.exists():
            try:
                existing = json.loads(path.read_text())
            except ValueError:
                existing = {}
        existing.update(self.rows)
        path.write_text(json.dumps(existing, indent=2, sort_keys=True) + "\n")

    def table(self) -> str:
        lines = [f"{'benchmark':<48} {'value':>12} unit   size", "-" * 100]
        lines += [f"{k:<48} {v['value']:>12.3f} {v['unit']:<6} {v['size']}" for k, v in self.rows.items()]
        return "\n".join(lines)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def database_url_of(settings_dict: dict) -> str:
    """A DATABASE_URL for a child process on the database this process uses (socket dir or host)."""
    host = settings_dict.get("HOST") or (settings_dict.get("OPTIONS") or {}).get("host") or ""
    port = settings_dict.get("PORT") or (settings_dict.get("OPTIONS") or {}).get("port")
    user = settings_dict.get("USER") or "postgres"
    if host.startswith("/"):
        return f"postgres://{user}@/{settings_dict['NAME']}?host={host}" + (f"&port={port}" if port else "")
    return f"postgres://{user}@{host}{':' + str(port) if port else ''}/{settings_dict['NAME']}"


@contextlib.contextmanager
def gunicorn_server(settings_dict: dict, *, workers: int = 2, threads: int = 2) -> Iterator[int]:
    """A gunicorn serving this process's database on a free loopback port; yields the port."""
    port = free_port()
    env = dict(os.environ, DATABASE_URL=database_url_of(settings_dict), ALLOWED_HOSTS="127.0.0.1,localhost")
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "gunicorn",
            "kheish.wsgi:application",
            "--bind",
            f"127.0.0.1:{port}",
            "--workers",
            str(workers),
            "--threads",
            str(threads),
            "--keep-alive",
            "75",  # as kheish/gunicorn_conf.py: idle keep-alive outlives a round
            "--log-level",
            "warning",
        ],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    try:
        deadline = time.time() + 30
        while time.time() < deadline:
            try:
                socket.create_connection(("127.0.0.1", port), timeout=0.5).close()
                break
            except OSError:
                time.sleep(0.2)
        yield port
    finally:
        proc.terminate()
        proc.wait(timeout=10)


def gunicorn_worker_rss_mib(port: int) -> float:
    """The largest resident set (VmRSS) among the workers of the gunicorn serving ``port`` (its master left out),
    read from /proc; NaN where there is no /proc."""
    worst = float("nan")
    proc = Path("/proc")
    if not proc.is_dir():
        return worst
    for entry in proc.iterdir():
        if not entry.name.isdigit():
            continue
        try:
            cmdline = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
            status = (entry / "status").read_text()
        except OSError:
            continue
        if "gunicorn" not in cmdline or f"127.0.0.1:{port}" not in cmdline:
            continue
        fields = dict(line.split(":", 1) for line in status.splitlines() if ":" in line)
        if int(fields.get("PPid", "0").strip()) == os.getpid():
            continue  # the master
        rss = int(fields.get("VmRSS", "0 kB").split()[0]) / 1024
        worst = rss if worst != worst or rss > worst else worst
    return worst


_ = statistics
