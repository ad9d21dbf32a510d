"""The ticket page, its status endpoint and the escalate/close actions."""

from decimal import Decimal

import pytest
from django.urls import reverse
from django.utils import timezone

from approvals.gate import Proposal, policy_current, policy_gate_evaluate
from approvals.models import ApprovalRequest
from approvals.services.decisions import approval_request_decide
from approvals.services.requests import approval_request_create
from refundagent.models import AgentRun, RefundDraft, Ticket
from refundagent.services import ticket_create
from refundagent.ticket_state import ticket_transition
from refundagent.tracing import trace_record
from tests.factories import manual_payout_record


@pytest.fixture
def ticket(user, django_capture_on_commit_callbacks):
    """An acme ticket for ORD-5001 asking 200.00, filed without running the agent."""
    with django_capture_on_commit_callbacks(execute=False):
        return ticket_create(
            user=user("acme-support"),
            order="ORD-5001",
            customer="CUST-1001",
            message="Headphones broke. Contact me at jane.doe@example.com",
            requested_amount="200.00",
        )


def _stopped_for_approval(ticket: Ticket) -> ApprovalRequest:
    """Given the agent drafted a refund and the gate asked finance for the allowed amount."""
    run = AgentRun.objects.create(ticket=ticket, provider="offline", status=AgentRun.Status.STOPPED)
    policy = policy_current(ticket.tenant)
    proposal = Proposal(
        recommendation="refund",
        amount=Decimal("200.00"),
        policy_version=policy.version,
        customer_reply="Hi Jane, we are reviewing your request and will get back to you.",
    )
    verdict = policy_gate_evaluate(
        order=ticket.order,
        policy=policy,
        proposal=proposal,
        requested_amount=ticket.requested_amount,
        now=timezone.now(),
    )
    RefundDraft.objects.create(
        run=run,
        ticket=ticket,
        recommendation="refund",
        amount=Decimal("200.00"),
        currency="USD",
        policy_version=policy.version,
        rationale="Within the 30-day window.",
        customer_reply=proposal.customer_reply,
        gate_verdict=verdict.as_dict(),
    )
    request, _ = approval_request_create(
        order=ticket.order,
        policy=policy,
        verdict=verdict,
        idempotency_key=f"web-test:{ticket.pk}",
        requested_by=ticket.created_by,
        ticket_ref=ticket.pk,
        trace_id=str(ticket.trace_id),
    )
    # The agent's path: queued -> running -> approval_required, through the transition table.
    assert ticket_transition(ticket=ticket, to=Ticket.Status.RUNNING)
    assert ticket_transition(
        ticket=ticket, to=Ticket.Status.APPROVAL_REQUIRED, detail="Finance must approve 120.00 USD."
    )
    return request


def test_ticket_page_shows_status_evidence_and_the_trace(login, ticket):
    response = login("acme-support").get(reverse("ticket", args=[ticket.pk]))

    assert response.status_code == 200
    html = response.content.decode()
    assert 'data-status="queued"' in html
    assert 'data-active="true"' in html  # the page polls while the agent works
    assert "Wireless Headphones" in html
    assert "visa ****4242" in html
    assert "120.00 USD" in html  # refundable
    assert "filed" in html  # the first trace event
    assert str(ticket.trace_id) in html


def test_ticket_page_shows_the_customers_name_and_email_never_payment_refs(login, ticket):
    """Support writes to the customer (the reply goes to this address), so the ticket page names
    them as a helpdesk does; the processor's payment reference stays hidden."""
    order = ticket.order
    payment_ref = order.payments.get().payment_ref
    email = order.customer.email

    response = login("acme-support").get(reverse("ticket", args=[ticket.pk]))

    html = response.content.decode()
    assert payment_ref not in html
    customer = html.split('id="customer">', 1)[1].split("</dd>", 1)[0]
    assert "Jane Doe" in customer and "CUST-1001" in customer
    assert f'<a class="customer-email" href="mailto:{email}">{email}</a>' in customer
    # The trace is the redacted record: the email the customer quoted in the message is not in it.
    trace = html.split('id="trace"', 1)[1]
    assert email not in trace


