"""Fixtures shared by the learning plane's tests."""

from __future__ import annotations

import pytest

from learnings import recall_sql


@pytest.fixture(params=["pgvector", "fallback"])
def vectors(request, monkeypatch):
    """Both candidate paths: pgvector's HNSW arm where the server has it, the recent-rows arm otherwise."""
    if request.param == "pgvector" and not recall_sql.has_vectors():
        pytest.skip("this PostgreSQL server has no pgvector")
    if request.param == "fallback":
        monkeypatch.setattr(recall_sql, "has_vectors", lambda: False)
    return request.param
