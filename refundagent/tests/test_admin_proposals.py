"""Proposing a refund from the admin's escalation queue: the support app's form posted to the same
service (ticket_refund_propose) as the API and the support app, with the same guarantees: bad
input is a form error and writes nothing, the gate's hard limits hold, the proposer never
approves, every proposal is traced. Django's test client posts the admin's forms as a browser
would. Every test builds its own shop."""

from decimal import Decimal

import pytest
from django.contrib.messages import get_messages
from django.urls import reverse

from approvals.models import ApprovalRequest, ApprovalVote
from ledger.models import Customer, PaymentMethod, RefundEntry, Tenant
from refundagent.forms import ProposalForm
from refundagent.models import Ticket, TraceEvent
from tests.factories import manual_payout_record
from tests.helpers import signed_in

pytestmark = pytest.mark.django_db


# The shop's people this module works with (conftest.STAFF).
PEOPLE = ("support", "lead", "finance", "finance2", "operator")


@pytest.fixture
def escalated(people, customer, make_order, tenant):
    """An escalated ticket on a delivered 120.00 order placed 60 days ago (outside the 30-day window);
    and another customer's card."""
    order = make_order("120.00", days_old=60)
    stranger = Customer.objects.create(tenant=tenant, external_id="CUST-2", name="Bob", email="bob@example.com")
    PaymentMethod.objects.create(customer=stranger, external_id="card_2", kind=PaymentMethod.Kind.CARD)
    return Ticket.objects.create(
        tenant=order.tenant,
        order=order,
        customer=customer,
        message="The courier lost it; please make an exception.",
        currency="USD",
        created_by=people["support"],
        status=Ticket.Status.ESCALATED,
        stop_reason=Ticket.StopReason.ESCALATED,
        stop_detail="Outside the refund window: a person decides.",
    )


def propose_url(ticket) -> str:
    return reverse("admin:refundagent_escalatedticket_propose", args=[ticket.pk])


def rows() -> tuple[int, int, int, int]:
    return (
        ApprovalRequest.objects.count(),
        ApprovalVote.objects.count(),
        RefundEntry.objects.count(),
        TraceEvent.objects.count(),
    )


def test_the_queue_links_to_the_proposal_page_which_shows_what_a_proposal_needs(people, escalated, client):
    client = signed_in(people["lead"], client)
    # when the lead opens the admin's escalation queue
    queue = client.get(reverse("admin:refundagent_escalatedticket_changelist")).content.decode()
    # then each row offers the proposal in the admin
    assert propose_url(escalated) in queue and "Propose a refund" in queue
    # and the ticket's admin page does too
    change = client.get(reverse("admin:refundagent_escalatedticket_change", args=[escalated.pk])).content.decode()
    assert propose_url(escalated) in change
    # when they open the proposal page
    response = client.get(propose_url(escalated))
    html = response.content.decode()
    # then it shows the ticket's reason, what is still refundable, the customer's own methods, and the form
    assert response.status_code == 200
    assert "Outside the refund window: a person decides." in html
    assert "still refundable: <strong>120.00 USD</strong>" in html
    assert "card_1" in html and "card_2" not in html
    assert 'id="ra-propose-form"' in html and 'name="amount"' in html and 'name="exception"' in html
    # and "refund to" picks among that customer's methods, as on the support app's ticket page
    picker = response.context["form"].fields["refund_to"]
    assert [value for value, _ in picker.choices] == ["", "card_1"]
    assert '<select name="refund_to"' in html


def test_an_exception_proposed_in_the_admin_needs_two_finance_approvers_never_the_proposer(
    people, escalated, client, django_capture_on_commit_callbacks
):
    client = signed_in(people["lead"], client)
    # when the lead proposes an 80.00 policy exception with a reason from the admin
    response = client.post(
        propose_url(escalated),
        {"amount": "80.00", "reason": "Loyal customer; the courier lost the parcel.", "exception": "on"},
    )
    # then back to the queue with a message, and one human request for exactly 80.00 that needs two approvers
    assert response.status_code == 302
    assert response["Location"] == reverse("admin:refundagent_escalatedticket_changelist")
    request = ApprovalRequest.objects.get(ticket_ref=escalated.pk)
    assert (request.origin, request.amount, request.requested_by, request.policy_exception) == (
        "human",
        Decimal("80.00"),
        people["lead"],
        True,
    )
    assert request.required_approvals == 2 and "window" in request.waived_rules
    assert "proposed on ticket" in " ".join(str(m) for m in get_messages(response.wsgi_request))
    # and the ticket waits for finance, and the proposal is traced with who made it
    escalated.refresh_from_db()
    assert (escalated.status, escalated.awaiting_person_since) == ("approval_required", None)
    event = escalated.trace_events.get(decision="human_proposal")
    assert event.data["by"] == "lead" and event.data["amount"] == "80.00" and event.data["policy_exception"]

    # when the lead, who has the finance role, tries to approve their own proposal in the admin
    decide = reverse("admin:approvals_approvalrequest_decide", args=[request.pk, "approve"])
    page = client.get(reverse("admin:approvals_approvalrequest_change", args=[request.pk])).content.decode()
    assert decide not in page  # no approve button for the proposer
    response = client.post(decide, {"args_hash": request.args_hash, "note": "fine"}, follow=True)
    # then it is refused (maker-checker) and nothing is recorded
    assert "Not decided:" in response.content.decode() and "maker cannot decide" in response.content.decode()
    request.refresh_from_db()
    assert request.status == "pending" and not request.votes.exists()

    # when one finance user approves, then a second, distinct one
    for approver in ("finance", "finance2"):
        with django_capture_on_commit_callbacks(execute=True):
            signed_in(people[approver], client).post(decide, {"args_hash": request.args_hash, "note": "ok"})
        request.refresh_from_db()
        if approver == "finance":
            # then one approval leaves it pending
            assert request.status == "pending" and request.votes.count() == 1
    # then it is written once, and once finance records the payout made by hand (the manual gateway),
    # executed, the ticket refunded, and the reply states the refunded amount
    request = manual_payout_record(request)
    assert request.status == "executed"
    assert RefundEntry.objects.filter(order=escalated.order).count() == 1
    escalated.refresh_from_db()
    assert escalated.status == "refunded"
    assert "we have refunded 80.00 USD" in escalated.customer_reply


