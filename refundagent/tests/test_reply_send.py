"""Support sends the reviewed reply; the product emails it once per ticket and outcome, and only
when that outcome is true (docs/api.md, "Replies"). Django's SMTP backend talks to a real local
SMTP server (aiosmtpd); tasks run eagerly here (the real worker: test_reply_send_worker.py)."""

import json
import threading

import pytest
from django.db import connection

from ledger.exceptions import EntryStatusConflict
from ledger.models import RefundEntry, RefundStatus, Tenant
from ledger.services import ledger_refund_record_outcome, ledger_refund_record_paid
from refundagent.emails import ticket_reply_deliver
from refundagent.models import Ticket, TicketReply
from refundagent.tests.payments_support import approve, ticket_awaiting_approval
from tests.factories import manual_payout_record

pytestmark = pytest.mark.django_db


@pytest.fixture
def shop(policy, make_order, make_user, settings):
    settings.PAYMENT_GATEWAY = "manual"
    settings.EMAIL_RETRY_SECONDS = 0
    settings.EMAIL_MAX_ATTEMPTS = 3
    return {
        "order": make_order("100.00", external_id="ORD-MAIL", payment_ref="pi_mail123456"),
        "support": make_user("support", "support"),
        "finance": make_user("finance", "finance"),
    }


@pytest.fixture
def approved_ticket(shop, django_capture_on_commit_callbacks):
    """A ticket whose 30.00 refund finance approved: paid by hand not yet (entry pending)."""
    ticket, request = ticket_awaiting_approval(order=shop["order"], filer=shop["support"], amount="30.00", key="mail-1")
    with django_capture_on_commit_callbacks(execute=True):
        approve(request, shop["finance"])
    ticket.refresh_from_db()
    assert ticket.status == Ticket.Status.APPROVED
    return ticket, request


@pytest.fixture
def refunded_ticket(approved_ticket):
    ticket, request = approved_ticket
    manual_payout_record(request, reference="BANK-TRF-77")
    ticket.refresh_from_db()
    assert ticket.status == Ticket.Status.REFUNDED
    return ticket, request


def send(client, ticket, body=None, *, capture):
    with capture(execute=True):
        return client.post(f"/api/tickets/{ticket.pk}/reply", json.dumps(body or {}), content_type="application/json")


def test_send_before_the_refund_succeeded_is_refused(
    smtp_server, approved_ticket, api_client, shop, django_capture_on_commit_callbacks
):
    ticket, _ = approved_ticket

    response = send(api_client(shop["support"]), ticket, capture=django_capture_on_commit_callbacks)

    assert response.status_code == 409 and response.json()["code"] == "outcome_not_final"
    assert not TicketReply.objects.exists() and smtp_server.messages == []


def test_the_refunded_reply_is_emailed_once_with_a_stable_message_id(
    smtp_server, refunded_ticket, api_client, shop, django_capture_on_commit_callbacks
):
    ticket, _ = refunded_ticket
    client = api_client(shop["support"])

    first = send(client, ticket, capture=django_capture_on_commit_callbacks)
    second = send(client, ticket, {"text": "Another text"}, capture=django_capture_on_commit_callbacks)

    assert first.status_code == 202, first.content
    assert second.status_code == 200 and second.json()["to"] == "ada@example.com"
    [received] = smtp_server.messages
    message = received["message"]
    assert received["to"] == ["ada@example.com"]
    assert message["Message-ID"] == f"<ticket-{ticket.pk}-refunded-r{refunded_ticket[1].pk}.shop@refundagent.localhost>"
    body = message.get_payload()
    assert "We have refunded 30.00 USD" in body or "we have refunded 30.00 USD" in body
    for payment_data in ("4242", "pi_mail123456", "BANK-TRF-77"):
        assert payment_data not in message.as_string()
    # and the ticket shows it, and its trace says who sent which outcome and what became of it
    detail = client.get(f"/api/tickets/{ticket.pk}").json()
    [reply] = detail["replies"]
    assert (reply["outcome"], reply["status"], reply["to"]) == ("refunded", "sent", "ada@example.com")
    assert reply["sent_at"] and detail["reply_due"] is None
    events = client.get(f"/api/tickets/{ticket.pk}/trace").json()["events"]
    assert [e["decision"] for e in events if e["span"] == "reply"] == ["reply_queued", "reply_sent"]
    # and delivering again (a redelivered task) sends nothing more
    ticket_reply_deliver(reply_id=TicketReply.objects.get().pk)
    assert len(smtp_server.messages) == 1


