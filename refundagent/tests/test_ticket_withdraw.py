"""Closing or escalating a ticket withdraws its pending approval request in the
same transaction; finance approving it afterwards is a 409 and moves nothing."""

import threading

import pytest
from django.db import connection

from approvals.exceptions import ApprovalConflict
from approvals.models import ApprovalRequest
from approvals.services.decisions import approval_request_decide
from approvals.services.refile import approval_request_payment_retry
from ledger.models import RefundEntry
from refundagent.exceptions import TicketStateConflict
from refundagent.models import Ticket
from refundagent.services import ticket_close, ticket_escalate
from refundagent.tests.test_receivers import ticket_with_request

pytestmark = pytest.mark.django_db


def approve(user, request, username="acme-finance"):
    return approval_request_decide(
        request_id=request.pk, user=user(username), decision="approve", args_hash=request.args_hash
    )


def test_escalating_withdraws_the_pending_request(user):
    # given a ticket waiting for finance
    ticket, request = ticket_with_request(user)
    # when support escalates it
    ticket_escalate(ticket=ticket, user=user("acme-support"), note="customer called")
    # then the request is withdrawn, and approving it is a conflict that moves nothing
    request.refresh_from_db()
    assert request.status == ApprovalRequest.Status.WITHDRAWN
    assert "Escalated by acme-support" in request.decision_note
    with pytest.raises(ApprovalConflict):
        approve(user, request)
    assert not RefundEntry.objects.filter(order=request.order).exists()
    assert ticket.trace_events.filter(decision="escalate", data__withdrawn=[request.pk]).exists()


def test_escalate_then_close_then_approve_is_refused(user, api_client):
    # given the reproduction of the issue: escalate, then close
    ticket, request = ticket_with_request(user)
    ticket_escalate(ticket=ticket, user=user("acme-support"))
    ticket_close(ticket=ticket, user=user("acme-support"))
    # when finance approves the request through the API
    response = api_client("acme-finance").post(
        f"/api/approvals/{request.pk}/decision",
        {"decision": "approve", "args_hash": request.args_hash},
        content_type="application/json",
    )
    # then 409, the ticket stays closed and nothing moved
    assert response.status_code == 409
    assert Ticket.objects.get(pk=ticket.pk).status == Ticket.Status.CLOSED
    assert not RefundEntry.objects.filter(order=request.order).exists()


def test_closing_an_escalated_ticket_withdraws_a_request_still_pending(user):
    # given an escalated ticket whose request is somehow still pending (made before this rule)
    ticket, request = ticket_with_request(user)
    Ticket.objects.filter(pk=ticket.pk).update(status=Ticket.Status.ESCALATED)
    ticket.refresh_from_db()
    # when it is closed
    ticket_close(ticket=ticket, user=user("acme-support"))
    # then the request is withdrawn with it
    assert ApprovalRequest.objects.get(pk=request.pk).status == ApprovalRequest.Status.WITHDRAWN
    with pytest.raises(ApprovalConflict):
        approve(user, request)


def test_escalating_a_ticket_whose_refund_is_executing_is_refused(user, django_capture_on_commit_callbacks):
    # given finance approved; the execution has not run yet
    ticket, request = ticket_with_request(user)
    with django_capture_on_commit_callbacks(execute=False):
        approve(user, request)
    ticket.refresh_from_db()
    # when support escalates: refused, the approval stands
    with pytest.raises(TicketStateConflict):
        ticket_escalate(ticket=ticket, user=user("acme-support"))
    assert ApprovalRequest.objects.get(pk=request.pk).status == ApprovalRequest.Status.APPROVED
    assert Ticket.objects.get(pk=ticket.pk).status == Ticket.Status.APPROVED


def _race(*actions):
    barrier = threading.Barrier(len(actions))
    outcomes = []

    def run(action):
        try:
            barrier.wait()
            action()
            outcomes.append("ok")
        except (ApprovalConflict, TicketStateConflict) as exc:
            outcomes.append(type(exc).__name__)
        finally:
            connection.close()

    threads = [threading.Thread(target=run, args=(a,)) for a in actions]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return outcomes


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize("move", ["close", "escalate"])
def test_close_or_escalate_racing_an_approval_never_both_win(user, move):
    for attempt in range(6):
        # given a ticket with a pending request (closable when escalated: made before the rule)
        ticket, request = ticket_with_request(user, amount="5.00", message=f"Attempt {attempt}")
        if move == "close":
            Ticket.objects.filter(pk=ticket.pk).update(status=Ticket.Status.ESCALATED)
            ticket.refresh_from_db()
        service = ticket_close if move == "close" else ticket_escalate
        # when the ticket move and finance's approval run at the same moment (tasks eager)
        outcomes = _race(
            lambda s=service, t=ticket: s(ticket=t, user=user("acme-support")), lambda r=request: approve(user, r)
        )
        # then exactly one wins
        assert sorted(outcomes).count("ok") == 1, outcomes
        ticket.refresh_from_db()
        request.refresh_from_db()
        moved = RefundEntry.objects.filter(idempotency_key=request.idempotency_key).exists()
        if moved:
            # the approval won: the ticket was not closed (an escalated one stays with its person);
            # the manual gateway's refund waits, approved, for finance to record the payout
            assert request.status == ApprovalRequest.Status.APPROVED
            assert RefundEntry.objects.get(idempotency_key=request.idempotency_key).status == "pending"
            assert ticket.status == (Ticket.Status.ESCALATED if move == "close" else Ticket.Status.APPROVED)
        else:
            assert request.status == ApprovalRequest.Status.WITHDRAWN
            assert ticket.status == (Ticket.Status.CLOSED if move == "close" else Ticket.Status.ESCALATED)


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize("move", ["close", "escalate"])
def test_close_or_escalate_racing_finance_filing_a_refused_payment_again_leaves_no_request_behind(
    user, fake_stripe, move
):
    service = ticket_close if move == "close" else ticket_escalate
    for attempt in range(8):
        # given a refund the provider refused: the request and its ticket are payment_failed
        ticket, request = ticket_with_request(user, amount="5.00", message=f"Attempt {attempt}")
        fake_stripe.fail_next("402")
        approve(user, request)
        ticket.refresh_from_db()
        assert ticket.status == Ticket.Status.PAYMENT_FAILED
        # when support closes (or escalates) the ticket while finance files the payment again
        outcomes = _race(
            lambda s=service, t=ticket: s(ticket=t, user=user("acme-support")),
            lambda r=request: approval_request_payment_retry(request_id=r.pk, user=user("acme-finance")),
        )
        ticket.refresh_from_db()
        request.refresh_from_db()
        pending = ApprovalRequest.objects.filter(ticket_ref=ticket.pk, status=ApprovalRequest.Status.PENDING)
        # then never a new request left waiting on a ticket a person has: either finance's new
        # request waits with the ticket, or the person has the ticket and nothing waits
        if ticket.status == Ticket.Status.APPROVAL_REQUIRED:
            assert request.replaced_by_id is not None and list(pending) == [request.replaced_by], outcomes
        else:
            assert ticket.status == (Ticket.Status.CLOSED if move == "close" else Ticket.Status.ESCALATED), outcomes
            assert not pending.exists(), outcomes
        if move == "close":  # a ticket waiting for finance cannot be closed: exactly one wins
            assert outcomes.count("ok") == 1, outcomes
    assert not RefundEntry.objects.filter(order=request.order, status="succeeded").exists()
