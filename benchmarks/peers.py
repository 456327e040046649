"""Side by side (issue 23.4): the same facts in LangGraph's PostgresStore, mem0 and Kheish, on the same
PostgreSQL (pgvector) with the same WordLlama embeddings, figures with their ratio to LangGraph's in-process
search. Peers run in-process as libraries; Kheish over HTTP (gunicorn on loopback, keep-alive), as an agent
sees it. Systems alternate in rounds (``ROUNDS``); each figure is the median of its rounds' medians.

Peers are optional (``pip install -e '.[peers]'``): a peer that is not installed, or cannot run offline here,
is skipped with the reason printed, and Kheish's figures are printed alone. mem0 runs with ``infer=False``
(no LLM: each fact stored as given) and a LangChain embedder wrapping WordLlama; its LLM is configured
against an unreachable loopback address so that nothing can be sent anywhere.

Figures per size: search top-10 (LangGraph ``store.search``, mem0 ``Memory.search``, Kheish memory-search),
Kheish's floor (``GET /v1/sessions/{id}``) and run open (prompt assembly with both sections), adds one at a
time (LangGraph ``put``, mem0 ``add``, Kheish ``POST /v1/learnings``), and Kheish's bulk path
(``import_memories``' batches); and memory-search and a run open less the floor (issue 23.2's targets: at most 6
and 12 ms). The loads are vacuumed, analysed and checkpointed before anything is timed."""

from __future__ import annotations

import http.client
import json
import os
import statistics
import tempfile
import time
import uuid
from collections.abc import Callable
from urllib.parse import quote

from django.db import connection

from benchmarks.harness import Results, database_url_of, grant_project, gunicorn_server, gunicorn_worker_rss_mib
from benchmarks.recall_scale import QUERIES, sentences
from learnings.services.imports import ImportItem, import_batches
from learnings.validation import LearningScope
from memory import embedding
from memory.identity import api_key_create
from memory.sessions import project_create, session_create

ROUNDS = 5
PER_ROUND = 20
ADDS_PER_ROUND = 20
NAMESPACE = ("bench", "facts")
USER = "bench-user"


class Embedder:
    """WordLlama through one cache: every system gets the very same vectors for the same text."""

    def __init__(self) -> None:
        self.vectors: dict[str, list[float]] = {}

    def __call__(self, texts) -> list[list[float]]:
        missing = [t for t in dict.fromkeys(texts) if t not in self.vectors]
        if missing:
            for text, vector in zip(missing, embedding.embed_many(missing), strict=True):
                self.vectors[text] = [float(x) for x in vector]
        return [self.vectors[t] for t in texts]


def _rotated(systems: list, round_: int) -> list:
    """The systems in this round's order: each round starts one system later, so none always goes first."""
    start = round_ % len(systems)
    return systems[start:] + systems[:start]


def timed(func: Callable[[int], object], count: int) -> list[float]:
    samples = []
    for i in range(count):
        start = time.perf_counter()
        func(i)
        samples.append((time.perf_counter() - start) * 1000)
    return samples


# ---- the peers ----------------------------------------------------------------------------------------------


class LangGraphPeer:
    name = "langgraph"

    def __init__(self, url: str, embed: Embedder) -> None:
        from langgraph.store.postgres import PostgresStore

        self._context = PostgresStore.from_conn_string(
            url, index={"dims": embedding.DIMENSIONS, "embed": embed, "fields": ["content"]}
        )
        self.store = self._context.__enter__()
        self.store.setup()

    def load(self, facts: list[str]) -> None:
        from langgraph.store.base import PutOp

        for start in range(0, len(facts), 1000):
            self.store.batch(
                [
                    PutOp(NAMESPACE, f"f{start + i}", {"content": text})
                    for i, text in enumerate(facts[start : start + 1000])
                ]
            )

    def search(self, query: str) -> object:
        return self.store.search(NAMESPACE, query=query, limit=10)

    def add(self, text: str) -> None:
        self.store.put(NAMESPACE, uuid.uuid4().hex, {"content": text})

    def close(self) -> None:
        with connection.cursor() as cursor:
            cursor.execute("DROP TABLE IF EXISTS store_vectors, store, store_migrations, vector_migrations CASCADE")
        self._context.__exit__(None, None, None)


