"""The ticket page's Zendesk card: what the product owes the Zendesk ticket and what it delivered."""

from django import template

from ..models import ZendeskWrite
from ..writeback import is_zendesk_ticket

register = template.Library()


@register.inclusion_tag("refundagent/_zendesk_writeback.html")
def zendesk_writeback(ticket):
    if not is_zendesk_ticket(ticket):
        return {"shown": False}
    writes = ZendeskWrite.objects.filter(ticket=ticket).order_by("created_at", "id")
    return {"shown": True, "ticket": ticket, "writes": list(writes)}
