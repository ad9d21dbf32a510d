"""Manual payouts (PAYMENT_GATEWAY=manual, the embedded default): finance pays by hand, so an
approved refund stays `pending` and its ticket `approved` until a person records the payout
(who, when, the reference) with `POST /api/refunds/{refund_id}/paid` or on the admin's review
page. Only then is the entry `succeeded`, the ticket `refunded` and the reply says so."""

import json
from datetime import timedelta

import pytest

from approvals.models import ApprovalRequest
from approvals.outbox import approval_executions_due
from approvals.services.execution import approval_execute
from ledger.models import RefundEntry, RefundEntryEvent
from refundagent.models import Ticket
from refundagent.tests.payments_support import approve, ticket_awaiting_approval

pytestmark = pytest.mark.django_db


@pytest.fixture
def shop(policy, make_order, make_user, settings):
    settings.PAYMENT_GATEWAY = "manual"
    settings.CELERY_TASK_ALWAYS_EAGER = True
    return {
        "order": make_order("100.00", external_id="ORD-HAND", payment_ref="pi_hand"),
        "support": make_user("support", "support"),
        "finance": make_user("finance", "finance"),
        "finance2": make_user("finance2", "finance"),
    }


@pytest.fixture
def approved(shop, django_capture_on_commit_callbacks):
    ticket, request = ticket_awaiting_approval(order=shop["order"], filer=shop["support"], amount="30.00", key="k-1")
    with django_capture_on_commit_callbacks(execute=True):
        approve(request, shop["finance"])
    approval_execute(request_id=request.pk)  # what the worker does; a repeat changes nothing
    ticket.refresh_from_db()
    request.refresh_from_db()
    return ticket, request, RefundEntry.objects.get(order=shop["order"])


def _paid(client, refund_id, body, *, capture):
    with capture(execute=True):
        return client.post(f"/api/refunds/{refund_id}/paid", json.dumps(body), content_type="application/json")


def test_an_approved_manual_refund_stays_pending_and_never_claims_it_was_paid(approved, api_client, shop):
    ticket, request, entry = approved

    assert entry.status == "pending" and entry.gateway == "manual"
    assert request.status == ApprovalRequest.Status.APPROVED
    assert ticket.status == Ticket.Status.APPROVED
    assert "approved and is being processed" in ticket.customer_reply
    assert "we have refunded" not in ticket.customer_reply.lower()
    ledger = api_client(shop["support"]).get("/api/orders/ORD-HAND/ledger").json()
    assert [e["status"] for e in ledger["entries"]] == ["pending"]
    assert ledger["refundable"] == "70.00"  # a pending payout counts against the order
    # and the sweep does not hand it to a worker again: a person pays it
    assert not approval_executions_due(older_than=timedelta(0)).filter(pk=request.pk).exists()


def test_finance_records_the_payout_and_the_ticket_becomes_refunded(
    approved, api_client, shop, django_capture_on_commit_callbacks
):
    ticket, request, entry = approved

    response = _paid(
        api_client(shop["finance2"]),
        entry.pk,
        {"reference": "BANK-TRF-2026-0042"},
        capture=django_capture_on_commit_callbacks,
    )

    assert response.status_code == 200, response.content
    body = response.json()
    assert (body["status"], body["provider_ref"], body["recorded_by"]) == (
        "succeeded",
        "BANK-TRF-2026-0042",
        "finance2",
    )
    entry.refresh_from_db()
    assert (entry.status, entry.provider_ref) == ("succeeded", "BANK-TRF-2026-0042")
    event = entry.events.order_by("-id").first()
    assert (event.source, event.recorded_by, event.from_status, event.to_status) == (
        RefundEntryEvent.Source.PERSON,
        shop["finance2"],
        "pending",
        "succeeded",
    )
    request.refresh_from_db()
    ticket.refresh_from_db()
    assert request.status == ApprovalRequest.Status.EXECUTED and request.verification["ok"]
    assert ticket.status == Ticket.Status.REFUNDED
    assert "we have refunded 30.00 USD" in ticket.customer_reply


def test_recording_twice_answers_409_and_records_one_payout(
    approved, api_client, shop, django_capture_on_commit_callbacks
):
    _, _, entry = approved
    client = api_client(shop["finance"])
    first = _paid(client, entry.pk, {"reference": "TRF-1"}, capture=django_capture_on_commit_callbacks)
    second = _paid(client, entry.pk, {"reference": "TRF-2"}, capture=django_capture_on_commit_callbacks)

    assert first.status_code == 200
    assert second.status_code == 409 and second.json()["code"] == "not_awaiting_manual_payout"
    entry.refresh_from_db()
    assert entry.provider_ref == "TRF-1"
    assert entry.events.filter(to_status="succeeded").count() == 1


