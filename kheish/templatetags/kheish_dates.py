"""``{% load kheish_dates %}`` ``{{ value|ms_date }}``: an epoch-ms value as a UTC date in a ``<time>`` element,
for the admin templates (the ModelAdmins use ``memory.admin_display`` directly)."""

from __future__ import annotations

from django import template

from memory.admin_display import ms_date as _ms_date

register = template.Library()


@register.filter
def ms_date(value):
    return _ms_date(value)
