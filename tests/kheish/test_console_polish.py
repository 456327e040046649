"""Issue 13.3 (part): relative ages, the admin's branding and where "View site" goes."""

from __future__ import annotations

import pytest

from kheish.console.common import Stamp
from memory.clock import now_ms


@pytest.mark.parametrize(
    ("seconds", "expected"),
    [
        (5, "just now"),
        (44, "just now"),
        (45, "1 min ago"),
        (59, "1 min ago"),
        (60, "1 min ago"),
        (119, "1 min ago"),
        (120, "2 min ago"),
        (3600, "1 h ago"),
        (2 * 86400, "2 d ago"),
        (-50, "in 1 min"),
        (-7200, "in 2 h"),
    ],
)
def test_relative_ages(seconds, expected):
    assert Stamp(now_ms() - seconds * 1000).relative == expected


@pytest.mark.django_db
def test_the_admin_is_branded_and_view_site_is_useful(admin_client):
    page = admin_client.get("/admin/").content.decode()
    assert "Kheish Memory" in page and "Django administration" not in page
    assert 'href="/"' in page  # View site
    assert admin_client.get("/").status_code == 200
