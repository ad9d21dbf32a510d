"""`{{ code|label:"ticket_status" }}` and `{{ value|when }}`: the one label mapping and the one
date format (refundagent.labels), for every template."""

from django import template

from refundagent import labels

register = template.Library()


@register.filter
def label(code, kind=""):
    return labels.label(code, kind)


@register.filter
def when(value):
    return labels.when(value)


@register.filter
def ago(value):
    return labels.ago(value)