@pytest.mark.parametrize(
    "body,field,message",
    [
        ({"amount": "120.01"}, "amount", "still refundable"),
        ({"amount": "1e30"}, "amount", "Enter a number."),
        ({"amount": "1E+30"}, "amount", "Enter a number."),
        ({"amount": "１２０"}, "amount", "Enter a number."),
        ({"amount": "0.00"}, "amount", "greater than or equal to 0.01"),
        ({"amount": "-5.00"}, "amount", "must be positive"),
        ({"amount": "12.345"}, "amount", "no more than 2 decimal places"),
        ({"amount": ""}, "amount", "This field is required."),
        ({"refund_to": "card_2"}, "refund_to", "card_2 is not a payment method of the customer: pick one"),
        ({"refund_to": "nobody"}, "refund_to", "nobody is not a payment method of the customer: pick one"),
        ({"reason": ""}, "reason", "needs a written reason"),
        ({"items": "NOT-ON-ORDER"}, "items", "not refundable"),
        ({"exception": ""}, None, "The policy gate refuses this refund"),
    ],
    ids=[
        "above_refundable",
        "exponent",
        "exponent_signed",
        "fullwidth_digits",
        "zero",
        "negative",
        "three_decimals",
        "missing",
        "another_customers_method",
        "unknown_method",
        "exception_without_reason",
        "items_not_on_order",
        "outside_window_without_exception",
    ],
)
def test_bad_input_is_a_form_error_and_writes_nothing(body, field, message, people, escalated, client):
    client = signed_in(people["lead"], client)
    before = rows()
    # when the lead proposes something the form or the service refuses
    data = {"amount": "50.00", "reason": "Goodwill.", "exception": "on", **body}
    data = {k: v for k, v in data.items() if not (k == "exception" and v == "")}
    response = client.post(propose_url(escalated), data)
    html = response.content.decode()
    # then 422 with the form again and the reason next to its field (or above the form), and nothing written
    assert response.status_code == 422, html[:500]
    assert message in html.replace("&#x27;", "'")
    form = response.context["form"]
    assert message in " ".join(form.errors.get(field or "__all__", [])).replace("&#x27;", "'")
    assert rows() == before
    escalated.refresh_from_db()
    assert (escalated.status, escalated.customer_reply) == ("escalated", "")


def test_nul_bytes_are_refused_before_the_form_and_by_the_form_itself(people, escalated, client):
    client = signed_in(people["lead"], client)
    before = rows()
    # when a post carries a NUL byte in the reason
    response = client.post(propose_url(escalated), {"amount": "50.00", "reason": "Good\x00will", "exception": "on"})
    # then 400 (the middleware refuses control characters before any view) and nothing written
    assert response.status_code == 400
    assert rows() == before
    # and the form on its own refuses it too (a second line of defence)
    form = ProposalForm({"amount": "50.00", "reason": "Good\x00will", "refund_to": "card\x00_1"})
    assert not form.is_valid() and {"reason", "refund_to"} <= set(form.errors)


def test_a_ticket_that_left_the_queue_answers_409_and_writes_nothing(people, escalated, client):
    # given the ticket is already waiting for finance
    Ticket.objects.filter(pk=escalated.pk).update(status=Ticket.Status.APPROVAL_REQUIRED)
    client = signed_in(people["lead"], client)
    before = rows()
    # when the lead opens and posts the proposal page
    page = client.get(propose_url(escalated)).content.decode()
    response = client.post(propose_url(escalated), {"amount": "50.00", "reason": "x", "exception": "on"})
    # then the page says why, the service refuses with 409, and nothing is written
    assert 'id="ra-cannot"' in page
    assert response.status_code == 409 and "a person proposes a refund only on" in response.content.decode()
    assert rows() == before


def test_only_people_who_may_propose_can_and_only_on_their_own_tenants_tickets(
    people, escalated, client, make_user, customer
):
    before = rows()
    body = {"amount": "50.00", "reason": "x", "exception": "on"}
    # when an operator (staff, neither support nor finance) posts a proposal
    response = signed_in(people["operator"], client).post(propose_url(escalated), body)
    # then 403 with the reason, nothing written
    assert response.status_code == 403 and "support" in response.content.decode()
    # when support without admin access opens the page, the admin sends them to its login
    assert signed_in(people["support"], client).get(propose_url(escalated)).status_code == 302
    # when finance of another tenant opens or posts it, the ticket does not exist for them
    other = Tenant.objects.create(slug="other", name="Other")
    stranger = make_user("other-finance", "support", "finance", tenant=other)
    client = signed_in(stranger, client)
    assert client.get(propose_url(escalated)).status_code == 404
    assert client.post(propose_url(escalated), body).status_code == 404
    assert client.get(reverse("admin:refundagent_escalatedticket_propose", args=["x1"])).status_code == 404
    assert rows() == before
