"""The ticket follows its approval request (refundagent.receivers): decisions, execution and the
evaluator's verdict move the ticket and write the trace (spans approval, ledger, verify)."""

from datetime import timedelta
from decimal import Decimal

import pytest
from django.utils import timezone

from approvals.exceptions import ApprovalConflict
from approvals.gate import Proposal, policy_current, policy_gate_evaluate
from approvals.models import ApprovalRequest
from approvals.review import review_sections
from approvals.services.decisions import approval_request_decide
from approvals.services.execution import approval_execute
from approvals.services.refile import approval_request_payment_retry
from approvals.services.requests import approval_request_create, approval_requests_expire
from ledger.models import Order, RefundEntry
from ledger.services import ledger_refund_correct, ledger_refund_issue
from refundagent.agent.prompts import facts_from_messages
from refundagent.exceptions import TicketStateConflict
from refundagent.models import Ticket
from refundagent.services import ticket_close, ticket_create, ticket_escalate
from tests.factories import manual_payout_record

pytestmark = pytest.mark.django_db


def ticket_with_request(user, order="ORD-5001", filer="acme-support", amount=None, message="The headphones broke."):
    """A ticket waiting for finance and its approval request, built directly (no agent run)."""
    filer_user = user(filer)
    tenant = filer_user.membership.tenant
    found = Order.objects.select_related("customer").get(tenant=tenant, external_id=order)
    ticket = Ticket.objects.create(
        tenant=tenant,
        order=found,
        customer=found.customer,
        message=message,
        currency=found.currency,
        created_by=filer_user,
        status=Ticket.Status.APPROVAL_REQUIRED,
        stop_reason=Ticket.StopReason.APPROVAL_REQUIRED,
    )
    policy = policy_current(tenant)
    verdict = policy_gate_evaluate(
        order=found,
        policy=policy,
        proposal=Proposal(
            recommendation="refund", amount=Decimal(amount) if amount else None, policy_version=policy.version
        ),
        now=timezone.now(),
    )
    request, _ = approval_request_create(
        order=found,
        policy=policy,
        verdict=verdict,
        idempotency_key=f"refund:test:ticket-{ticket.pk}",
        requested_by=filer_user,
        ticket_ref=ticket.pk,
        trace_id=str(ticket.trace_id),
    )
    return ticket, request


def spans(ticket):
    return [(e.span, e.decision) for e in ticket.trace_events.order_by("seq")]


def decide(user, request, decision="approve", username="acme-finance", **extra):
    return approval_request_decide(
        request_id=request.pk, user=user(username), decision=decision, args_hash=request.args_hash, **extra
    )


def test_approved_executed_verified_ticket_is_refunded(user, api_client, django_capture_on_commit_callbacks):
    # given a ticket waiting for finance on ORD-5001
    ticket, request = ticket_with_request(user)
    # when finance approves through the API with the hash shown
    with django_capture_on_commit_callbacks(execute=True):
        response = api_client("acme-finance").post(
            f"/api/approvals/{request.pk}/decision",
            {"decision": "approve", "args_hash": request.args_hash, "note": "ok"},
            content_type="application/json",
        )
    assert response.status_code == 200
    # (approved and written; the manual gateway waits for finance to record the payout made by hand)
    ticket.refresh_from_db()
    assert ticket.status == Ticket.Status.APPROVED
    with django_capture_on_commit_callbacks(execute=True):
        manual_payout_record(request)
    # then one ledger entry of exactly 120.00, the ticket refunded, and the evaluator's verdict in the trace
    assert RefundEntry.objects.filter(order=ticket.order, source="approval").count() == 1
    assert RefundEntry.objects.get(idempotency_key=request.idempotency_key).amount == Decimal("120.00")
    ticket.refresh_from_db()
    assert ticket.status == Ticket.Status.REFUNDED
    assert spans(ticket) == [
        ("approval", "approve"),
        ("ledger", "refund_issued"),
        ("ledger", "payout_recorded"),
        ("verify", "verified"),
    ]
    verify = ticket.trace_events.get(span="verify")
    assert verify.status == "ok" and verify.data["verdict"]["ok"] is True
    assert {c["name"] for c in verify.data["verdict"]["checks"]} >= {"one_entry_under_key", "amount_exact"}


