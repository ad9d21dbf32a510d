"""Items carry quantities: an item id names one unit. Filing refuses more units than the order has
(422 with the reason); the gate says "already refunded" only when the ledger shows it; the ledger
API shows each line's units (docs/api.md)."""

from functools import partial

import pytest
from django.urls import reverse

from ledger.exceptions import RefundRefused
from ledger.models import Order
from ledger.services import ledger_refund_issue
from refundagent.agent.loop import agent_run_ticket
from refundagent.agent.providers.scripted import ScriptedProvider
from refundagent.models import Ticket, TraceEvent
from tests.factories import refund_draft_args

REPLY = (
    "Thank you for contacting us about your socks. We have passed your request to our finance team for a "
    "decision and will get back to you."
)
draft = partial(refund_draft_args, reply=REPLY, version="refund-policy-v4", rationale="Delivered 8 days ago.")
SOCKS_THREE_TIMES = ["ITEM-6", "ITEM-6", "ITEM-6"]  # ORD-5005 has 2 units of ITEM-6 (socks, 25.00 each)


def _file(client, items):
    return client.post(
        "/api/tickets",
        {"order": "ORD-5005", "customer": "CUST-1001", "message": "Refund the socks.", "items": items},
        content_type="application/json",
    )


def test_the_api_refuses_more_units_than_the_order_has_and_writes_nothing(api_client):
    client = api_client("acme-support")
    before = (Ticket.objects.count(), TraceEvent.objects.count())
    response = _file(client, SOCKS_THREE_TIMES)
    assert response.status_code == 422
    body = response.json()
    assert body["code"] == "items_exceed_quantity"
    assert "ITEM-6 is named 3 times, but order ORD-5005 has 2 unit(s) of it" in body["detail"]
    assert (Ticket.objects.count(), TraceEvent.objects.count()) == before


def test_the_api_files_every_unit_the_order_has(api_client, django_capture_on_commit_callbacks):
    with django_capture_on_commit_callbacks(execute=False):
        response = _file(api_client("acme-support"), ["ITEM-6", "ITEM-6"])
    assert response.status_code == 201
    assert response.json()["items"] == ["ITEM-6", "ITEM-6"]


def test_the_support_form_says_units_and_shows_the_refusal_on_the_items_field(client, user):
    client.force_login(user("acme-support"))
    page = client.get(reverse("ticket_new")).content.decode()
    assert "once per unit" in page
    form = {"order": "ORD-5005", "customer": "CUST-1001", "message": "Socks.", "items": "ITEM-6, ITEM-6, ITEM-6"}
    refused = client.post(reverse("ticket_new"), form)
    assert refused.status_code == 422
    assert "ITEM-6 is named 3 times, but order ORD-5005 has 2 unit(s) of it" in refused.content.decode()
    assert refused.context["form"].errors["items"]
    assert Ticket.objects.count() == 0


@pytest.fixture
def ticket_defaults():
    """Customer-level: the model names the items (filing cannot check them)."""
    return {"order": None, "message": "The socks I bought from you are too small, please refund them."}


def test_a_model_naming_an_item_three_times_is_not_denied_as_already_refunded(file_ticket):
    # given ORD-5005 with 2 units of ITEM-6, none refunded, and a model that names the socks three times
    ticket = file_ticket()
    agent_run_ticket(
        ticket_id=ticket.pk,
        provider=ScriptedProvider(
            [
                {"tool": "orders_lookup_order", "input": {"order_id": "ORD-5005"}},
                {"tool": "refund_policy_retrieve", "input": {}},
                {"tool": "refunds_create_draft", "input": draft(order="ORD-5005", items=SOCKS_THREE_TIMES)},
            ]
        ),
    )
    ticket.refresh_from_db()
    # then the gate does not claim a refund the ledger never made: a person decides, with the true reason
    assert ticket.status != Ticket.Status.DENIED
    assert "already refunded" not in ticket.stop_detail
    assert ticket.status == Ticket.Status.ESCALATED
    assert "Item ITEM-6 is named 3 times, but order ORD-5005 has 2 unit(s) of it" in ticket.stop_detail


def test_already_refunded_is_said_only_when_the_ledger_shows_it(file_ticket):
    # given both units of ITEM-6 refunded in the ledger
    order = Order.objects.get(tenant__slug="acme", external_id="ORD-5005")
    ledger_refund_issue(
        order=order, amount="50.00", currency="USD", idempotency_key="socks", item_ids=["ITEM-6", "ITEM-6"]
    )
    ticket = file_ticket()
    agent_run_ticket(
        ticket_id=ticket.pk,
        provider=ScriptedProvider(
            [
                {"tool": "orders_lookup_order", "input": {"order_id": "ORD-5005"}},
                {"tool": "refund_policy_retrieve", "input": {}},
                {"tool": "refunds_create_draft", "input": draft(order="ORD-5005", items=["ITEM-6"])},
            ]
        ),
    )
    ticket.refresh_from_db()
    # the order and items are the model's pick on a customer-level ticket: they never deny, so a
    # person decides, told the ledger's true reason
    assert ticket.status == Ticket.Status.ESCALATED
    assert "Items ITEM-6 were already refunded (ITEM-6: 2 unit(s))" in ticket.stop_detail


def test_the_ledger_refuses_more_units_than_the_order_has_with_that_reason(demo):
    order = Order.objects.get(tenant__slug="acme", external_id="ORD-5005")
    with pytest.raises(RefundRefused) as refused:
        ledger_refund_issue(
            order=order, amount="25.00", currency="USD", idempotency_key="three", item_ids=SOCKS_THREE_TIMES
        )
    assert refused.value.code == "items_exceed_quantity"
    assert "more times than ORD-5005 has units" in refused.value.message


def test_the_ledger_api_shows_each_lines_units(demo, api_client):
    order = Order.objects.get(tenant__slug="acme", external_id="ORD-5005")
    ledger_refund_issue(order=order, amount="25.00", currency="USD", idempotency_key="one-sock", item_ids=["ITEM-6"])
    body = api_client("acme-support").get("/api/orders/ORD-5005/ledger").json()
    assert body["items"] == [
        {"id": "ITEM-5", "name": "Running Shoes", "price": "150.00", "quantity": 1, "refunded_quantity": 0},
        {"id": "ITEM-6", "name": "Socks (3 pack)", "price": "25.00", "quantity": 2, "refunded_quantity": 1},
    ]
