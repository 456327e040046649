"""The one router of ``/v1``: every endpoint is a ViewSet registered on it in ``kheish/urls.py``.

DRF's ``SimpleRouter`` (no trailing slash), with two additions:

* **singleton resources** (the policy in force, the service status, an agent's grants, a session's memory
  preview): one object at the prefix itself, no id. Their handlers are ``read`` (GET), ``replace`` (PUT) and
  ``submit`` (POST); not ``list``/``create``, which would tell the schema generator the answer is a page.
* **detail actions before the detail route**, so that a lookup that may contain ``/`` (a skill name is matched
  with ``[\\s\\S]+`` so that an encoded ``/`` reaches the name rules and gets a 400) still routes
  ``learning-skills/{name}/revoke`` to its action rather than to the detail view of ``{name}/revoke``.

Nested collections are registered with their parent's id in the prefix
(``sessions/(?P<session_id>[^/]+)/runs``), the same segment Django's ``<str:…>`` converter matches.
"""

from __future__ import annotations

from rest_framework.routers import Route, SimpleRouter

# a path segment, as Django's <str:...> converter matches it (dots allowed, unlike the router's default)
SEGMENT = "[^/]+"

_list, _dynamic_list, _detail, _dynamic_detail = SimpleRouter.routes


class V1Router(SimpleRouter):
    routes = [
        _list,
        _dynamic_list,
        Route(
            url=r"^{prefix}{trailing_slash}$",
            mapping={"get": "read", "put": "replace", "post": "submit"},
            name="{basename}",
            detail=False,
            initkwargs={},
        ),
        _dynamic_detail,
        _detail,
    ]

    def __init__(self) -> None:
        super().__init__(trailing_slash=False)


def nested(parent: str, kwarg: str, rest: str) -> str:
    """The prefix of a collection under one parent object: ``nested("sessions", "session_id", "runs")``."""
    return f"{parent}/(?P<{kwarg}>{SEGMENT})/{rest}"
