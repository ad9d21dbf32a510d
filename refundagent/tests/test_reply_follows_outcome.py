"""Screens tell the truth about the ticket's current state: after finance decides, the ticket's
customer_reply (what support sends now) and its visible stop reason follow the new outcome, and
the agent's outdated draft no longer speaks for the ticket. Every test builds its own shop."""

from decimal import Decimal

import pytest
from django.urls import reverse
from django.utils import timezone

from approvals.gate import Proposal, policy_gate_evaluate
from approvals.models import ApprovalRequest
from approvals.services.decisions import approval_request_decide
from approvals.services.requests import approval_request_create
from ledger.models import RefundEntry
from refundagent.labels import label, when
from refundagent.models import AgentRun, RefundDraft, Ticket
from refundagent.services import ticket_create, ticket_escalate
from refundagent.ticket_state import ticket_transition
from tests.factories import manual_payout_record

pytestmark = pytest.mark.django_db

RATIONALE = "The order is in the window, so 150.00 USD is refundable in full."


@pytest.fixture
def waiting(people, customer, make_order, policy):
    """A ticket the agent stopped at approval_required: its draft for 150.00 and the request."""
    order = make_order("150.00", days_old=3)
    ticket = Ticket.objects.create(
        tenant=order.tenant,
        order=order,
        customer=customer,
        message="It broke.",
        currency="USD",
        created_by=people["support"],
    )
    run = AgentRun.objects.create(ticket=ticket, provider="offline", status=AgentRun.Status.STOPPED)
    proposal = Proposal(
        recommendation="refund",
        amount=Decimal("150.00"),
        policy_version=policy.version,
        customer_reply="Hello, we passed your request on to our team.",
    )
    verdict = policy_gate_evaluate(order=order, policy=policy, proposal=proposal, now=timezone.now())
    RefundDraft.objects.create(
        run=run,
        ticket=ticket,
        recommendation="refund",
        amount=Decimal("150.00"),
        currency="USD",
        policy_version=policy.version,
        rationale=RATIONALE,
        customer_reply=proposal.customer_reply,
        gate_verdict=verdict.as_dict(),
    )
    request, _ = approval_request_create(
        order=order,
        policy=policy,
        verdict=verdict,
        idempotency_key=f"test:{ticket.pk}",
        requested_by=people["support"],
        ticket_ref=ticket.pk,
        trace_id=str(ticket.trace_id),
    )
    assert ticket_transition(ticket=ticket, to=Ticket.Status.RUNNING)
    assert ticket_transition(ticket=ticket, to=Ticket.Status.APPROVAL_REQUIRED, detail="Finance must approve.")
    return ticket, request


def page(client, user, ticket) -> str:
    client.force_login(user)
    return client.get(reverse("ticket", args=[ticket.pk])).content.decode()


def test_waiting_for_finance_the_reply_is_neutral(waiting, people, client):
    # given a ticket waiting for finance
    ticket, _ = waiting
    # then its reply says the request was passed on, and promises nothing
    assert "passed to our team for review" in ticket.customer_reply
    assert "150.00" not in ticket.customer_reply
    html = page(client, people["support"], ticket)
    assert "stop reason: Needs finance approval" in html


def test_after_deny_the_reply_and_the_stop_reason_say_denied(waiting, people, client, api_client):
    # given a ticket waiting for finance
    ticket, request = waiting
    # when finance denies the request
    approval_request_decide(
        request_id=request.pk,
        user=people["finance"],
        decision="deny",
        args_hash=request.args_hash,
        note="Damage caused by the customer.",
    )
    # then the ticket is denied, its reply says so, and nothing still says it was passed to the team
    ticket.refresh_from_db()
    assert (ticket.status, ticket.stop_reason) == ("denied", "denied")
    assert "unable to offer a refund" in ticket.customer_reply
    assert "passed to our team" not in ticket.customer_reply
    detail = api_client(people["support"]).get(f"/api/tickets/{ticket.pk}").json()
    assert (detail["stop_reason"], detail["customer_reply"]) == ("denied", ticket.customer_reply)
    html = page(client, people["support"], ticket)
    assert "stop reason: Denied" in html and "Needs finance approval" not in html
    assert ticket.customer_reply in html.replace("&#x27;", "'")
    assert RATIONALE not in html  # the draft that led to the request no longer speaks for the ticket


def test_after_request_changes_the_reply_names_the_new_amount_and_the_old_rationale_is_gone(
    waiting, people, client, api_client, django_capture_on_commit_callbacks
):
    # given a ticket waiting for finance on a 150.00 request
    ticket, request = waiting
    # when finance requests changes to 100.00 (the agent's re-run stays queued)
    with django_capture_on_commit_callbacks(execute=False):
        approval_request_decide(
            request_id=request.pk,
            user=people["finance"],
            decision="request_changes",
            args_hash=request.args_hash,
            note="Only the broken part.",
            wanted_amount="100.00",
        )
    # then the ticket is back with the agent, no stop reason, and the reply speaks of 100.00, not 150.00
    ticket.refresh_from_db()
    assert (ticket.status, ticket.stop_reason, ticket.requested_amount) == ("queued", None, Decimal("100.00"))
    assert "100.00 USD" in ticket.customer_reply and "150.00" not in ticket.customer_reply
    detail = api_client(people["support"]).get(f"/api/tickets/{ticket.pk}").json()
    assert (detail["stop_reason"], detail["customer_reply"]) == (None, ticket.customer_reply)
    html = page(client, people["support"], ticket)
    assert RATIONALE not in html
    assert 'id="draft-superseded"' in html and "Only the broken part." in html
    assert "stop reason:" not in html and "Needs finance approval" not in html