def test_ticket_list_and_queue_show_the_customers_name_and_email(login, ticket):
    client = login("acme-support")
    ticket_transition(ticket=ticket, to=Ticket.Status.RUNNING)
    ticket_transition(ticket=ticket, to=Ticket.Status.ESCALATED, detail="A person decides.")

    for page in ("tickets", "ticket_queue"):
        html = client.get(reverse(page)).content.decode()
        assert "Jane Doe" in html and 'href="mailto:jane.doe@example.com"' in html, page


@pytest.mark.parametrize("username", ["globex-support", "globex-finance"])
def test_another_tenants_staff_never_see_the_customers_email(login, ticket, username):
    client = login(username)

    assert client.get(reverse("ticket", args=[ticket.pk])).status_code == 404
    for page in ("tickets", "ticket_queue"):
        response = client.get(reverse(page))
        assert response.status_code == 200
        assert "jane.doe@example.com" not in response.content.decode()


def test_ticket_page_shows_draft_reply_approval_and_ledger(login, ticket):
    request = _stopped_for_approval(ticket)

    response = login("acme-support").get(reverse("ticket", args=[ticket.pk]))

    html = response.content.decode()
    assert 'data-status="approval_required"' in html
    assert 'data-active="false"' in html
    assert "Within the 30-day window." in html
    assert "refund-policy-v4" in html
    assert 'id="reply-text"' in html and "we are reviewing your request" in html
    assert "passed to our team for review" in html  # the ticket's reply for its current outcome
    # not sendable while finance decides: the product sends it only once the outcome is final
    assert "It can be sent once the outcome is final" in html and 'id="reply-form"' not in html
    assert 'id="approval-status" data-status="pending" title="pending">Waiting for approval<' in html
    assert "0 of 1" in html
    assert response.context["approval"]["id"] == request.pk
    assert response.context["approval"]["amount"] == Decimal("120.00")
    assert "No refund recorded for this order." in html
    assert reverse("ticket_close", args=[ticket.pk]) not in html  # waiting for finance: not closable


def test_ticket_page_after_finance_approves_shows_refunded_and_the_ledger_entry(
    login, ticket, user, django_capture_on_commit_callbacks
):
    request = _stopped_for_approval(ticket)
    with django_capture_on_commit_callbacks(execute=True):
        approval_request_decide(
            request_id=request.pk, user=user("acme-finance"), decision="approve", args_hash=request.args_hash
        )
    manual_payout_record(request)  # the manual gateway: refunded once finance records the payout

    response = login("acme-support").get(reverse("ticket", args=[ticket.pk]))

    ticket.refresh_from_db()
    assert ticket.status == Ticket.Status.REFUNDED
    html = response.content.decode()
    assert 'data-status="refunded"' in html
    [entry] = response.context["ledger"]["entries"]
    assert entry["amount"] == Decimal("120.00")
    assert response.context["approval"]["ledger_entry"] == entry["refund_id"]
    assert "this ticket" in html
    assert "<strong>120.00 USD</strong>" in html  # the entry's amount, with two places
    assert 'id="refunded-total">120.00 USD<' in html


def test_another_tenants_ticket_is_a_404_everywhere(login, ticket):
    client = login("globex-support")

    assert client.get(reverse("ticket", args=[ticket.pk])).status_code == 404
    assert client.get(reverse("ticket_status", args=[ticket.pk])).status_code == 404
    assert client.post(reverse("ticket_escalate", args=[ticket.pk])).status_code == 404
    assert client.post(reverse("ticket_close", args=[ticket.pk])).status_code == 404
    ticket.refresh_from_db()
    assert ticket.status == Ticket.Status.QUEUED


