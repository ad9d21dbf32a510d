"""A ticket filed without an order is no dead end: once a person has it, the page lists the
customer's orders with what is still refundable, and the proposal form picks one of them."""

import pytest
from django.urls import reverse

from approvals.models import ApprovalRequest
from refundagent.models import Ticket

pytestmark = pytest.mark.django_db


@pytest.fixture
def orderless(demo, user):
    """An escalated ticket of CUST-1001 that names no order (the agent could not tell which)."""
    from ledger.models import Customer

    customer = Customer.objects.get(tenant__slug="acme", external_id="CUST-1001")
    return Ticket.objects.create(
        tenant=customer.tenant,
        customer=customer,
        message="One of my orders arrived broken.",
        created_by=user("acme-support"),
        status=Ticket.Status.ESCALATED,
        stop_reason=Ticket.StopReason.ESCALATED,
        stop_detail="The customer has several orders: a person decides which order is meant.",
    )


@pytest.fixture
def lead(client, user):
    client.force_login(user("acme-lead"))
    return client


def test_the_escalated_ticket_lists_the_customers_orders_with_their_refundable_amounts(orderless, lead):
    html = lead.get(reverse("ticket", args=[orderless.pk])).content.decode()
    orders = html.split('id="customer-orders"', 1)[1].split("</section>", 1)[0]
    # ORD-5001 120.00 refundable, ORD-5004 fully refunded (0.00)
    assert "ORD-5001" in orders and "120.00 USD" in orders
    assert "ORD-5004" in orders and "0.00 USD" in orders
    form = html.split('id="propose-form"', 1)[1].split("</form>", 1)[0]
    assert 'name="order"' in form and '<option value="ORD-5001"' in form
    assert "to be identified by the agent" not in html


def test_a_person_proposes_on_the_order_they_pick(orderless, lead):
    response = lead.post(
        reverse("ticket_propose", args=[orderless.pk]), {"order": "ORD-5001", "amount": "50.00", "reason": "Broken"}
    )
    assert response.status_code == 302, response.content.decode()[:3000]
    request = ApprovalRequest.objects.get(ticket_ref=orderless.pk)
    orderless.refresh_from_db()
    assert (request.order.external_id, request.amount) == ("ORD-5001", 50)
    assert orderless.order.external_id == "ORD-5001" and orderless.status == Ticket.Status.APPROVAL_REQUIRED


def test_an_order_of_another_customer_or_none_is_refused_at_the_field(orderless, lead):
    for body in ({"amount": "50.00"}, {"order": "ORD-7001", "amount": "50.00"}):
        response = lead.post(reverse("ticket_propose", args=[orderless.pk]), {**body, "reason": "Broken"})
        assert response.status_code == 422
        assert response.context["proposal_form"].errors.get("order"), body
    assert not ApprovalRequest.objects.exists()
    orderless.refresh_from_db()
    assert orderless.order_id is None and orderless.status == Ticket.Status.ESCALATED


def test_the_api_takes_the_order_too(orderless, api_client):
    response = api_client("acme-lead").post(
        f"/api/tickets/{orderless.pk}/proposal",
        {"order": "ORD-5003", "amount": "20.00", "reason": "Broken"},
        content_type="application/json",
    )
    assert response.status_code == 201, response.content
    assert response.json()["order"] == "ORD-5003"


def test_the_admins_proposal_page_picks_the_order_too(orderless, user, client):
    client.force_login(user("acme-lead"))
    url = f"/admin/refundagent/escalatedticket/{orderless.pk}/propose/"
    assert '<option value="ORD-5001"' in client.get(url).content.decode()
    refused = client.post(url, {"amount": "50.00", "reason": "Broken"})
    assert refused.status_code == 422 and refused.context["form"].errors.get("order")
    made = client.post(url, {"order": "ORD-5001", "amount": "50.00", "reason": "Broken"})
    assert made.status_code == 302
    orderless.refresh_from_db()
    assert orderless.order.external_id == "ORD-5001"


def test_the_page_names_the_customer_and_refund_to_picks_their_own_methods(orderless, lead):
    html = lead.get(reverse("ticket", args=[orderless.pk])).content.decode()
    # the customer by name beside the id
    evidence = html.split('id="evidence"', 1)[1].split("</section>", 1)[0]
    assert "Jane Doe" in evidence and "CUST-1001" in evidence
    # refund to: a picker of the customer's own payment methods, not a free-text id
    form = html.split('id="propose-form"', 1)[1].split("</form>", 1)[0]
    assert '<select name="refund_to"' in form
    assert '<option value="card_4242"' in form and '<option value="gift_card_cust-1001"' in form
    assert "gift_card_7" not in form and "card_1" not in form.replace("card_1001", "")
    # another customer's method is refused at the field, nothing written
    refused = lead.post(
        reverse("ticket_propose", args=[orderless.pk]),
        {"order": "ORD-5001", "amount": "50.00", "reason": "x", "refund_to": "card_1881"},
    )
    assert refused.status_code == 422 and refused.context["proposal_form"].errors.get("refund_to")
    assert not ApprovalRequest.objects.exists()


def test_the_ticket_list_names_the_customer(orderless, lead):
    html = lead.get(reverse("tickets")).content.decode()
    assert "Jane Doe" in html
