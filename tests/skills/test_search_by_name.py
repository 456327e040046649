"""Issue 25.7: memory-search for a skill's name returns that skill whatever else matches (spec §4.21: skills are
searched by name, description and when_to_use). Many procedure learnings about other skills mention the name
more often than the skill's own fields do, and other skills' descriptions name it too: the named skill is still
returned, first among the skills."""

from __future__ import annotations

import pytest

NAME = "acc-skill-ledger"


@pytest.fixture
def crowded(ladder, make_learning):
    """An active promoted skill NAME, two other active skills whose texts mention NAME, and 40 procedure
    learnings of other skills that repeat NAME and every word of it."""
    ladder(
        make_learning(content=f"To reconcile the ledger, run {NAME}."),
        NAME,
        description="Reconcile the accounts ledger.",
        when_to_use="At month end.",
    )
    for other in ("acc-skill-ledger-export", "acc-skill-audit"):
        ladder(
            make_learning(content=f"Procedure for {other}."),
            other,
            description=f"Like {NAME}, {NAME} and {NAME}: acc skill ledger acc skill ledger.",
            when_to_use=f"After {NAME} ({NAME}).",
        )
    for n in range(40):
        make_learning(
            content=f"Procedure {n} of acc-skill-export-{n}: unlike {NAME}, {NAME} and {NAME}, "
            f"acc skill ledger steps acc skill ledger acc skill ledger."
        )


def _skills(api_client, session_id: str, query: str, limit: int = 5) -> list[str]:
    response = api_client.get(f"/v1/sessions/{session_id}/memory-search", {"query": query, "limit": limit})
    assert response.status_code == 200, response.content
    body = response.json()
    assert len(body["results"]) <= limit
    return [hit["source_id"] for hit in body["results"] if hit["kind"] == "skill"]


def test_a_query_equal_to_a_skills_name_returns_it_first_among_skills(crowded, api_client, session_id):
    for query in (NAME, NAME.upper(), f"  {NAME} "):
        found = _skills(api_client, session_id, query)
        assert found and found[0] == NAME, (query, found)


def test_a_query_naming_a_skill_returns_it(crowded, api_client, session_id):
    found = _skills(api_client, session_id, f"how do I run {NAME} at month end?", limit=3)
    assert found and found[0] == NAME
    # A longer name that contains it is named by its own query; a mere prefix of a name is not a naming.
    assert _skills(api_client, session_id, "acc-skill-ledger-export", limit=1) == ["acc-skill-ledger-export"]
    assert NAME not in _skills(api_client, session_id, "acc-skill-ledger-export", limit=1)


def test_a_skill_the_session_cannot_see_is_never_forced_in(crowded, api_client, operator_client):
    narrow = operator_client.post("/v1/sessions", {"capability_scope": ["acc-skill-audit"]}, format="json")
    assert narrow.status_code == 201, narrow.content
    assert NAME not in _skills(operator_client, narrow.json()["session_id"], NAME)