def test_through_the_agent_file_approve_refund(user, django_capture_on_commit_callbacks):
    # given support files a ticket and the agent (offline provider) runs on commit
    with django_capture_on_commit_callbacks(execute=True):
        ticket = ticket_create(
            user=user("acme-support"),
            order="ORD-5001",
            customer="CUST-1001",
            message="My headphones stopped charging; please refund.",
            requested_amount="120.00",
        )
    ticket.refresh_from_db()
    assert ticket.status == Ticket.Status.APPROVAL_REQUIRED, ticket.stop_detail
    request = ApprovalRequest.objects.get(ticket_ref=ticket.pk)
    # when finance approves
    with django_capture_on_commit_callbacks(execute=True):
        decide(user, request)
    with django_capture_on_commit_callbacks(execute=True):
        manual_payout_record(request)  # the manual gateway: finance paid by hand
    # then refunded, with the approval, ledger and verify events after the agent's
    ticket.refresh_from_db()
    assert ticket.status == Ticket.Status.REFUNDED
    assert [s for s, _ in spans(ticket)][-4:] == ["approval", "ledger", "ledger", "verify"]


def test_first_of_two_approvals_keeps_the_ticket_waiting(user, django_capture_on_commit_callbacks):
    ticket, request = ticket_with_request(user, order="ORD-5006")
    with django_capture_on_commit_callbacks(execute=True):
        decide(user, request)
    ticket.refresh_from_db()
    assert ticket.status == Ticket.Status.APPROVAL_REQUIRED
    assert spans(ticket) == [("approval", "approve_vote")]
    with django_capture_on_commit_callbacks(execute=True):
        decide(user, request, username="acme-finance2")
    with django_capture_on_commit_callbacks(execute=True):
        manual_payout_record(request)  # the manual gateway: finance paid by hand
    ticket.refresh_from_db()
    assert ticket.status == Ticket.Status.REFUNDED
    assert spans(ticket)[1:] == [
        ("approval", "approve"),
        ("ledger", "refund_issued"),
        ("ledger", "payout_recorded"),
        ("verify", "verified"),
    ]


@pytest.mark.parametrize(
    "decision,status,stop_reason",
    [("deny", Ticket.Status.DENIED, "denied"), ("escalate", Ticket.Status.ESCALATED, "escalated")],
)
def test_deny_and_escalate_move_the_ticket(decision, status, stop_reason, user):
    ticket, request = ticket_with_request(user)
    decide(user, request, decision=decision, note="Customer already got a replacement.")
    ticket.refresh_from_db()
    assert (ticket.status, ticket.stop_reason) == (status, stop_reason)
    assert "Customer already got a replacement." in ticket.stop_detail
    assert spans(ticket) == [("approval", decision)]
    assert not RefundEntry.objects.filter(idempotency_key=request.idempotency_key).exists()


def test_request_changes_sends_the_ticket_back_with_the_note_and_a_lower_amount(
    user, django_capture_on_commit_callbacks
):
    # given a ticket asking 120.00 waiting for finance
    ticket, request = ticket_with_request(user)
    Ticket.objects.filter(pk=ticket.pk).update(requested_amount=Decimal("120.00"))
    # when finance requests changes, wanting 50.00
    with django_capture_on_commit_callbacks(execute=False) as callbacks:
        decide(
            user, request, decision="request_changes", note="Only the charger is faulty: 50.00.", wanted_amount="50.00"
        )
    # then the ticket is queued again with the note, its amount lowered, and a new run enqueued on commit
    ticket.refresh_from_db()
    assert ticket.status == Ticket.Status.QUEUED and ticket.stop_reason is None
    assert ticket.requested_amount == Decimal("50.00")
    assert "Only the charger is faulty" in ticket.stop_detail
    assert spans(ticket) == [("approval", "request_changes")]
    assert len(callbacks) == 1
    # and the request itself was never edited
    request.refresh_from_db()
    assert request.status == "changes_requested" and request.amount == Decimal("120.00")
    # when the new run happens, the gate makes a NEW request with its own hash for the lower amount
    with django_capture_on_commit_callbacks(execute=True):
        callbacks[0]()
    ticket.refresh_from_db()
    assert ticket.status == Ticket.Status.APPROVAL_REQUIRED, ticket.stop_detail
    new = ApprovalRequest.objects.filter(ticket_ref=ticket.pk).exclude(pk=request.pk).get()
    assert new.amount == Decimal("50.00") and new.args_hash != request.args_hash
    # and the new run's model saw why finance sent it back (in the trusted facts, not the customer text)
    rerun = ticket.runs.order_by("-id").first()
    facts = facts_from_messages(rerun.messages)
    assert facts["finance_review"] == {
        "decision": "request_changes",
        "note": "Only the charger is faulty: 50.00.",
        "wanted_amount": "50.00",
        "previous_request": request.pk,
    }
    assert facts["requested_amount"] == "50.00"