@pytest.mark.parametrize(
    "body, status",
    [
        ({"reference": ""}, 422),
        ({"reference": "   "}, 422),
        ({}, 422),
        ({"reference": "4242 4242 4242 4242"}, 422),  # card digits are never a reference
        ({"reference": "x" * 101}, 422),
        ({"reference": "line\nbreak"}, 422),
        ({"reference": 12}, 422),
    ],
)
def test_a_bad_reference_is_refused_and_writes_nothing(
    approved, api_client, shop, django_capture_on_commit_callbacks, body, status
):
    _, _, entry = approved
    response = _paid(api_client(shop["finance"]), entry.pk, body, capture=django_capture_on_commit_callbacks)

    assert response.status_code == status, response.content
    entry.refresh_from_db()
    assert entry.status == "pending" and entry.events.count() == 1


def test_only_finance_of_the_tenant_may_record_a_payout(
    approved, api_client, shop, make_user, django_capture_on_commit_callbacks, db
):
    from ledger.models import Tenant

    _, _, entry = approved
    other = Tenant.objects.create(slug="other", name="Other")
    outsider = make_user("other-finance", "finance", tenant=other)
    capture = django_capture_on_commit_callbacks

    assert _paid(api_client(shop["support"]), entry.pk, {"reference": "TRF-1"}, capture=capture).status_code == 403
    assert _paid(api_client(outsider), entry.pk, {"reference": "TRF-1"}, capture=capture).status_code == 404
    assert _paid(api_client(shop["finance"]), 999999, {"reference": "TRF-1"}, capture=capture).status_code == 404
    entry.refresh_from_db()
    assert entry.status == "pending"


def test_a_refund_paid_through_stripe_is_not_recorded_by_hand(
    fake_stripe, shop, api_client, django_capture_on_commit_callbacks, settings
):
    settings.PAYMENT_GATEWAY = "stripe"
    ticket, request = ticket_awaiting_approval(order=shop["order"], filer=shop["support"], amount="30.00", key="k-s")
    with django_capture_on_commit_callbacks(execute=True):
        approve(request, shop["finance"])
    approval_execute(request_id=request.pk)
    entry = RefundEntry.objects.get(order=shop["order"])
    assert entry.gateway == "stripe"

    response = _paid(
        api_client(shop["finance"]), entry.pk, {"reference": "TRF-1"}, capture=django_capture_on_commit_callbacks
    )

    assert response.status_code == 409 and response.json()["code"] == "not_awaiting_manual_payout"


def test_finance_records_the_payout_on_the_admin_review_page(
    approved, shop, client, django_capture_on_commit_callbacks
):
    ticket, request, entry = approved
    client.force_login(shop["finance2"])
    review = f"/admin/approvals/approvalrequest/{request.pk}/change/"
    page = client.get(review).content.decode()
    assert 'id="ra-record-payout"' in page and "Approved, not paid yet" in page

    # a reference that looks like card digits is refused and nothing is recorded
    refused = client.post(f"/admin/approvals/approvalrequest/{request.pk}/paid/", {"reference": "4111111111111111"})
    assert refused.status_code == 302
    entry.refresh_from_db()
    assert entry.status == "pending"

    with django_capture_on_commit_callbacks(execute=True):
        done = client.post(f"/admin/approvals/approvalrequest/{request.pk}/paid/", {"reference": "SEPA-2026-11-26-7"})
    approval_execute(request_id=request.pk)
    assert done.status_code == 302
    entry.refresh_from_db()
    ticket.refresh_from_db()
    assert (entry.status, entry.provider_ref) == ("succeeded", "SEPA-2026-11-26-7")
    assert entry.events.order_by("-id").first().recorded_by == shop["finance2"]
    assert ticket.status == Ticket.Status.REFUNDED
    assert 'id="ra-record-payout"' not in client.get(review).content.decode()


def test_support_cannot_record_a_payout_in_the_admin(approved, shop, client):
    _, request, entry = approved
    client.force_login(shop["support"])
    response = client.post(f"/admin/approvals/approvalrequest/{request.pk}/paid/", {"reference": "TRF-1"})
    assert response.status_code in (302, 403)  # the admin sends a non-staff user to its login
    entry.refresh_from_db()
    assert entry.status == "pending"


def test_a_reference_already_used_for_another_payout_is_a_409_not_a_500(
    approved, api_client, shop, django_capture_on_commit_callbacks
):
    _, _, entry = approved
    other_ticket, other = ticket_awaiting_approval(
        order=shop["order"], filer=shop["support"], amount="20.00", key="k-2"
    )
    with django_capture_on_commit_callbacks(execute=True):
        approve(other, shop["finance"])
    approval_execute(request_id=other.pk)
    other_entry = RefundEntry.objects.get(idempotency_key="k-2")
    client = api_client(shop["finance"])
    capture = django_capture_on_commit_callbacks

    assert _paid(client, entry.pk, {"reference": "TRF-SAME"}, capture=capture).status_code == 200
    again = _paid(client, other_entry.pk, {"reference": "TRF-SAME"}, capture=capture)

    assert again.status_code == 409 and again.json()["code"] == "reference_already_used"
    other_entry.refresh_from_db()
    assert other_entry.status == "pending"
