"""approval_request_decide through the API and the service: the rules of deciding one exact action.
Every test builds its own shop, people and orders (not the demo's)."""

import threading
from datetime import timedelta
from decimal import Decimal

import pytest
from django.db import connection
from django.utils import timezone

from approvals.exceptions import ApprovalConflict
from approvals.models import ApprovalRequest, ApprovalVote
from approvals.services.decisions import approval_request_decide
from ledger.exceptions import Forbidden, InvalidInput, NotFound
from ledger.models import Order, RefundEntry
from ledger.services import ledger_refund_issue
from tests.factories import manual_payout_record

pytestmark = pytest.mark.django_db


def decide(client, request, decision="approve", args_hash=None, **extra):
    body = {"decision": decision, "args_hash": request.args_hash if args_hash is None else args_hash, **extra}
    return client.post(f"/api/approvals/{request.pk}/decision", body, content_type="application/json")


def entries_for(request):
    return RefundEntry.objects.filter(order_id=request.order_id, source="approval")


def approve_all_at_once(clients, request) -> list[int]:
    """Every client approves `request` at the same moment, each in its own thread (and its own
    database connection). Returns the HTTP statuses in the order they came back."""
    barrier = threading.Barrier(len(clients))
    statuses = []

    def approve(client):
        try:
            barrier.wait()
            statuses.append(decide(client, request).status_code)
        finally:
            connection.close()

    threads = [threading.Thread(target=approve, args=(c,)) for c in clients]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return statuses


def test_approve_with_the_right_hash_writes_exactly_the_approved_refund(
    file_request, client_as, django_capture_on_commit_callbacks
):
    # given a pending request for a 120.00 USD order, filed by support
    request = file_request("120.00")
    # when finance approves it with the hash it saw
    with django_capture_on_commit_callbacks(execute=True):
        response = decide(client_as("finance"), request, note="checked")
    # then 200, one ledger entry of exactly 120.00 USD under the request's key, and the evaluator agreed
    assert response.status_code == 200, response.content
    body = response.json()
    assert body["status"] == "approved"
    assert body["decided_by"] == "finance"
    assert body["amount"] == "120.00" and body["currency"] == "USD"
    assert [v["approver"] for v in body["approvals"]] == ["finance"]
    entry = RefundEntry.objects.get(idempotency_key=request.idempotency_key)
    assert entry.amount == Decimal("120.00") and entry.currency == "USD" and entry.approval_ref == str(request.pk)
    # (the manual gateway: executed once finance records the payout they made by hand)
    request = manual_payout_record(request)
    assert request.status == ApprovalRequest.Status.EXECUTED
    assert request.ledger_entry_id == entry.pk
    assert request.verification["ok"] is True
    assert entries_for(request).count() == 1


@pytest.mark.parametrize("case", ["wrong_hash", "expired", "already_decided"])
def test_conflicts_answer_409_and_write_nothing(
    case, file_request, client_as, people, django_capture_on_commit_callbacks
):
    # given a pending request, in a state that must refuse approval
    request = file_request("120.00")
    args_hash = request.args_hash
    if case == "wrong_hash":
        args_hash = "0" * 64
    elif case == "expired":
        ApprovalRequest.objects.filter(pk=request.pk).update(expires_at=timezone.now() - timedelta(seconds=1))
    else:
        approval_request_decide(
            request_id=request.pk, user=people["finance2"], decision="deny", args_hash=request.args_hash, note="no"
        )
    before = ApprovalRequest.objects.get(pk=request.pk)
    votes_before = ApprovalVote.objects.count()
    # when finance approves
    with django_capture_on_commit_callbacks(execute=True) as callbacks:
        response = decide(client_as("finance"), request, args_hash=args_hash)
    # then 409 with a reason; no vote, no status change, no ledger entry, nothing enqueued
    assert response.status_code == 409, response.content
    assert response.json()["code"] in {"args_hash_mismatch", "approval_expired", "already_decided"}
    after = ApprovalRequest.objects.get(pk=request.pk)
    assert (after.status, after.decided_by_id, after.updated_at) == (
        before.status,
        before.decided_by_id,
        before.updated_at,
    )
    assert ApprovalVote.objects.count() == votes_before
    assert not entries_for(request).exists()
    assert callbacks == []


