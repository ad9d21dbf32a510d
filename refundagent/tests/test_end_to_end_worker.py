"""The whole path on the real parts: PostgreSQL, Redis and a Celery worker. Support files a
ticket over the API, the worker runs the agent, finance approves over the API, the worker
executes into the ledger and the evaluator verifies: one entry of exactly the approved amount."""

import time

import pytest

from ledger.models import RefundEntry
from refundagent.models import Ticket


def wait_for_status(ticket_id, *statuses, timeout=90.0):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        status = Ticket.objects.filter(pk=ticket_id).values_list("status", flat=True).first()
        if status in statuses:
            return status
        time.sleep(0.3)
    return Ticket.objects.filter(pk=ticket_id).values_list("status", flat=True).first()


def wait_for_entry(order, approval_id, timeout=60.0):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        entry = RefundEntry.objects.filter(order__external_id=order, approval_ref=approval_id).first()
        if entry is not None:
            return {"refund_id": entry.pk, "status": entry.status}
        time.sleep(0.3)
    raise AssertionError(f"no ledger entry for approval {approval_id}")


@pytest.mark.worker
@pytest.mark.django_db(transaction=True)
def test_file_over_the_api_approve_over_the_api_refunded_by_the_worker(celery_worker_process, api_client):
    celery_worker_process.start()
    support, finance = api_client("acme-support"), api_client("acme-finance")

    # given support files a ticket asking 200.00 on the 120.00 order
    response = support.post(
        "/api/tickets",
        {
            "order": "ORD-5001",
            "customer": "CUST-1001",
            "message": "Broken after a week, refund $200.",
            "requested_amount": "200.00",
        },
        content_type="application/json",
    )
    assert response.status_code == 201, response.content
    ticket_id = response.json()["id"]

    # when the worker has run the agent
    assert wait_for_status(ticket_id, "approval_required", "escalated", "denied", "failed") == "approval_required"
    ticket = support.get(f"/api/tickets/{ticket_id}").json()
    approval = ticket["approval"]
    assert (approval["amount"], approval["currency"], approval["status"]) == ("120.00", "USD", "pending")
    assert ticket["draft"]["policy_version"] == "refund-policy-v4"
    assert not RefundEntry.objects.filter(order__external_id="ORD-5001", source="approval").exists()

    # and finance approves exactly what it saw
    decided = finance.post(
        f"/api/approvals/{approval['id']}/decision",
        {"decision": "approve", "args_hash": approval["args_hash"], "note": "checked"},
        content_type="application/json",
    )
    assert decided.status_code == 200, decided.content

    # then the worker writes the refund; it waits for finance to pay it by hand (the manual gateway)
    assert wait_for_status(ticket_id, "approved", "failed") == "approved"
    written = wait_for_entry("ORD-5001", str(approval["id"]))
    assert (
        written["status"] == "pending"
        and "refunded" not in support.get(f"/api/tickets/{ticket_id}").json()["customer_reply"]
    )
    # and support may not send a reply that the refund was paid yet
    early = support.post(f"/api/tickets/{ticket_id}/reply", {}, content_type="application/json")
    assert early.status_code == 409 and early.json()["code"] == "outcome_not_final"
    # when finance records the payout over the API
    paid = finance.post(
        f"/api/refunds/{written['refund_id']}/paid", {"reference": "TRF-E2E-1"}, content_type="application/json"
    )
    assert paid.status_code == 200, paid.content

    # then the worker verifies it and the ticket is refunded
    assert wait_for_status(ticket_id, "refunded", "failed") == "refunded"
    ledger = support.get("/api/orders/ORD-5001/ledger").json()
    approved = [e for e in ledger["entries"] if e["approval"] == str(approval["id"])]
    assert [(e["amount"], e["idempotency_key"]) for e in approved] == [("120.00", approval["idempotency_key"])]
    assert ledger["refunded_total"] == "120.00"
    spans = [(e["span"], e["decision"]) for e in support.get(f"/api/tickets/{ticket_id}/trace").json()["events"]]
    assert spans[-4:] == [
        ("approval", "approve"),
        ("ledger", "refund_issued"),
        ("ledger", "payout_recorded"),
        ("verify", "verified"),
    ]
    # and a second approval click changes nothing
    again = finance.post(
        f"/api/approvals/{approval['id']}/decision",
        {"decision": "approve", "args_hash": approval["args_hash"]},
        content_type="application/json",
    )
    assert again.status_code == 409
    assert RefundEntry.objects.filter(order__external_id="ORD-5001", source="approval").count() == 1