def test_two_clicks_at_once_send_one_email(smtp_server, refunded_ticket, api_client, shop, transactional_db):
    ticket, _ = refunded_ticket
    clients = [api_client(shop["support"]) for _ in range(2)]
    barrier, statuses = threading.Barrier(2), []

    def click(client):
        try:
            barrier.wait()
            statuses.append(
                client.post(f"/api/tickets/{ticket.pk}/reply", "{}", content_type="application/json").status_code
            )
        finally:
            connection.close()

    threads = [threading.Thread(target=click, args=(c,)) for c in clients]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()

    assert sorted(statuses) == [200, 202]
    assert TicketReply.objects.count() == 1


def test_another_tenant_gets_404_and_finance_403(
    smtp_server, refunded_ticket, api_client, shop, make_user, django_capture_on_commit_callbacks
):
    ticket, _ = refunded_ticket
    outsider = make_user("other-support", "support", tenant=Tenant.objects.create(slug="other", name="Other"))

    assert send(api_client(outsider), ticket, capture=django_capture_on_commit_callbacks).status_code == 404
    assert send(api_client(shop["finance"]), ticket, capture=django_capture_on_commit_callbacks).status_code == 403
    assert not TicketReply.objects.exists() and smtp_server.messages == []


@pytest.mark.parametrize(
    "text, code",
    [
        ("Good news: we have refunded $30.00 to your card.", "reply_promises_payment"),
        ("We will send the money back to your account tomorrow.", "reply_promises_payment"),
        ("Your card 4242 4242 4242 4242 is on file.", "reply_payment_data"),
        ("We looked at payment pi_mail123456 for you.", "reply_payment_data"),
        ("   ", "reply_empty"),
    ],
)
def test_an_edited_holding_reply_may_not_speak_of_money_or_carry_payment_data(
    smtp_server, shop, api_client, django_capture_on_commit_callbacks, text, code
):
    ticket = Ticket.objects.create(
        tenant=shop["order"].tenant,
        order=shop["order"],
        customer=shop["order"].customer,
        message="Refund please.",
        currency="USD",
        created_by=shop["support"],
        status=Ticket.Status.ESCALATED,
        customer_reply="Hello, a member of our team is looking at your request and will get back to you.",
    )

    refused = send(api_client(shop["support"]), ticket, {"text": text}, capture=django_capture_on_commit_callbacks)
    holding = send(api_client(shop["support"]), ticket, capture=django_capture_on_commit_callbacks)

    assert refused.status_code == 422 and refused.json()["code"] == code
    assert holding.status_code == 202
    [received] = smtp_server.messages
    assert "looking at your request" in received["message"].get_payload()


def test_a_failing_smtp_server_is_retried_then_the_failure_shows(
    smtp_server, refunded_ticket, api_client, shop, django_capture_on_commit_callbacks, make_user, client
):
    ticket, _ = refunded_ticket
    smtp_server.refuse(None)

    response = send(api_client(shop["support"]), ticket, capture=django_capture_on_commit_callbacks)

    assert response.status_code == 202
    reply = TicketReply.objects.get()
    assert (reply.status, reply.attempts, smtp_server.refused) == ("failed", 3, 3)
    assert "451" in reply.last_error
    [shown] = api_client(shop["support"]).get(f"/api/tickets/{ticket.pk}").json()["replies"]
    assert shown["status"] == "failed" and "451" in shown["error"] and shown["sent_at"] is None
    decisions = [e.decision for e in ticket.trace_events.filter(span="reply").order_by("seq")]
    assert decisions == ["reply_queued", "reply_retrying", "reply_retrying", "reply_failed"]
    # and the dashboard counts it
    client.force_login(make_user("ops", "support", "finance", is_staff=True, is_superuser=True))
    page = client.get("/evals/operations/", follow=True).content.decode()
    assert "ra-replies-failed" in page


def test_a_late_failure_prompts_a_correction_which_is_sent_once(
    smtp_server, refunded_ticket, api_client, shop, django_capture_on_commit_callbacks
):
    ticket, request = refunded_ticket
    client = api_client(shop["support"])
    assert send(client, ticket, capture=django_capture_on_commit_callbacks).status_code == 202
    # when the provider fails the refund after it was announced (a late failure)
    entry = RefundEntry.objects.get(idempotency_key=request.idempotency_key)
    with django_capture_on_commit_callbacks(execute=True):
        ledger_refund_record_outcome(entry_id=entry.pk, status=RefundStatus.FAILED, reason="bank returned it")
    ticket.refresh_from_db()
    assert ticket.status != Ticket.Status.REFUNDED
    # then support is prompted for a correction
    due = client.get(f"/api/tickets/{ticket.pk}").json()["reply_due"]
    assert due == {"outcome": ticket.status, "correction": True, "told": "refunded"}
    # and the correction is a new outcome: sent once, whatever the clicks
    assert send(client, ticket, capture=django_capture_on_commit_callbacks).status_code == 202
    assert send(client, ticket, capture=django_capture_on_commit_callbacks).status_code == 200
    first, correction = smtp_server.messages
    assert first["message"]["Message-ID"] != correction["message"]["Message-ID"]
    assert "we have refunded" not in correction["message"].get_payload().lower()
    assert client.get(f"/api/tickets/{ticket.pk}").json()["reply_due"] is None