def test_an_expired_request_cannot_be_approved_before_the_sweep(file_request, people):
    # given a request whose expiry passed, still `pending` because the sweep has not run
    request = file_request("50.00")
    ApprovalRequest.objects.filter(pk=request.pk).update(expires_at=timezone.now() - timedelta(minutes=1))
    # when / then approving it is a conflict
    with pytest.raises(ApprovalConflict) as exc:
        approval_request_decide(
            request_id=request.pk, user=people["finance"], decision="approve", args_hash=request.args_hash
        )
    assert getattr(exc.value, "status_code", None) == 409
    assert ApprovalRequest.objects.get(pk=request.pk).status == "pending"


def test_the_filer_cannot_approve_their_own_ticket(file_request, client_as):
    # given the lead (support + finance) filed the ticket
    request = file_request("120.00", filer="lead")
    # when the lead approves it
    response = decide(client_as("lead"), request)
    # then 403 maker-checker, and nothing is decided
    assert response.status_code == 403
    assert response.json()["code"] == "maker_checker"
    assert ApprovalRequest.objects.get(pk=request.pk).status == "pending"
    assert not ApprovalVote.objects.filter(request=request).exists()


def test_support_cannot_decide(file_request, client_as):
    request = file_request("120.00", filer="lead")
    response = decide(client_as("support"), request)
    assert response.status_code == 403
    assert response.json()["code"] == "role_required"
    assert ApprovalRequest.objects.get(pk=request.pk).status == "pending"


def test_another_tenants_finance_gets_404(file_request, client_as):
    request = file_request("120.00")
    client = client_as("other-finance")
    assert decide(client, request).status_code == 404
    assert client.get(f"/api/approvals/{request.pk}").status_code == 404
    assert client.get("/api/approvals?status=pending").json()["count"] == 0
    assert ApprovalRequest.objects.get(pk=request.pk).status == "pending"


def test_finance_without_the_permission_is_refused(file_request, people):
    # given a finance user whose group lost the approve permission
    finance = people["finance2"]
    from django.contrib.auth.models import Permission

    finance.groups.get(name="finance").permissions.remove(Permission.objects.get(codename="approve_approvalrequest"))
    finance = type(finance).objects.get(pk=finance.pk)
    request = file_request("120.00")
    with pytest.raises(Forbidden):
        approval_request_decide(request_id=request.pk, user=finance, decision="approve", args_hash=request.args_hash)


def test_above_the_threshold_two_distinct_approvers_are_needed(
    file_request, client_as, django_capture_on_commit_callbacks
):
    # given an order of 750.00 USD: above refund-policy-v4's 500.00 threshold
    request = file_request("750.00")
    assert request.required_approvals == 2
    first = client_as("finance")
    # when the first finance user approves
    with django_capture_on_commit_callbacks(execute=True) as callbacks:
        response = decide(first, request, note="looks right")
    # then 200, still pending, the vote listed, the ledger untouched
    assert response.status_code == 200, response.content
    body = response.json()
    assert body["status"] == "pending"
    assert [v["approver"] for v in body["approvals"]] == ["finance"]
    assert callbacks == []
    assert not entries_for(request).exists()

    # when the same person approves again, it does not count twice
    with django_capture_on_commit_callbacks(execute=True):
        again = decide(first, request)
    assert again.status_code == 409
    assert again.json()["code"] == "already_voted"
    assert ApprovalRequest.objects.get(pk=request.pk).status == "pending"
    assert ApprovalVote.objects.filter(request=request).count() == 1
    assert not entries_for(request).exists()

    # when a second, distinct finance user approves
    with django_capture_on_commit_callbacks(execute=True) as callbacks:
        second = decide(client_as("finance2"), request)
    # then it is approved, executed once, with both approvals recorded
    assert second.status_code == 200, second.content
    assert len(callbacks) == 1
    assert [v["approver"] for v in second.json()["approvals"]] == ["finance", "finance2"]
    request = manual_payout_record(request)
    assert request.status == "executed"
    assert request.verification["ok"] is True
    entry = RefundEntry.objects.get(idempotency_key=request.idempotency_key)
    assert entry.amount == Decimal("750.00")
    assert entries_for(request).count() == 1


