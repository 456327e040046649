"""The OpenAPI document the service serves at ``/v1/schema/``, for the tests that read what it says.

Generating it costs a tenth of a second or more of CPU, and it depends on the code alone (never on a test's
rows), so a test process asks the endpoint once: the first call goes through the given client and checks the
answer; later calls get a fresh copy of that same answer. The tests of the endpoint itself (status codes,
permissions, warnings: tests/kheish/test_ops_endpoints.py, test_plane1_api.py) ask it every time.
"""

from __future__ import annotations

import json

_served: bytes | None = None


def served_schema(client) -> dict:
    """``GET /v1/schema/?format=json`` as JSON (``client``: an authenticated test client)."""
    global _served
    if _served is None:
        response = client.get("/v1/schema/", {"format": "json"})
        assert response.status_code == 200, response.content[:500]
        _served = response.content
    return json.loads(_served)