def test_request_changes_never_raises_the_amount(user):
    ticket, request = ticket_with_request(user)
    Ticket.objects.filter(pk=ticket.pk).update(requested_amount=Decimal("40.00"))
    decide(user, request, decision="request_changes", note="more?", wanted_amount="100.00")
    ticket.refresh_from_db()
    assert ticket.requested_amount == Decimal("40.00")


def test_expired_request_escalates_the_ticket(user):
    ticket, request = ticket_with_request(user)
    ApprovalRequest.objects.filter(pk=request.pk).update(expires_at=timezone.now() - timedelta(minutes=1))
    assert approval_requests_expire() == 1
    ticket.refresh_from_db()
    assert ticket.status == Ticket.Status.ESCALATED
    assert "expired" in ticket.stop_detail
    assert spans(ticket) == [("approval", "expire")]


def test_replaced_request_keeps_the_ticket_waiting(user):
    # given a request, then a 20.00 refund lands on the order
    ticket, request = ticket_with_request(user)
    ledger_refund_issue(order=ticket.order, amount="20.00", currency="USD", idempotency_key="shop:x", source="import")
    # when finance approves the stale request
    with pytest.raises(ApprovalConflict) as exc:
        decide(user, request)
    assert exc.value.status_code == 409
    # then the ticket still waits for finance, on the replacement, and the trace says why
    ticket.refresh_from_db()
    assert ticket.status == Ticket.Status.APPROVAL_REQUIRED
    request.refresh_from_db()
    assert request.replaced_by.amount == Decimal("100.00")
    assert f"#{request.replaced_by_id}" in ticket.stop_detail
    assert spans(ticket) == [("approval", "invalidate"), ("approval", "replace")]


def test_a_request_replaced_at_execution_sends_the_ticket_back_to_finance(user, django_capture_on_commit_callbacks):
    # given a request finance approved, whose execution has not run yet
    ticket, request = ticket_with_request(user)
    with django_capture_on_commit_callbacks(execute=False):
        decide(user, request)
    ticket.refresh_from_db()
    assert ticket.status == Ticket.Status.APPROVED
    # when a 20.00 refund lands on the order first, and then the execution runs
    ledger_refund_issue(order=ticket.order, amount="20.00", currency="USD", idempotency_key="shop:y", source="import")
    approval_execute(request_id=request.pk)
    # then nothing is paid on the stale request, and the ticket waits for finance on its replacement
    request.refresh_from_db()
    assert request.status == ApprovalRequest.Status.INVALIDATED and request.replaced_by.amount == Decimal("100.00")
    assert not RefundEntry.objects.filter(idempotency_key=request.idempotency_key).exists()
    ticket.refresh_from_db()
    assert ticket.status == Ticket.Status.APPROVAL_REQUIRED
    assert f"#{request.replaced_by_id}" in ticket.stop_detail