def test_a_refund_recorded_after_the_request_invalidates_it(file_request, people, django_capture_on_commit_callbacks):
    # given a request for an order's full 120.00, then the shop records a 50.00 refund on the order
    request = file_request("120.00")
    order = Order.objects.get(pk=request.order_id)
    ledger_refund_issue(order=order, amount="50.00", currency="USD", idempotency_key="shop:late", source="import")
    # when finance approves the request as it was shown
    with django_capture_on_commit_callbacks(execute=True):
        with pytest.raises(ApprovalConflict) as exc:
            approval_request_decide(
                request_id=request.pk, user=people["finance"], decision="approve", args_hash=request.args_hash
            )
    # then 409: invalidated, not executed, and replaced by a request for what is still refundable
    assert exc.value.status_code == 409
    assert exc.value.code == "approval_invalidated"
    request.refresh_from_db()
    assert request.status == ApprovalRequest.Status.INVALIDATED
    assert not RefundEntry.objects.filter(idempotency_key=request.idempotency_key).exists()
    replacement = request.replaced_by
    assert replacement is not None and replacement.status == "pending"
    assert replacement.amount == Decimal("70.00")
    assert replacement.args_hash != request.args_hash
    assert replacement.idempotency_key == request.idempotency_key + ":r1"
    assert replacement.refundable_at_request == Decimal("70.00")
    assert exc.value.details["replaced_by"] == replacement.pk


def test_a_new_policy_version_invalidates_the_request(file_request, people):
    # given a request made under refund-policy-v4, then v5 is published
    from approvals.models import RefundPolicy

    request = file_request("50.00")
    v4 = request.policy
    RefundPolicy.objects.create(
        tenant=v4.tenant,
        version="refund-policy-v5",
        status="published",
        window_days=30,
        full_refund_statuses=v4.full_refund_statuses,
        item_refund_statuses=v4.item_refund_statuses,
        full_refund_destinations=v4.full_refund_destinations,
        item_refund_destinations=v4.item_refund_destinations,
        two_approver_threshold=v4.two_approver_threshold,
        two_approver_threshold_currency=v4.two_approver_threshold_currency,
        text="v5",
        published_at=timezone.now(),
    )
    # when finance approves
    with pytest.raises(ApprovalConflict) as exc:
        approval_request_decide(
            request_id=request.pk, user=people["finance"], decision="approve", args_hash=request.args_hash
        )
    # then it is invalidated and replaced by a request citing v5
    assert exc.value.status_code == 409
    request.refresh_from_db()
    assert request.status == "invalidated"
    assert request.replaced_by.policy_version == "refund-policy-v5"
    assert request.replaced_by.amount == request.amount


def test_request_changes_stores_the_wanted_amount_and_never_edits_the_request(file_request, client_as):
    request = file_request("120.00")
    response = decide(
        client_as("finance"),
        request,
        decision="request_changes",
        note="Only the headphones' shipping",
        wanted_amount="30.00",
    )
    assert response.status_code == 200, response.content
    request.refresh_from_db()
    assert request.status == "changes_requested"
    assert request.requested_amount_change == Decimal("30.00")
    assert request.amount == Decimal("120.00") and request.args["amount"] == "120.00"
    assert request.decision_note == "Only the headphones' shipping"


@pytest.mark.parametrize("decision,status", [("deny", "denied"), ("escalate", "escalated")])
def test_deny_and_escalate_are_decisions(decision, status, file_request, client_as):
    request = file_request("120.00")
    response = decide(client_as("finance"), request, decision=decision, note="why")
    assert response.status_code == 200
    assert response.json()["status"] == status
    assert response.json()["decided_by"] == "finance"
    assert not entries_for(request).exists()
    # and a second decision is a conflict
    assert decide(client_as("finance2"), request).status_code == 409