def test_labels_come_from_one_mapping_and_dates_carry_the_time_zone():
    # given codes a person sees, and a time
    moment = timezone.now()
    # then each has a human label (unknown codes humanised, never raw) and the date names its zone
    assert label("approval_required", "ticket_status") == "Waiting for finance"
    assert label("budget_exhausted", "stop_reason") == "The agent ran out of steps"
    assert label("some_new_code") == "Some new code"
    assert when(moment).endswith(" UTC")
    assert when(moment.isoformat()) == when(moment)


def test_after_request_changes_the_redraft_keeps_the_new_amount_in_the_reply_through_to_the_refund(
    people, make_order, client, api_client, django_capture_on_commit_callbacks
):
    # given support files a ticket asking 150.00 on a 150.00 order, and the agent (offline provider) drafts it
    order = make_order("150.00", days_old=3)
    with django_capture_on_commit_callbacks(execute=True):
        ticket = ticket_create(
            user=people["support"],
            order=order.external_id,
            customer=order.customer.external_id,
            message="It broke; please refund.",
            requested_amount="150.00",
        )
    ticket.refresh_from_db()
    first = ApprovalRequest.objects.get(ticket_ref=ticket.pk)
    assert (ticket.status, first.amount) == ("approval_required", Decimal("150.00")), ticket.stop_detail
    # when finance requests changes to 100.00 and the agent drafts again (on commit, in-process)
    with django_capture_on_commit_callbacks(execute=True):
        approval_request_decide(
            request_id=first.pk,
            user=people["finance"],
            decision="request_changes",
            args_hash=first.args_hash,
            note="Only the broken part.",
            wanted_amount="100.00",
        )
    # then the redraft made a new request for 100.00 that finance decides, and the ticket's reply still says
    # that the team is now looking at 100.00 (not the first draft's neutral text, nor 150.00)
    ticket.refresh_from_db()
    second = ApprovalRequest.objects.filter(ticket_ref=ticket.pk).exclude(pk=first.pk).get()
    assert (second.amount, second.status) == (Decimal("100.00"), "pending")
    assert (ticket.status, ticket.stop_reason) == ("approval_required", "approval_required"), ticket.stop_detail
    assert "is now looking at a refund of 100.00 USD" in ticket.customer_reply
    assert "150.00" not in ticket.customer_reply
    assert "100.00 USD" in ticket.stop_detail and f"#{second.pk}" in ticket.stop_detail
    # and the model's own words stay in the history: two drafts, each with its own reply, and in the trace
    drafts = list(ticket.drafts.order_by("id"))
    assert [d.amount for d in drafts] == [Decimal("150.00"), Decimal("100.00")]
    assert all(d.customer_reply and d.customer_reply != ticket.customer_reply for d in drafts)
    assert ticket.trace_events.filter(span="draft").count() == 2
    # and the API and the page show the same reply and the current stop reason
    detail = api_client(people["support"]).get(f"/api/tickets/{ticket.pk}").json()
    assert (detail["status"], detail["stop_reason"], detail["customer_reply"]) == (
        "approval_required",
        "approval_required",
        ticket.customer_reply,
    )
    html = page(client, people["support"], ticket)
    assert "stop reason: Needs finance approval" in html
    assert ticket.customer_reply in html.replace("&#x27;", "'")
    # when finance approves the new request and it is executed and verified
    with django_capture_on_commit_callbacks(execute=True):
        approval_request_decide(
            request_id=second.pk, user=people["finance"], decision="approve", args_hash=second.args_hash
        )
    # (approved, not paid yet: the manual gateway waits for finance to record the payout by hand)
    ticket.refresh_from_db()
    assert ticket.status == "approved" and "being processed" in ticket.customer_reply
    assert "100.00 USD" in ticket.customer_reply and "refunded" not in ticket.customer_reply
    with django_capture_on_commit_callbacks(execute=True):
        manual_payout_record(second)
    # then the ticket is refunded, with no stop reason, and the reply states the 100.00 the ledger holds
    ticket.refresh_from_db()
    assert (ticket.status, ticket.stop_reason) == ("refunded", None), ticket.stop_detail
    assert RefundEntry.objects.get(order=order).amount == Decimal("100.00")
    assert "we have refunded 100.00 USD" in ticket.customer_reply and "150.00" not in ticket.customer_reply
    html = page(client, people["support"], ticket)
    assert "stop reason:" not in html and ticket.customer_reply in html.replace("&#x27;", "'")


def test_a_changed_ticket_handed_to_a_person_says_so_and_names_no_amount(
    people, make_order, django_capture_on_commit_callbacks
):
    # given finance requested changes on a waiting ticket, and the ticket is then handed to a person
    order = make_order("150.00", days_old=3)
    with django_capture_on_commit_callbacks(execute=True):
        ticket = ticket_create(
            user=people["support"],
            order=order.external_id,
            customer=order.customer.external_id,
            message="It broke.",
            requested_amount="150.00",
        )
    first = ApprovalRequest.objects.get(ticket_ref=ticket.pk)
    with django_capture_on_commit_callbacks(execute=False):
        approval_request_decide(
            request_id=first.pk,
            user=people["finance"],
            decision="request_changes",
            args_hash=first.args_hash,
            note="Check the order again.",
            wanted_amount="100.00",
        )
    ticket.refresh_from_db()
    ticket_escalate(ticket=ticket, user=people["support"], note="A person looks at it.")
    # then the reply no longer speaks of 100.00: a person is looking at it
    ticket.refresh_from_db()
    assert (ticket.status, ticket.stop_reason) == ("escalated", "escalated")
    assert "A member of our team is looking at your request" in ticket.customer_reply
    assert "100.00" not in ticket.customer_reply