@pytest.mark.parametrize("taken", ["closed", "escalated"])
def test_a_ticket_a_person_took_gets_no_new_request_when_finance_files_a_refused_payment_again(
    user, fake_stripe, django_capture_on_commit_callbacks, taken
):
    # given a refund the provider refused, and its ticket closed (or escalated) by support afterwards
    ticket, request = ticket_with_request(user, amount="30.00")
    fake_stripe.fail_next("402")
    with django_capture_on_commit_callbacks(execute=True):
        decide(user, request)
    request.refresh_from_db()
    assert request.status == ApprovalRequest.Status.PAYMENT_FAILED
    ticket.refresh_from_db()
    if taken == "closed":
        ticket_close(ticket=ticket, user=user("acme-support"), note="settled by hand", reply="We sent a voucher.")
    else:
        ticket_escalate(ticket=ticket, user=user("acme-support"), note="I will call the customer.")
    # when finance files the refused payment again
    with pytest.raises(TicketStateConflict):
        approval_request_payment_retry(request_id=request.pk, user=user("acme-finance"))
    # then no new request exists, the refused one is as it was, and the ticket stays with the person
    request.refresh_from_db()
    assert (request.status, request.replaced_by_id) == (ApprovalRequest.Status.PAYMENT_FAILED, None)
    assert ApprovalRequest.objects.filter(ticket_ref=ticket.pk).count() == 1
    ticket.refresh_from_db()
    assert ticket.status == taken


def test_invalidated_without_replacement_escalates(user):
    ticket, request = ticket_with_request(user)
    ledger_refund_issue(
        order=ticket.order, amount="120.00", currency="USD", idempotency_key="shop:all", source="import"
    )
    with pytest.raises(ApprovalConflict):
        decide(user, request)
    ticket.refresh_from_db()
    assert ticket.status == Ticket.Status.ESCALATED
    assert "no longer eligible" in ticket.stop_detail


def test_failed_verification_fails_the_ticket_with_the_evidence(user, django_capture_on_commit_callbacks):
    # given a refunded ticket
    ticket, request = ticket_with_request(user)
    with django_capture_on_commit_callbacks(execute=True):
        decide(user, request)
    with django_capture_on_commit_callbacks(execute=True):
        manual_payout_record(request)  # the manual gateway: finance paid by hand
    # when the ledger entry is corrected behind the approval's back and the evaluator runs again
    entry = RefundEntry.objects.get(idempotency_key=request.idempotency_key)
    ledger_refund_correct(entry=entry, new_amount="10.00", reason="operator error")
    from approvals.services.verification import approval_verify

    approval_verify(request_id=request.pk)
    # then the ticket is failed, with the evidence, and the trace says so
    ticket.refresh_from_db()
    assert ticket.status == Ticket.Status.FAILED and ticket.stop_reason == "failed"
    assert "amount_exact" in ticket.stop_detail and "10.00" in ticket.stop_detail
    assert spans(ticket)[-1] == ("verify", "verification_failed")


def test_execution_twice_traces_the_replay_once(user, django_capture_on_commit_callbacks):
    ticket, request = ticket_with_request(user)
    with django_capture_on_commit_callbacks(execute=False):
        decide(user, request)
    approval_execute(request_id=request.pk)
    approval_execute(request_id=request.pk)
    assert RefundEntry.objects.filter(idempotency_key=request.idempotency_key).count() == 1
    assert [s for s, _ in spans(ticket)].count("ledger") == 1


def test_review_sections_show_the_ticket_draft_reply_and_trace(user, django_capture_on_commit_callbacks):
    with django_capture_on_commit_callbacks(execute=True):
        ticket = ticket_create(
            user=user("acme-support"),
            order="ORD-5001",
            customer="CUST-1001",
            message="Refund <script>alert(1)</script> please",
            requested_amount="120.00",
        )
    request = ApprovalRequest.objects.get(ticket_ref=ticket.pk)
    sections = review_sections(request)
    titles = [s["title"] for s in sections]
    assert titles[0] == f"Ticket #{ticket.pk}"
    assert "Draft recommendation" in titles
    assert any(t.startswith("Customer reply draft") for t in titles)
    assert any(t.startswith("Trace timeline") for t in titles)
    html = "".join(str(s["html"]) for s in sections)
    assert "<script>" not in html and "&lt;script&gt;" in html