class Mem0Peer:
    name = "mem0"

    def __init__(self, settings: dict, embed: Embedder) -> None:
        os.environ.setdefault("MEM0_TELEMETRY", "False")
        from mem0 import Memory
        from mem0.embeddings.base import EmbeddingBase

        class WordLlama(EmbeddingBase):
            """mem0's embedder interface over the shared WordLlama cache (mem0's own providers need a network
            model or an extra package; this one is the same model every system here uses)."""

            def embed(self, text, memory_action=None):
                return embed([text])[0]

        self.collection = f"mem0_bench_{os.getpid()}"
        self.history = os.path.join(tempfile.mkdtemp(prefix="mem0-bench-"), "history.db")
        config = {
            "vector_store": {
                "provider": "pgvector",
                "config": {
                    "connection_string": database_url_of(settings).replace("postgres://", "postgresql://", 1),
                    "collection_name": self.collection,
                    "embedding_model_dims": embedding.DIMENSIONS,
                    "hnsw": True,
                },
            },
            # Constructed offline (a client object, no request), then replaced by WordLlama below.
            "embedder": {
                "provider": "openai",
                "config": {
                    "api_key": "not-needed",
                    "embedding_dims": embedding.DIMENSIONS,
                    "openai_base_url": "http://127.0.0.1:9/v1",
                },
            },
            # Never called (infer=False); a loopback address nobody listens on, so nothing can leave the host.
            "llm": {
                "provider": "openai",
                "config": {"api_key": "not-needed", "openai_base_url": "http://127.0.0.1:9/v1", "model": "none"},
            },
            "history_db_path": self.history,
        }
        self.memory = Memory.from_config(config)
        self.memory.embedding_model = WordLlama()
        self.embed = embed

    def load(self, facts: list[str]) -> None:
        from datetime import UTC, datetime

        store = self.memory.vector_store  # no bulk add in mem0: its vector store's batch insert, same payloads
        for start in range(0, len(facts), 1000):
            chunk = facts[start : start + 1000]
            now = datetime.now(UTC).isoformat()
            store.insert(
                vectors=self.embed(chunk),
                payloads=[{"data": t, "user_id": USER, "created_at": now, "hash": str(hash(t))} for t in chunk],
                ids=[str(uuid.uuid4()) for _ in chunk],
            )

    def search(self, query: str) -> object:
        return self.memory.search(query, top_k=10, filters={"user_id": USER})

    def add(self, text: str) -> None:
        self.memory.add(text, user_id=USER, infer=False)

    def close(self) -> None:
        with connection.cursor() as cursor:
            cursor.execute(f'DROP TABLE IF EXISTS "{self.collection}" CASCADE')
        if os.path.exists(self.history):
            os.unlink(self.history)


def peers(embed: Embedder) -> list:
    """The peers that can run here (the others are named, with the reason, and skipped)."""
    running = []
    url = database_url_of(connection.settings_dict)
    for name, build in (
        ("langgraph", lambda: LangGraphPeer(url, embed)),
        ("mem0", lambda: Mem0Peer(connection.settings_dict, embed)),
    ):
        try:
            running.append(build())
        except ImportError as exc:
            print(f"peers: {name} skipped - not installed ({exc.name}); pip install -e '.[peers]'", flush=True)
        except Exception as exc:  # noqa: BLE001 - a peer that cannot run offline here: say so, go on
            print(f"peers: {name} skipped - cannot run here: {type(exc).__name__}: {str(exc)[:200]}", flush=True)
    return running


# ---- Kheish over HTTP -------------------------------------------------------------------------------------


class KheishHttp:
    name = "kheish"

    def __init__(self, port: int, key: str, operator_key: str, session_ids: list[str], project_id: str) -> None:
        self.conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
        self.headers = {"Authorization": f"Bearer {key}", "Content-Type": "application/json"}
        self.operator = {"Authorization": f"Bearer {operator_key}", "Content-Type": "application/json"}
        self.sessions = session_ids
        self.project_id = project_id
        self.opened = 0

    def request(self, method: str, path: str, body: dict | None = None, headers: dict | None = None) -> dict:
        try:
            self.conn.request(
                method, path, body=json.dumps(body) if body is not None else None, headers=headers or self.headers
            )
            response = self.conn.getresponse()
        except (http.client.RemoteDisconnected, ConnectionError):  # the server closed an idle connection
            self.conn.close()
            self.conn.request(
                method, path, body=json.dumps(body) if body is not None else None, headers=headers or self.headers
            )
            response = self.conn.getresponse()
        data = response.read()
        if response.status >= 300:
            raise RuntimeError(f"{method} {path}: {response.status} {data[:200]!r}")
        return json.loads(data) if data else {}

    def floor(self, i: int) -> object:
        return self.request("GET", f"/v1/sessions/{self.sessions[0]}")

    def search(self, query: str) -> object:
        return self.request("GET", f"/v1/sessions/{self.sessions[0]}/memory-search?query={quote(query)}&limit=10")

    def open_run(self, query: str) -> dict:
        session = self.sessions[1 + self.opened % (len(self.sessions) - 1)]
        self.opened += 1
        return self.request("POST", f"/v1/sessions/{session}/runs", {"input": {"content": query}})

    def cancel(self, run: dict) -> None:
        self.request("POST", f"/v1/runs/{run['run_id']}/cancel", {})

    def add(self, text: str) -> None:
        self.request(
            "POST",
            "/v1/learnings",
            {"scope": {"kind": "project", "id": self.project_id}, "kind": "fact", "content": text},
            headers=self.operator,
        )