@pytest.mark.parametrize(
    "body",
    [
        {"decision": "approve"},
        {"decision": "maybe", "args_hash": "x"},
        {"decision": "approve", "args_hash": ""},
        {"decision": "request_changes", "args_hash": "x", "wanted_amount": 12.5},
        {"decision": "approve", "args_hash": "x", "note": "n" * 5000},
    ],
)
def test_bad_bodies_answer_422(body, file_request, client_as):
    request = file_request("120.00")
    response = client_as("finance").post(f"/api/approvals/{request.pk}/decision", body, content_type="application/json")
    assert response.status_code == 422
    assert ApprovalRequest.objects.get(pk=request.pk).status == "pending"


def test_bad_wanted_amount_answers_422(file_request, people):
    request = file_request("120.00")
    for wanted in ("abc", "-5.00", "1.234"):
        with pytest.raises(InvalidInput):
            approval_request_decide(
                request_id=request.pk,
                user=people["finance"],
                decision="request_changes",
                args_hash=request.args_hash,
                wanted_amount=wanted,
            )


def test_list_and_detail(file_request, client_as, people):
    first = file_request("120.00")
    second = file_request("50.00")
    approval_request_decide(request_id=second.pk, user=people["finance"], decision="deny", args_hash=second.args_hash)
    client = client_as("finance")
    pending = client.get("/api/approvals?status=pending").json()
    assert pending["count"] == 1 and [r["id"] for r in pending["items"]] == [first.pk]
    everything = client.get("/api/approvals").json()
    assert [r["id"] for r in everything["items"]] == [first.pk, second.pk]
    assert client.get("/api/approvals?status=nonsense").status_code == 422
    detail = client.get(f"/api/approvals/{first.pk}").json()
    for key in (
        "id",
        "status",
        "action",
        "order",
        "amount",
        "currency",
        "args",
        "args_hash",
        "idempotency_key",
        "policy_version",
        "trace_id",
        "approver_role",
        "expires_at",
        "requested_by",
        "decided_by",
        "decided_at",
        "ticket",
    ):
        assert key in detail
    assert detail["amount"] == "120.00" and detail["order"] == "ORD-1"
    assert client_as("support").get("/api/approvals").status_code == 403
    assert client.get("/api/approvals/999999").status_code == 404


def test_unknown_request_is_not_found(people):
    with pytest.raises(NotFound):
        approval_request_decide(request_id=999999, user=people["finance"], decision="approve", args_hash="x")


@pytest.mark.django_db(transaction=True)
def test_sixteen_concurrent_approvals_give_one_decision_and_one_entry(file_request, client_as):
    # given one pending request and 16 clients ready to approve it at the same moment
    request = file_request("120.00")
    clients = [client_as("finance" if n % 2 else "finance2") for n in range(16)]
    # when they all approve (tasks eager: the winner executes on commit, in its thread)
    statuses = approve_all_at_once(clients, request)
    # then one 200, fifteen 409, one ledger entry, one vote
    assert sorted(statuses) == [200] + [409] * 15
    assert RefundEntry.objects.filter(idempotency_key=request.idempotency_key).count() == 1
    assert entries_for(request).count() == 1
    assert ApprovalVote.objects.filter(request=request).count() == 1
    # written once, waiting for finance to pay it by hand (the manual gateway)
    assert ApprovalRequest.objects.get(pk=request.pk).status == "approved"
    assert RefundEntry.objects.get(idempotency_key=request.idempotency_key).status == "pending"


@pytest.mark.django_db(transaction=True)
def test_two_approvers_at_once_above_the_threshold_execute_once(file_request, client_as):
    # given a 750.00 request that needs two approvers, and both approve at the same moment
    request = file_request("750.00")
    clients = [client_as("finance"), client_as("finance2")]
    statuses = approve_all_at_once(clients, request)
    # then both count: the request is executed, once
    assert statuses == [200, 200]
    # written once, waiting for finance to pay it by hand (the manual gateway)
    assert ApprovalRequest.objects.get(pk=request.pk).status == "approved"
    assert RefundEntry.objects.get(idempotency_key=request.idempotency_key).status == "pending"
    assert RefundEntry.objects.filter(idempotency_key=request.idempotency_key).count() == 1
