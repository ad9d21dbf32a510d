"""The ticket endpoints of docs/api.md."""

import pytest

from ledger.models import Order
from refundagent.agent.loop import agent_run_ticket
from refundagent.agent.providers.offline import OfflineProvider
from refundagent.models import Ticket, TraceEvent
from refundagent.services import ticket_create

BODY = {"order": "ORD-5001", "customer": "CUST-1001", "message": "Broken headphones.", "requested_amount": "200.00"}


def post(client, body):
    return client.post("/api/tickets", body, content_type="application/json")


def test_support_files_a_ticket(api_client, django_capture_on_commit_callbacks):
    client = api_client("acme-support")

    with django_capture_on_commit_callbacks(execute=False) as callbacks:
        response = post(client, {**BODY, "items": ["ITEM-1"]})

    assert response.status_code == 201
    body = response.json()
    assert body["status"] == "queued"
    assert body["order"] == "ORD-5001" and body["customer"] == "CUST-1001"
    assert body["requested_amount"] == "200.00" and body["currency"] == "USD"
    assert body["items"] == ["ITEM-1"]
    assert body["draft"] is None and body["approval"] is None and body["stop_reason"] is None
    assert Ticket.objects.get(pk=body["id"]).created_by.username == "acme-support"
    assert len(callbacks) == 1  # the agent run is queued once the ticket is committed


@pytest.mark.parametrize(
    "changes",
    [
        {"requested_amount": "abc"},
        {"requested_amount": "-5.00"},
        {"requested_amount": "1.234"},
        {"requested_amount": 12.5},
        {"message": ""},
        {"message": None},
        # Without an order a ticket is customer-level (201); items need their order, "" is no id.
        {"order": None, "items": ["ITEM-1"]},
        {"order": ""},
        {"customer": "CUST-9999", "order": "ORD-5001"},
        {"items": ["ITEM-999"]},
    ],
)
def test_bad_input_is_refused_and_nothing_is_written(api_client, changes):
    client = api_client("acme-support")
    tickets, events = Ticket.objects.count(), TraceEvent.objects.count()

    response = post(client, {**BODY, **changes})

    assert response.status_code in (404, 422)
    assert response.json().get("detail")
    assert (Ticket.objects.count(), TraceEvent.objects.count()) == (tickets, events)


def test_another_tenants_order_or_customer_answers_404(api_client):
    client = api_client("acme-support")

    assert post(client, {**BODY, "order": "ORD-7001"}).status_code == 404
    assert post(client, {**BODY, "order": "ORD-7001", "customer": "CUST-2001"}).status_code == 404
    assert not Ticket.objects.exists()


def test_a_customer_who_is_not_the_orders_answers_422(api_client, demo):
    from ledger.models import Customer

    Customer.objects.create(tenant=demo["acme"], external_id="CUST-1002", name="Other")
    response = post(api_client("acme-support"), {**BODY, "customer": "CUST-1002"})
    assert response.status_code == 422
    assert response.json()["code"] == "customer_mismatch"


def test_without_credentials_the_api_answers_401(client, demo):
    assert post(client, BODY).status_code == 401
    assert client.get("/api/tickets").status_code == 401


def test_a_finance_only_user_may_not_file_a_ticket(api_client):
    response = post(api_client("acme-finance"), BODY)

    assert response.status_code == 403
    assert "support" in response.json()["detail"]
    assert not Ticket.objects.exists()


def test_the_list_is_the_tenants_newest_first_paginated_and_filterable(api_client, user):
    acme = user("acme-support")
    first = ticket_create(user=acme, order="ORD-5001", customer="CUST-1001", message="one")
    second = ticket_create(user=acme, order="ORD-5002", customer="CUST-1001", message="two")
    ticket_create(user=user("globex-support"), order="ORD-7001", customer="CUST-2001", message="globex")
    Ticket.objects.filter(pk=first.pk).update(status=Ticket.Status.ESCALATED)

    for username in ("acme-support", "acme-finance"):
        body = api_client(username).get("/api/tickets").json()
        assert body["count"] == 2
        assert [t["id"] for t in body["items"]] == [second.pk, first.pk]

    client = api_client("acme-support")
    assert [t["id"] for t in client.get("/api/tickets?status=escalated").json()["items"]] == [first.pk]
    assert [t["id"] for t in client.get("/api/tickets?limit=1&offset=1").json()["items"]] == [first.pk]
    assert client.get("/api/tickets?status=bogus").status_code == 422


def test_the_detail_shows_the_draft_and_the_approval(api_client, user):
    ticket = ticket_create(
        user=user("acme-support"), order="ORD-5001", customer="CUST-1001", message="x", requested_amount="200.00"
    )
    agent_run_ticket(ticket_id=ticket.pk, provider=OfflineProvider())

    body = api_client("acme-finance").get(f"/api/tickets/{ticket.pk}").json()

    assert body["status"] == "approval_required" and body["stop_reason"] == "approval_required"
    assert body["draft"]["recommendation"] == "refund"
    assert body["draft"]["amount"] == "120.00"
    assert body["draft"]["policy_version"] == "refund-policy-v4"
    assert body["approval"]["amount"] == "120.00"
    assert body["approval"]["ticket"] == ticket.pk
    assert body["approval"]["status"] == "pending"
    assert body["trace_id"] == str(ticket.trace_id)
    assert body["stop_detail"]


def test_the_trace_is_exported_in_order(api_client, user):
    ticket = ticket_create(user=user("acme-support"), order="ORD-5001", customer="CUST-1001", message="x")
    agent_run_ticket(ticket_id=ticket.pk, provider=OfflineProvider())

    body = api_client("acme-support").get(f"/api/tickets/{ticket.pk}/trace").json()

    assert body["trace_id"] == str(ticket.trace_id)
    seqs = [e["seq"] for e in body["events"]]
    assert seqs == sorted(seqs) and seqs[0] == 1
    assert {"run", "model", "tool", "draft", "policy", "approval", "stop"} <= {e["span"] for e in body["events"]}
    assert all({"seq", "span", "status", "decision", "reason", "tool", "at"} <= set(e) for e in body["events"])


def test_another_tenants_ticket_answers_404(api_client, user):
    ticket = ticket_create(user=user("globex-support"), order="ORD-7001", customer="CUST-2001", message="x")
    client = api_client("acme-support")

    assert client.get(f"/api/tickets/{ticket.pk}").status_code == 404
    assert client.get(f"/api/tickets/{ticket.pk}/trace").status_code == 404
    assert Order.objects.get(external_id="ORD-7001").tickets.count() == 1


@pytest.mark.parametrize("ticket_id", ["28167181019273453568", str(2**63), str(-(2**63) - 1)])
def test_a_ticket_id_wider_than_any_column_answers_404(db, api_client, ticket_id):
    # schemathesis found it: an id wider than 64 bits was a 500
    client = api_client("acme-support")
    for path in (f"/api/tickets/{ticket_id}", f"/api/tickets/{ticket_id}/trace"):
        response = client.get(path)
        assert response.status_code == 404, (path, response.status_code)
        assert response.json()["status"] == 404