def test_status_endpoint_returns_the_status_and_new_trace_events(login, ticket):
    trace_record(ticket=ticket, span="tool", decision="allow", tool="orders.lookup_order", duration_ms=12)
    client = login("acme-support")

    everything = client.get(reverse("ticket_status", args=[ticket.pk])).json()
    since_first = client.get(reverse("ticket_status", args=[ticket.pk]), {"since": 1}).json()

    assert everything["status"] == "queued"
    assert everything["active"] is True
    assert [e["seq"] for e in everything["events"]] == [1, 2]
    assert [e["tool"] for e in since_first["events"]] == ["orders.lookup_order"]
    assert "data" not in since_first["events"][0]


def test_status_endpoint_reports_a_stop_state_as_inactive(login, ticket):
    _stopped_for_approval(ticket)

    data = login("acme-finance").get(reverse("ticket_status", args=[ticket.pk])).json()

    assert data["status"] == "approval_required"
    assert data["stop_reason"] == "approval_required"
    assert data["stop_detail"] == "Finance must approve 120.00 USD."
    assert data["active"] is False


def test_escalate_moves_the_ticket_to_escalated_with_the_note(login, ticket):
    client = login("acme-support")

    response = client.post(reverse("ticket_escalate", args=[ticket.pk]), {"note": "customer is a VIP"}, follow=True)

    ticket.refresh_from_db()
    assert ticket.status == Ticket.Status.ESCALATED
    assert ticket.stop_detail == "Escalated by acme-support: customer is a VIP"
    assert f"Ticket #{ticket.pk} escalated" in response.content.decode()


def test_close_closes_a_stopped_ticket(login, ticket):
    Ticket.objects.filter(pk=ticket.pk).update(status=Ticket.Status.ESCALATED)

    response = login("acme-support").post(reverse("ticket_close", args=[ticket.pk]), follow=True)

    ticket.refresh_from_db()
    assert ticket.status == Ticket.Status.CLOSED
    assert f"Ticket #{ticket.pk} closed." in response.content.decode()


def test_close_is_refused_while_finance_decides(login, ticket):
    _stopped_for_approval(ticket)

    response = login("acme-support").post(reverse("ticket_close", args=[ticket.pk]), follow=True)

    ticket.refresh_from_db()
    assert response.status_code == 200
    assert ticket.status == Ticket.Status.APPROVAL_REQUIRED
    assert "cannot be closed now" in response.content.decode()


def test_escalate_is_refused_on_a_closed_ticket(login, ticket):
    Ticket.objects.filter(pk=ticket.pk).update(status=Ticket.Status.CLOSED)

    response = login("acme-support").post(reverse("ticket_escalate", args=[ticket.pk]), follow=True)

    ticket.refresh_from_db()
    assert ticket.status == Ticket.Status.CLOSED
    assert "it cannot be escalated" in response.content.decode()


def test_actions_need_post(login, ticket):
    client = login("acme-support")

    assert client.get(reverse("ticket_escalate", args=[ticket.pk])).status_code == 405
    assert client.get(reverse("ticket_close", args=[ticket.pk])).status_code == 405


def test_actions_need_the_csrf_token(user, ticket):
    from django.test import Client

    client = Client(enforce_csrf_checks=True)
    client.force_login(user("acme-support"))

    response = client.post(reverse("ticket_escalate", args=[ticket.pk]))

    assert response.status_code == 403
    ticket.refresh_from_db()
    assert ticket.status == Ticket.Status.QUEUED