def run(results: Results, *, sizes: list[int]) -> None:
    embed = Embedder()
    embed(["warm up"])
    running = peers(embed)
    operator = api_key_create(name="bench-peers-ops", role="operator", actor="bench")
    agent = api_key_create(name="bench-peers", role="agent", actor="bench")
    try:
        for size in sizes:
            _size(results, size, embed, running, operator, agent)
    finally:
        for peer in running:
            peer.close()


def _size(results: Results, size: int, embed: Embedder, running: list, operator, agent) -> None:
    label = f"{size} facts in one scope"
    facts = sentences(size)
    project_id = f"peers-{size}"
    project_create(project_id=project_id, name=project_id, actor=operator.api_key.user)
    grant_project(agent.api_key.user, project_id)
    print(f"peers: {label} - embedding and loading…", flush=True)
    embed(facts)
    started = time.perf_counter()
    scope = LearningScope(kind="project", id=project_id)
    batches = (
        [
            ImportItem(external_id=f"f{start + i}", content=text, kind="fact", scope=scope)
            for i, text in enumerate(facts[start : start + 1000])
        ]
        for start in range(0, size, 1000)
    )
    for _ in import_batches(batches, actor="operator:bench", expected=size):  # as import_memories runs them
        pass
    results.add(
        f"peers.{size}.kheish.bulk_import",
        size / (time.perf_counter() - started),
        "facts/s",
        label + "; import_memories batches of 1000, embeddings included",
    )
    for peer in running:
        peer.load(facts)
    with connection.cursor() as cursor:  # every system's tables as autovacuum leaves them a minute after a load,
        cursor.execute("VACUUM ANALYZE")  # and the pages the loads dirtied written out before anything is timed
        cursor.execute("CHECKPOINT")
    sessions = [
        session_create(owner=agent.api_key.user, project_ids=[project_id], operator=True).public_id for _ in range(4)
    ]
    figures: dict[str, list[float]] = {}
    with gunicorn_server(connection.settings_dict) as port:
        kheish = KheishHttp(port, agent.plaintext, operator.plaintext, sessions, project_id)
        for i in range(10):  # warm both workers and their connections
            kheish.floor(i)
            kheish.search(QUERIES[i % len(QUERIES)])
        systems = [*running, kheish]
        for round_ in range(ROUNDS):
            order = _rotated(systems, round_)
            for system in order:
                name = system.name
                figures.setdefault(f"{name}.search", []).append(
                    statistics.median(timed(lambda i, s=system: s.search(QUERIES[i % len(QUERIES)]), PER_ROUND))
                )
                if system is kheish:
                    figures.setdefault("kheish.floor", []).append(statistics.median(timed(kheish.floor, PER_ROUND)))
                    samples = []
                    for i in range(PER_ROUND):  # each run cancelled after it was timed (one in flight a session)
                        start = time.perf_counter()
                        opened = kheish.open_run(QUERIES[i % len(QUERIES)])
                        samples.append((time.perf_counter() - start) * 1000)
                        kheish.cancel(opened)
                    figures.setdefault("kheish.open_run", []).append(statistics.median(samples))
        results.add(
            f"peers.{size}.kheish.web_worker_rss",
            gunicorn_worker_rss_mib(port),
            "MiB",
            label + "; largest gunicorn worker after searches and run opens",
        )
        rates: dict[str, list[float]] = {}
        for round_ in range(ROUNDS):  # alternated as the searches are: a noisy moment does not favour one system
            order = _rotated(systems, round_)
            for system in order:
                adds = timed(
                    lambda i, s=system, r=round_: s.add(
                        f"Fresh fact {r}.{i} for {s.name} at {size}: deploys on day {i}."
                    ),
                    ADDS_PER_ROUND,
                )
                rates.setdefault(system.name, []).append(1000 * len(adds) / sum(adds))
        for system in systems:
            results.add(
                f"peers.{size}.{system.name}.adds",
                statistics.median(rates[system.name]),
                "facts/s",
                label
                + f"; one at a time, median of {ROUNDS} alternated rounds of {ADDS_PER_ROUND}"
                + ("; POST /v1/learnings over HTTP" if system is kheish else ""),
            )
    base = statistics.median(figures["langgraph.search"]) if "langgraph.search" in figures else None
    for name, values in figures.items():
        value = statistics.median(values)
        ratio = f", {value / base:.1f}x LangGraph search" if base else ""
        how = "HTTP keep-alive" if name.startswith("kheish") else "in-process"
        results.add(
            f"peers.{size}.{name}.p50",
            value,
            "ms",
            f"{label}; median of {ROUNDS} alternated rounds of {PER_ROUND}; {how}{ratio}",
        )
    floor = statistics.median(figures["kheish.floor"])
    for name, what, target in (("search", "memory-search", 6), ("open_run", "run open", 12)):  # issue 23.2
        results.add(
            f"peers.{size}.kheish.{name}_over_floor.p50",
            statistics.median(figures[f"kheish.{name}"]) - floor,
            "ms",
            f"{label}; the {what} median less the floor's (the issue's target: at most {target} ms)",
        )
