"""Memory search for one session, across the planes (``kheish.composition.memory_search``, the same call as
``GET /v1/sessions/{id}/memory-search``): a session picker, the query and the hits, each linking to its source.
Read-only."""

from __future__ import annotations

from django.http import HttpRequest, HttpResponse
from django.urls import reverse

from kheish import composition
from kheish.console.common import Stamp, render
from kheish.console.forms import SearchForm
from memory import public_ids
from memory.models import Session


def search(request: HttpRequest) -> HttpResponse:
    recent = list(Session.objects.select_related("owner", "persona").order_by("-updated_at_ms")[:200])
    wanted = request.GET.get("session", "")
    chosen = None
    wanted_pk = public_ids.parse_id(wanted, public_ids.SESSION)
    if wanted_pk is not None:
        chosen = (
            next((s for s in recent if s.public_id == wanted), None)
            or Session.objects.select_related("owner", "persona").filter(pk=wanted_pk).first()
        )
    if chosen is not None and chosen not in recent:
        recent.insert(0, chosen)
    choices = [
        (
            s.public_id,
            f"{s.public_id} · {s.owner.get_username()}"
            + (f" · {s.persona.persona_id}" if s.persona is not None else ""),
        )
        for s in recent
    ]
    form = SearchForm(request.GET if "session" in request.GET else None, sessions=choices, initial={"limit": 12})
    result = None
    if form.is_bound and form.is_valid() and chosen is not None:
        result = composition.memory_search(chosen, form.cleaned_data["q"], form.cleaned_data["limit"] or 12)
        for hit in result["results"]:
            hit["when"] = Stamp(hit["timestamp_ms"])
            hit["url"] = None
            if hit["kind"] == "learning":
                pk = public_ids.parse_id(hit["source_id"], public_ids.LEARNING)
                hit["url"] = reverse("console:learning", args=[pk])
            elif hit["kind"] == "recovered_run":
                pk = public_ids.parse_id(hit["source_id"], public_ids.RUN)
                hit["url"] = reverse("admin:memory_run_change", args=[pk])
    return render(
        request,
        "search.html",
        "Search memory",
        tab="search",
        form=form,
        result=result,
        chosen=chosen,
        session_url=reverse("admin:memory_session_change", args=[chosen.pk]) if chosen else None,
    )
