"""Finance's "request changes" with a wanted amount the gate cannot allow: refused at the
decision, with the cap named, in the same form; never handed to the agent to be dropped."""

from decimal import Decimal

import pytest
from django.test import Client

from approvals.models import ApprovalRequest, ApprovalVote

pytestmark = pytest.mark.django_db


@pytest.fixture
def socks_request(approval_request_make):
    # ORD-5005 has ITEM-6 (socks, 25.00 x 2); the ticket names ITEM-6 once: one unit, 25.00.
    request = approval_request_make(order="ORD-5005", items=["ITEM-6"])
    assert request.amount == Decimal("25.00")
    return request


def _unchanged(request):
    request.refresh_from_db()
    return request.status, request.requested_amount_change, ApprovalVote.objects.filter(request=request).count()


def test_the_admin_refuses_a_wanted_amount_above_the_items_cap_in_the_same_form(socks_request, user):
    # given finance on the request-changes confirm page
    finance = Client()
    finance.force_login(user("acme-finance"))
    # when they ask for 50.00 for one unit of ITEM-6
    response = finance.post(
        f"/admin/approvals/approvalrequest/{socks_request.pk}/decide/request_changes/",
        {"args_hash": socks_request.args_hash, "note": "Both pairs, please.", "wanted_amount": "50.00"},
    )
    # then the same form comes back with the reason at the field, naming the cap, and what was typed
    assert response.status_code == 422
    errors = response.context["form"].errors["wanted_amount"]
    assert "25.00 USD" in errors[0] and "ITEM-6" in errors[0], errors
    html = response.content.decode()
    assert 'value="50.00"' in html and "Both pairs, please." in html
    # and nothing was decided
    assert _unchanged(socks_request) == ("pending", None, 0)


def test_the_api_refuses_a_wanted_amount_above_the_cap_with_the_reason(socks_request, api_client):
    response = api_client("acme-finance").post(
        f"/api/approvals/{socks_request.pk}/decision",
        {"decision": "request_changes", "args_hash": socks_request.args_hash, "note": "more", "wanted_amount": "50.00"},
        content_type="application/json",
    )
    assert response.status_code == 422, response.content
    body = response.json()
    assert body["code"] == "wanted_amount_above_cap"
    assert [e["field"] for e in body.get("errors", [])] in ([], ["wanted_amount"])
    assert "25.00" in body["detail"]
    assert _unchanged(socks_request) == ("pending", None, 0)


def test_a_wanted_amount_within_the_cap_is_recorded(socks_request, api_client):
    response = api_client("acme-finance").post(
        f"/api/approvals/{socks_request.pk}/decision",
        {"decision": "request_changes", "args_hash": socks_request.args_hash, "note": "less", "wanted_amount": "20.00"},
        content_type="application/json",
    )
    assert response.status_code == 200, response.content
    socks_request.refresh_from_db()
    assert (socks_request.status, socks_request.requested_amount_change) == (
        ApprovalRequest.Status.CHANGES_REQUESTED,
        Decimal("20.00"),
    )


def test_a_capped_amount_names_the_items_cap_not_the_refundable_total(demo):
    from django.utils import timezone

    from approvals.gate import Proposal, policy_current, policy_gate_evaluate
    from ledger.models import Order

    order = Order.objects.get(tenant__slug="acme", external_id="ORD-5005")
    policy = policy_current(order.tenant)
    verdict = policy_gate_evaluate(
        order=order,
        policy=policy,
        proposal=Proposal(recommendation="refund", amount=Decimal("50.00"), policy_version=policy.version),
        requested_amount=Decimal("50.00"),
        item_ids=["ITEM-6"],
        now=timezone.now(),
    )
    assert verdict.allowed_amount == Decimal("25.00")
    capped = [r for r in verdict.reasons if "capped" in r]
    assert capped and all("ITEM-6" in r and "refundable" not in r for r in capped), verdict.reasons
