"""The ticket page and the admin show where a ticket came from and its conversation: messages in
order, direction, sender, time and attachment names; the text escaped, the bytes never there."""

import pytest
from django.urls import reverse

from refundagent.inbox.services import inbound_message_receive

pytestmark = pytest.mark.django_db


@pytest.fixture
def unknown_sender_ticket(tenant):
    first = inbound_message_receive(
        tenant=tenant,
        source="email",
        sender="mallory@example.net",
        sender_verified=True,
        subject="Refund",
        text="Refund <script>alert(1)</script> my order",
        message_id="<a@x>",
        attachments=[
            {"name": "invoice.pdf", "size": 2048, "content_type": "application/pdf"},
            {"name": "huge.mov", "size": 99 * 1024 * 1024, "content_type": "video/quicktime"},
        ],
    ).ticket
    inbound_message_receive(
        tenant=tenant,
        source="email",
        sender="mallory@example.net",
        sender_verified=True,
        subject="Re: Refund",
        text="Second message",
        message_id="<b@x>",
        in_reply_to="<a@x>",
    )
    return first


def test_the_ticket_page_shows_the_source_and_the_conversation_in_order(client, unknown_sender_ticket, make_user):
    client.force_login(make_user("lead", "support"))

    html = client.get(reverse("ticket", args=[unknown_sender_ticket.pk])).content.decode()

    assert "came in by email" in html and "no customer" in html
    conversation = html.split('id="conversation"', 1)[1].split("</section>", 1)[0]
    assert conversation.index("Refund &lt;script&gt;") < conversation.index("Second message")
    assert "<script>alert(1)" not in html
    assert conversation.count("from mallory@example.net") == 2
    assert "invoice.pdf (2.0\xa0KB)" in conversation and "huge.mov" in conversation and "skipped" in conversation


def test_a_ticket_filed_on_the_form_has_no_conversation_card(client, make_user, tenant, customer):
    from refundagent.models import Ticket

    support = make_user("lead", "support")
    ticket = Ticket.objects.create(
        tenant=tenant, customer=customer, message="Refund please.", currency="", created_by=support
    )
    client.force_login(support)

    html = client.get(reverse("ticket", args=[ticket.pk])).content.decode()

    assert 'id="conversation"' not in html and "filed by lead (web form)" in html


def test_the_admin_shows_the_messages_read_only(client, unknown_sender_ticket, make_user):
    client.force_login(make_user("operator", "operator", is_staff=True))

    for name in ("admin:refundagent_ticket_change", "admin:refundagent_escalatedticket_change"):
        response = client.get(reverse(name, args=[unknown_sender_ticket.pk]))
        html = response.content.decode()
        assert response.status_code == 200
        assert "Second message" in html and "mallory@example.net" in html and "invoice.pdf" in html
        assert 'name="messages-0-text"' not in html  # no form field: read only
