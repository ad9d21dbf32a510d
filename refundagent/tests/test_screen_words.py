"""Truthful, readable words on the support and review screens: what was refunded beside what was
asked, no "investigating" over a finished result, a closed ticket that says closed, exceptions
that name only the rules broken, labels from the one table, and no "0 minutes ago"."""

import pytest
from django.urls import reverse

from approvals.models import ApprovalRequest
from approvals.services.decisions import approval_request_decide
from refundagent.agent.loop import agent_run_ticket
from refundagent.agent.providers.scripted import ScriptedProvider
from refundagent.models import Ticket
from tests.factories import refund_draft
from tests.helpers import signed_in

pytestmark = pytest.mark.django_db


@pytest.fixture
def refunded(file_ticket, user, fake_stripe, django_capture_on_commit_callbacks):
    """A ticket asking 200.00 on ORD-5001 (120.00): the gate allowed 120.00, finance approved, paid."""
    with django_capture_on_commit_callbacks(execute=True):
        ticket = file_ticket(order="ORD-5001", amount="200.00")
    request = ApprovalRequest.objects.get(ticket_ref=ticket.pk)
    with django_capture_on_commit_callbacks(execute=True):
        approval_request_decide(
            request_id=request.pk, user=user("acme-finance"), decision="approve", args_hash=request.args_hash
        )
    ticket.refresh_from_db()
    assert ticket.status == Ticket.Status.REFUNDED
    return ticket


def test_the_ticket_list_shows_what_was_refunded_beside_what_was_asked(refunded, user):
    html = signed_in(user("acme-support")).get(reverse("tickets")).content.decode()
    assert '<th class="num">Refunded</th>' in html
    row = html.split(f'href="/tickets/{refunded.pk}/"', 1)[1].split("</tr>", 1)[0]
    assert "200.00 USD" in row and "120.00 USD" in row


def test_no_investigating_flash_over_a_finished_result(user, demo, django_capture_on_commit_callbacks):
    support = signed_in(user("acme-support"))
    with django_capture_on_commit_callbacks(execute=True):
        response = support.post(
            reverse("ticket_new"),
            {"order": "ORD-5002", "customer": "CUST-1001", "message": "The lamp flickers.", "requested_amount": ""},
        )
    html = support.get(response["Location"]).content.decode()
    assert "The agent is investigating" not in html
    assert "filed." in html and "With a person" in html


def test_a_closed_ticket_says_closed_not_escalated(file_ticket, user, django_capture_on_commit_callbacks):
    with django_capture_on_commit_callbacks(execute=True):
        ticket = file_ticket(order="ORD-5002", message="The lamp flickers.")
    ticket.refresh_from_db()
    assert ticket.status == Ticket.Status.ESCALATED
    support = signed_in(user("acme-support"))
    support.post(reverse("ticket_close", args=[ticket.pk]), {"note": "Sent a replacement"})
    html = support.get(reverse("ticket", args=[ticket.pk])).content.decode()
    head = html.split('class="page-head"', 1)[1].split('class="actions"', 1)[0]
    assert "Escalated to a person" not in head and "tone-orange" not in head
    assert "Closed" in head


def test_an_exception_names_only_the_rule_that_was_broken(file_ticket, user, django_capture_on_commit_callbacks):
    # ORD-5002 is delivered (status fine) and 45 days old: only the window is broken
    with django_capture_on_commit_callbacks(execute=True):
        ticket = file_ticket(order="ORD-5002", message="The lamp flickers.")
    lead = signed_in(user("acme-lead"))
    response = lead.post(
        reverse("ticket_propose", args=[ticket.pk]), {"amount": "40.00", "reason": "Goodwill", "exception": "on"}
    )
    assert response.status_code == 302
    request = ApprovalRequest.objects.get(ticket_ref=ticket.pk)
    assert request.waived_rules == ["window"]
    html = lead.get(reverse("ticket", args=[ticket.pk])).content.decode()
    assert "The order status rule" not in html


def test_the_status_filter_uses_the_badges_words(user, demo):
    html = signed_in(user("acme-support")).get(reverse("tickets")).content.decode()
    select = html.split('name="status"', 1)[1].split("</select>", 1)[0]
    assert "Waiting for finance" in select and "approval required" not in select.lower()


def test_a_ticket_list_without_an_amount_says_not_stated_and_never_0_minutes_ago(file_ticket, user):
    file_ticket(order="ORD-5002", message="The lamp flickers.", hold_agent=True)
    html = signed_in(user("acme-support")).get(reverse("tickets")).content.decode()
    assert "not stated" in html and ">any<" not in html
    assert "0\xa0minutes ago" not in html and "0 minutes ago" not in html
    assert "just now" in html


def test_the_review_page_says_votes_and_title_in_words(file_ticket, user, django_capture_on_commit_callbacks):
    with django_capture_on_commit_callbacks(execute=True):
        ticket = file_ticket(order="ORD-5006", message="The espresso machine leaks.")
    request = ApprovalRequest.objects.get(ticket_ref=ticket.pk)
    approval_request_decide(
        request_id=request.pk, user=user("acme-finance"), decision="approve", args_hash=request.args_hash
    )
    finance2 = signed_in(user("acme-finance2"))
    html = finance2.get(f"/admin/approvals/approvalrequest/{request.pk}/change/").content.decode()
    assert "acme-finance: approve at" not in html and "acme-finance approved" in html
    title = html.split("<title>", 1)[1].split("</title>", 1)[0]
    assert "refunds.issue_refund" not in title and "750.00 USD" in title
    queue = finance2.get("/admin/approvals/approvalrequest/").content.decode()
    assert "0\xa0minutes ago" not in queue and "0 minutes ago" not in queue


def test_the_gates_reason_for_an_escalating_draft_reads_as_a_sentence_on_every_screen(
    file_ticket, user, django_capture_on_commit_callbacks
):
    # given the agent drafts "escalate" on ORD-5001 (eligible): the gate hands the ticket to a person
    with django_capture_on_commit_callbacks(execute=False):
        ticket = file_ticket(order="ORD-5001")
    agent_run_ticket(
        ticket_id=ticket.pk,
        provider=ScriptedProvider(
            [
                {"tool": "orders_lookup_order", "input": {"order_id": "ORD-5001"}},
                {"tool": "refund_policy_retrieve", "input": {}},
                refund_draft("ORD-5001", None, recommendation="escalate"),
            ]
        ),
    )
    ticket.refresh_from_db()
    assert ticket.status == Ticket.Status.ESCALATED
    assert ticket.drafts.get().gate_verdict["codes"] == ["model_recommends_escalate"]  # the code is unchanged
    client = signed_in(user("acme-support"))
    # then the ticket page (stop detail, the gate's reasons) and the queue say it in words
    for html in (
        client.get(reverse("ticket", args=[ticket.pk])).content.decode(),
        client.get(reverse("ticket_queue")).content.decode(),
    ):
        assert "The agent asks a person to decide." in html
        assert "recommends &#x27;escalate&#x27;" not in html and "recommends 'escalate'" not in html
    # and the trace's draft event says what was drafted in the label table's words
    page = client.get(reverse("ticket", args=[ticket.pk])).content.decode()
    assert f"Draft {ticket.drafts.get().pk}: Hand to a person, citing refund-policy-v4." in page