def test_close_with_a_reply_over_the_limit_is_refused_and_closes_nothing(login, ticket):
    # given an escalated ticket, and a reply one character over the 4000 the form takes
    Ticket.objects.filter(pk=ticket.pk).update(status=Ticket.Status.ESCALATED)
    reply = "We are sorry.\n" * 285 + "x" * 11
    assert len(reply) == 4001

    # when support closes it with that reply and a note
    response = login("acme-support").post(
        reverse("ticket_close", args=[ticket.pk]), {"note": "voucher sent", "reply": reply}
    )

    # then the page is shown again with the error and the reply as typed, and the ticket is unchanged
    # (before: 302 "closed", closed with an empty reply and no note)
    assert response.status_code == 422
    html = response.content.decode()
    assert "Not closed: Reply to the customer: Ensure this value has at most 4000 characters (it has 4001)." in html
    assert response.context["close_form"]["reply"].value() == reply
    ticket.refresh_from_db()
    assert (ticket.status, ticket.customer_reply) == (Ticket.Status.ESCALATED, "")
    assert not ticket.trace_events.filter(decision="close").exists()


def test_a_reply_that_fits_the_textarea_is_accepted_though_its_line_breaks_are_posted_as_crlf(login, ticket):
    # given an escalated ticket, and a reply of exactly 4000 characters as the textarea counts them
    # (a line break is one), which the browser posts with CRLF line breaks: 4285 characters
    Ticket.objects.filter(pk=ticket.pk).update(status=Ticket.Status.ESCALATED)
    typed = "We are sorry.\n" * 285 + "x" * 10
    assert len(typed) == 4000

    # when support closes the ticket with it
    response = login("acme-support").post(
        reverse("ticket_close", args=[ticket.pk]), {"reply": typed.replace("\n", "\r\n")}
    )

    # then it is closed with that reply, its line breaks stored as LF
    assert response.status_code == 302
    ticket.refresh_from_db()
    assert ticket.status == Ticket.Status.CLOSED
    assert ticket.customer_reply == typed


def test_escalate_with_a_note_over_the_limit_is_refused_and_escalates_nothing(login, ticket):
    # given a queued ticket
    # when support escalates it with a note one character over the 500 the form takes
    response = login("acme-support").post(reverse("ticket_escalate", args=[ticket.pk]), {"note": "x" * 501})

    # then the page says why and the ticket is unchanged (before: 302 "escalated", without the note)
    assert response.status_code == 422
    assert "Not escalated: Note: Ensure this value has at most 500 characters (it has 501)." in (
        response.content.decode()
    )
    ticket.refresh_from_db()
    assert (ticket.status, ticket.stop_detail) == (Ticket.Status.QUEUED, "")


def test_escalating_over_a_pending_finance_request_needs_a_confirmation_and_a_note(login, ticket):
    # given a ticket whose request waits for finance
    request = _stopped_for_approval(ticket)
    client = login("acme-support")
    page = client.get(reverse("ticket", args=[ticket.pk])).content.decode()
    # then the escalate form says it withdraws that request and asks for a note and a confirmation
    assert f'name="withdraw" value="{request.pk}"' in page and f"Withdraw request #{request.pk}" in page
    # when support clicks Escalate without confirming (or with no note)
    for body in ({"note": "VIP"}, {"withdraw": str(request.pk)}, {"note": "VIP", "withdraw": "999999"}):
        response = client.post(reverse("ticket_escalate", args=[ticket.pk]), body)
        # then nothing moves: 422, the reason, the request still pending, the ticket still waiting
        assert response.status_code == 422, body
        assert "withdraws finance's pending request" in response.content.decode()
        request.refresh_from_db()
        ticket.refresh_from_db()
        assert (request.status, ticket.status) == ("pending", Ticket.Status.APPROVAL_REQUIRED)
    # when they confirm with a note
    response = client.post(
        reverse("ticket_escalate", args=[ticket.pk]), {"note": "Customer called", "withdraw": str(request.pk)}
    )
    # then the ticket is escalated and the request withdrawn
    assert response.status_code == 302
    request.refresh_from_db()
    ticket.refresh_from_db()
    assert ticket.status == Ticket.Status.ESCALATED and request.status != "pending"
