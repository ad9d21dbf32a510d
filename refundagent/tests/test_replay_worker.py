"""Replays on the real parts: the admin queues a policy replay and a model replay, a Celery worker
on Redis runs them, and their pages show the progress and then the result (docs/replay.md)."""

import time

import pytest
from django.test import Client

from approvals.models import PolicyReplay, RefundPolicy
from approvals.services.policies import refund_policy_draft
from ledger.models import RefundEntry, Tenant
from refundagent.models import ModelReplay, Ticket
from refundagent.tests.test_end_to_end_worker import wait_for_status


def wait_for_done(model, pk, timeout=90.0):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        status = model.objects.filter(pk=pk).values_list("status", flat=True).first()
        if status in ("done", "failed"):
            return status
        time.sleep(0.3)
    return model.objects.filter(pk=pk).values_list("status", flat=True).first()


@pytest.mark.worker
@pytest.mark.django_db(transaction=True)
def test_the_worker_runs_the_replays_the_admin_queues(celery_worker_process, api_client, user):
    celery_worker_process.start()
    support = api_client("acme-support")
    tickets = []
    for order in ("ORD-5001", "ORD-5003"):
        response = support.post(
            "/api/tickets",
            {"order": order, "customer": "CUST-1001", "message": "Broken. Please refund me."},
            content_type="application/json",
        )
        assert response.status_code == 201, response.content
        tickets.append(response.json()["id"])
    for ticket_id in tickets:
        assert wait_for_status(ticket_id, "approval_required", "escalated", "denied", "failed") == "approval_required"
    acme = Tenant.objects.get(slug="acme")
    draft = refund_policy_draft(tenant=acme, name="refund-policy-v5", changes={"window_days": 7})
    statuses = list(Ticket.objects.order_by("pk").values_list("status", flat=True))
    entries = RefundEntry.objects.count()

    # when finance queues the policy replay and an operator a model replay in the admin
    finance, operator = Client(), Client()
    finance.force_login(user("acme-finance"))
    operator.force_login(user("ops"))
    queued = finance.post("/admin/approvals/refundpolicy/", {"action": "replay", "_selected_action": [draft.pk]})
    replay = PolicyReplay.objects.get(draft=draft)
    started = operator.post(
        "/admin/refundagent/modelreplay/add/", {"provider": "offline", "model": "", "days": "30", "limit": ""}
    )
    shadow = ModelReplay.objects.get()

    # then the worker runs both, and their pages show the results
    assert queued.status_code == 302 and started.status_code == 302
    assert wait_for_done(PolicyReplay, replay.pk) == "done"
    assert wait_for_done(ModelReplay, shadow.pk) == "done"
    page = finance.get(f"/admin/approvals/policyreplay/{replay.pk}/change/").content.decode()
    assert "flipped=1" in page and f'href="/tickets/{tickets[0]}/"' in page
    shadow.refresh_from_db()
    assert (shadow.result["tickets"], shadow.agreed) == (2, 2)  # the same offline model agrees with itself
    assert "2 of 2" in operator.get(f"/admin/refundagent/modelreplay/{shadow.pk}/change/").content.decode()
    # and neither wrote to a ticket or the ledger
    assert list(Ticket.objects.order_by("pk").values_list("status", flat=True)) == statuses
    assert RefundEntry.objects.count() == entries
    assert RefundPolicy.objects.get(pk=draft.pk).status == "draft"
