"""Two tickets on one order: filing warns and links the open one, the review queue marks the
requests that share an order, and after one pays out the other says why it can no longer be
approved instead of offering Approve."""

import pytest
from django.urls import reverse

from approvals.models import ApprovalRequest, RefundPolicy
from approvals.services.decisions import approval_request_decide
from tests.helpers import signed_in

pytestmark = pytest.mark.django_db

QUEUE = "/admin/approvals/approvalrequest/"


@pytest.fixture
def two(file_ticket, django_capture_on_commit_callbacks):
    """Two tickets on ORD-5001 (120.00), each waiting for finance with a request for 120.00 (the
    agent runs on commit, as the worker would). The demo policy's risk rule on open tickets per
    order would send the second to a person; these tests are about what finance sees when two
    requests share an order anyway (a person's proposal makes one too), so it is off here."""
    RefundPolicy.objects.filter(tenant__slug="acme").update(risk_rules={})
    with django_capture_on_commit_callbacks(execute=True):
        first = file_ticket(order="ORD-5001", amount="120.00")
    with django_capture_on_commit_callbacks(execute=True):
        second = file_ticket(order="ORD-5001", amount="120.00", message="Refund the headphones please.")
    return (
        (first, ApprovalRequest.objects.get(ticket_ref=first.pk)),
        (second, ApprovalRequest.objects.get(ticket_ref=second.pk)),
    )


def test_filing_a_second_ticket_on_an_order_warns_and_links_the_open_one(file_ticket, user, demo):
    first = file_ticket(order="ORD-5001", amount="120.00")
    support = signed_in(user("acme-support"))
    response = support.post(
        reverse("ticket_new"),
        {"order": "ORD-5001", "customer": "CUST-1001", "message": "Refund again", "requested_amount": "120.00"},
        follow=True,
    )
    html = response.content.decode()
    assert "already open on ORD-5001" in html
    assert f'href="/tickets/{first.pk}/"' in html


def test_the_queue_marks_requests_that_share_an_order(two, user):
    (_, first), (_, second) = two
    html = signed_in(user("acme-finance")).get(QUEUE).content.decode()
    assert f"also #{second.pk}" in html and f"also #{first.pk}" in html


def test_after_one_pays_out_the_other_says_why_it_cannot_be_approved(
    two, user, fake_stripe, django_capture_on_commit_callbacks
):
    (_, first), (_, second) = two
    with django_capture_on_commit_callbacks(execute=True):
        approval_request_decide(
            request_id=first.pk, user=user("acme-finance"), decision="approve", args_hash=first.args_hash
        )
    first.refresh_from_db()
    assert first.status == "executed", first.status
    html = signed_in(user("acme-finance")).get(f"{QUEUE}{second.pk}/change/").content.decode()
    assert 'id="ra-approve"' not in html
    assert "can no longer be approved" in html and "0.00 USD" in html