def test_a_reply_whose_outcome_stopped_being_true_before_delivery_is_not_sent(
    smtp_server, refunded_ticket, api_client, shop, django_capture_on_commit_callbacks
):
    ticket, request = refunded_ticket
    # given support's Send, its delivery not yet run
    with django_capture_on_commit_callbacks(execute=False):
        response = api_client(shop["support"]).post(
            f"/api/tickets/{ticket.pk}/reply", "{}", content_type="application/json"
        )
    assert response.status_code == 202
    # when the refund fails before the worker delivers it
    entry = RefundEntry.objects.get(idempotency_key=request.idempotency_key)
    with django_capture_on_commit_callbacks(execute=True):
        ledger_refund_record_outcome(entry_id=entry.pk, status=RefundStatus.FAILED, reason="bank returned it")
    reply = ticket_reply_deliver(reply_id=TicketReply.objects.get().pk)
    # then nothing is sent: the customer would hear something no longer true
    assert reply.status == "withdrawn" and smtp_server.messages == []


def test_recording_a_payout_twice_does_not_send_twice(
    smtp_server, refunded_ticket, api_client, shop, django_capture_on_commit_callbacks
):
    ticket, request = refunded_ticket
    assert send(api_client(shop["support"]), ticket, capture=django_capture_on_commit_callbacks).status_code == 202
    entry = RefundEntry.objects.get(idempotency_key=request.idempotency_key)
    with pytest.raises(EntryStatusConflict):
        ledger_refund_record_paid(entry_id=entry.pk, tenant=entry.tenant, reference="AGAIN", user=shop["finance"])
    assert len(smtp_server.messages) == 1


def test_support_sends_the_reply_from_the_ticket_page_once(
    smtp_server, refunded_ticket, shop, client, django_capture_on_commit_callbacks
):
    ticket, _ = refunded_ticket
    client.force_login(shop["support"])
    page = client.get(f"/tickets/{ticket.pk}/").content.decode()
    assert 'id="reply-form"' in page and 'id="reply-send"' in page

    for _ in range(2):  # a double click
        with django_capture_on_commit_callbacks(execute=True):
            response = client.post(f"/tickets/{ticket.pk}/reply/", {"text": ticket.customer_reply})
        assert response.status_code == 302

    assert len(smtp_server.messages) == 1
    page = client.get(f"/tickets/{ticket.pk}/").content.decode()
    assert 'id="reply-form"' not in page and 'id="replies"' in page and "ada@example.com" in page


def test_a_denial_by_finance_is_sent_but_the_gates_own_denial_waits_for_a_person(
    smtp_server, shop, api_client, django_capture_on_commit_callbacks
):
    from approvals.services.decisions import approval_request_decide

    client = api_client(shop["support"])
    # given a ticket the gate denied (no person decided it)
    by_gate = Ticket.objects.create(
        tenant=shop["order"].tenant,
        order=shop["order"],
        customer=shop["order"].customer,
        message="Refund please.",
        currency="USD",
        created_by=shop["support"],
        status=Ticket.Status.DENIED,
        customer_reply="Hello, we are unable to offer a refund in this case.",
    )
    # and one finance denied
    by_finance, request = ticket_awaiting_approval(
        order=shop["order"], filer=shop["support"], amount="30.00", key="deny-1"
    )
    with django_capture_on_commit_callbacks(execute=True):
        approval_request_decide(
            request_id=request.pk, user=shop["finance"], decision="deny", args_hash=request.args_hash, note="no"
        )
    by_finance.refresh_from_db()
    assert by_finance.status == Ticket.Status.DENIED

    refused = send(client, by_gate, capture=django_capture_on_commit_callbacks)
    sent_ = send(client, by_finance, capture=django_capture_on_commit_callbacks)

    assert refused.status_code == 409 and refused.json()["code"] == "outcome_not_final"
    assert sent_.status_code == 202
    [received] = smtp_server.messages
    assert "unable to offer a refund" in received["message"].get_payload()


@pytest.mark.parametrize("address", ["", "ada@example.com\r\nBcc: everyone@example.com", "not-an-address"])
def test_a_customer_email_from_the_shop_that_is_missing_or_hostile_sends_nothing(
    smtp_server, refunded_ticket, api_client, shop, django_capture_on_commit_callbacks, address
):
    ticket, _ = refunded_ticket
    type(shop["order"].customer).objects.filter(pk=shop["order"].customer_id).update(email=address)

    response = send(api_client(shop["support"]), ticket, capture=django_capture_on_commit_callbacks)

    assert response.status_code == 409 and response.json()["code"] == "no_customer_email"
    assert not TicketReply.objects.exists() and smtp_server.messages == []
