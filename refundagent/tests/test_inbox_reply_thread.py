"""The product's reply to the customer carries the support address as Reply-To and is kept in the
conversation with its Message-ID; the customer's answer to it comes back through the inbox and
joins the ticket (docs/inbox.md, "Threading"). The reply goes through a real local SMTP server."""

import json

import pytest

from refundagent.models import Ticket, TicketMessage
from refundagent.tests.payments_support import approve, ticket_awaiting_approval
from tests.factories import manual_payout_record

from .inbox_support import INBOX, post_postmark, postmark_payload

pytestmark = pytest.mark.django_db


@pytest.fixture
def refunded(inbox, policy, make_order, make_user, settings, django_capture_on_commit_callbacks):
    settings.PAYMENT_GATEWAY = "manual"
    support, finance = make_user("support", "support"), make_user("finance", "finance")
    order = make_order("100.00", external_id="ORD-MAIL", payment_ref="pi_mail123456")
    ticket, request = ticket_awaiting_approval(order=order, filer=support, amount="30.00", key="mail-1")
    with django_capture_on_commit_callbacks(execute=True):
        approve(request, finance)
    manual_payout_record(request, reference="BANK-TRF-77")
    ticket.refresh_from_db()
    assert ticket.status == Ticket.Status.REFUNDED
    return ticket, support


def test_the_customers_answer_to_our_reply_joins_the_ticket(
    smtp_server, refunded, api_client, client, django_capture_on_commit_callbacks
):
    ticket, support = refunded
    api = api_client(support)

    # When support sends the reviewed reply
    with django_capture_on_commit_callbacks(execute=True):
        sent = api.post(f"/api/tickets/{ticket.pk}/reply", "{}", content_type="application/json")

    # Then the email answers to the support inbox, and the conversation has it with its Message-ID
    assert sent.status_code == 202, sent.content
    [received] = smtp_server.messages
    email = received["message"]
    assert email["Reply-To"] == INBOX
    out = TicketMessage.objects.get(ticket=ticket, direction="out")
    assert f"<{out.message_id}>" == email["Message-ID"]

    # When Ada answers it (her client sets In-Reply-To to our Message-ID)
    answer = postmark_payload(
        subject="Re: your refund", text="Thank you, received.", extra_headers=[("In-Reply-To", email["Message-ID"])]
    )
    assert post_postmark(client, answer).status_code == 200

    # Then it joins the ticket: no new ticket, and the API shows both directions in order
    assert Ticket.objects.count() == 1
    messages = api.get(f"/api/tickets/{ticket.pk}").json()["messages"]
    assert [(m["direction"], m["text"]) for m in messages] == [
        ("out", out.text),
        ("in", "Thank you, received."),
    ]


def test_an_answer_naming_our_message_id_only_in_references_joins_too(
    smtp_server, refunded, api_client, client, django_capture_on_commit_callbacks
):
    ticket, support = refunded
    with django_capture_on_commit_callbacks(execute=True):
        api_client(support).post(f"/api/tickets/{ticket.pk}/reply", json.dumps({}), content_type="application/json")
    our_id = smtp_server.messages[0]["message"]["Message-ID"]

    post_postmark(client, postmark_payload(text="One more thing", extra_headers=[("References", f"<a@b> {our_id}")]))

    assert Ticket.objects.count() == 1
    assert ticket.messages.filter(direction="in").get().text == "One more thing"


def test_without_an_inbox_address_the_reply_has_no_reply_to(
    smtp_server, refunded, api_client, django_capture_on_commit_callbacks
):
    ticket, support = refunded
    ticket.tenant.inbox_address.delete()

    with django_capture_on_commit_callbacks(execute=True):
        api_client(support).post(f"/api/tickets/{ticket.pk}/reply", "{}", content_type="application/json")

    assert smtp_server.messages[0]["message"]["Reply-To"] is None
