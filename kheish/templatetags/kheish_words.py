"""Wire values in the words an operator reads (issue 25.3): ``{% load kheish_words %}`` then
``{{ mode|mode_label }}``, ``{{ reason|plain_reason }}``, ``{{ actor|actor_label }}``. The API keeps the spec's values
(docs/agents.md, "Glossary"); the words live in ``memory.admin_display``, which the ModelAdmins use too."""

from __future__ import annotations

from django import template

from memory.admin_display import MODE_LABELS, actor_display
from memory.admin_display import plain_reason as _plain_reason

register = template.Library()


@register.filter
def mode_label(mode: str) -> str:
    """A learning-policy mode (``manual_only`` | ``shadow`` | ``enabled``) as an operator reads it."""
    return MODE_LABELS.get(mode, mode)


@register.filter
def plain_reason(text: str) -> str:
    return _plain_reason(text)


@register.filter
def actor_label(actor: str) -> str:
    return actor_display(actor)
