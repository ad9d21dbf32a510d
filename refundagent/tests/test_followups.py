"""A ticket that missed an approval event catches up with its money without a person.

The ticket's follow-up of an approval event (refundagent.ticket_events) fails once, the way a bug
or a lock timeout would: finance's decision and the ledger write stand, the event is kept with
them and logged at ERROR, /api/health and the operator dashboard show it, and the outbox sweep
(the Celery beat task) delivers it, and the events after it, in order, until the ticket agrees
with its approval. A follow-up that keeps failing stays visible and is tried once per backoff,
never in a spin."""

import logging
from contextlib import contextmanager
from datetime import timedelta
from itertools import pairwise
from unittest import mock

import pytest
from django.test import Client
from django.utils import timezone

from approvals.exceptions import ApprovalConflict
from approvals.models import ApprovalFollowUp, ApprovalRequest
from approvals.services.refile import approval_request_payment_retry
from ledger.models import RefundEntry
from refundagent import ticket_events
from refundagent.models import Ticket
from refundagent.sweep import outbox_sweep, outbox_sweep_task
from refundagent.tests.payments_support import approve, ticket_awaiting_approval
from refundagent.tests.test_receivers import decide, spans, ticket_with_request
from tests.factories import manual_payout_record
from tests.helpers import signed_in

pytestmark = pytest.mark.django_db


class Fault:
    """The ticket's follow-up of the approval event `event` (a signal's name) raises on its first
    `times` calls, then works (set `times` to 0 to mend it); the other events follow as ever. The
    receiver looks `ticket_events.ticket_follow` up on the module at each call, as production does."""

    def __init__(self, monkeypatch, event: str, times: int = 1):
        self.event, self.times, self.calls = event, times, 0
        real = ticket_events.ticket_follow

        def broken(*, signal, **kwargs):
            if signal.name == self.event:
                self.calls += 1
                if self.calls <= self.times:
                    raise RuntimeError(f"{event} follow-up broke (call {self.calls})")
            return real(signal=signal, **kwargs)

        monkeypatch.setattr(ticket_events, "ticket_follow", broken)


@contextmanager
def at(moment):
    """Every module's clock at `moment` (the sweep, the follow-ups, health)."""
    with mock.patch("django.utils.timezone.now", return_value=moment):
        yield


def followups(request_or_ticket):
    rows = ApprovalFollowUp.objects.order_by("id")
    if isinstance(request_or_ticket, Ticket):
        rows = rows.filter(ticket_ref=request_or_ticket.pk)
    else:
        rows = rows.filter(request=request_or_ticket)
    return [
        (f.event, f.attempts, f.delivered_at is not None) for f in rows.filter(receiver="refundagent.ticket_follow")
    ]


@pytest.fixture(autouse=True)
def _health_without_workers(settings):
    """Health's broker, worker and beat checks answer "eager" here: only the checks of the
    database's contents decide (the worker test below has the real ones)."""
    settings.CELERY_TASK_ALWAYS_EAGER = True


def health(client: Client) -> tuple[int, dict]:
    response = client.get("/api/health")
    return response.status_code, response.json()


def test_the_verified_follow_up_fails_once_and_the_sweep_makes_the_ticket_refunded(
    user, api_client, monkeypatch, django_capture_on_commit_callbacks, caplog
):
    # given a ticket waiting for finance, and its follow-up of the evaluator's verdict failing once
    ticket, request = ticket_with_request(user)
    fault = Fault(monkeypatch, "refund_verified")
    # when finance approves (the execution runs on commit, eagerly)
    with caplog.at_level(logging.ERROR), django_capture_on_commit_callbacks(execute=True):
        response = api_client("acme-finance").post(
            f"/api/approvals/{request.pk}/decision",
            {"decision": "approve", "args_hash": request.args_hash},
            content_type="application/json",
        )
    # and finance records the payout they made by hand (the manual gateway), which verifies it
    with caplog.at_level(logging.ERROR), django_capture_on_commit_callbacks(execute=True):
        manual_payout_record(request)
    # then the decision and the money stand: 200, written once, verified
    assert response.status_code == 200, response.content
    request.refresh_from_db()
    entry = RefundEntry.objects.get(idempotency_key=request.idempotency_key)
    assert request.status == ApprovalRequest.Status.EXECUTED and entry.status == "succeeded"
    # but the ticket is behind its money, and the failure is logged at ERROR and kept
    ticket.refresh_from_db()
    assert ticket.status == Ticket.Status.APPROVED
    assert "refund_verified of approval" in caplog.text and "refund_verified follow-up broke" in caplog.text
    assert followups(request) == [("refund_verified", 1, False)]
    kept = ApprovalFollowUp.objects.get(request=request, receiver="refundagent.ticket_follow")
    assert kept.last_error == "RuntimeError: refund_verified follow-up broke (call 1)"
    assert kept.arguments["values"]["verdict"]["ok"] is True
    # and staff see it counted in health (the threshold not reached yet: still ok)
    status, body = health(signed_in(user("ops")))
    assert (status, body["ticket_followups"]) == (200, "ok")
    assert body["details"]["ticket_followups"] | {"oldest_age_seconds": 0} == {
        "count": 1,
        "failing": 1,
        "most_attempts": 1,
        "oldest_age_seconds": 0,
        "threshold_seconds": 300,
    }

    # when the sweep runs within the backoff (60 s): nothing is tried
    assert outbox_sweep()["approval_followups"] == 0
    assert fault.calls == 1
    # when beat's sweep task runs after it
    with at(timezone.now() + timedelta(seconds=61)):
        outbox_sweep_task.delay()
    # then the ticket caught up with its money, without a person, and the trace says so once
    ticket.refresh_from_db()
    assert ticket.status == Ticket.Status.REFUNDED and "verified by the evaluator" in ticket.stop_detail
    assert spans(ticket) == [
        ("approval", "approve"),
        ("ledger", "refund_issued"),
        ("ledger", "payout_recorded"),
        ("verify", "verified"),
    ]
    assert followups(request) == [("refund_verified", 2, True)]
    # and nothing moved twice; later sweeps find nothing to do
    assert RefundEntry.objects.filter(order=ticket.order).count() == 1
    with at(timezone.now() + timedelta(hours=2)):
        assert outbox_sweep()["approval_followups"] == 0
    assert fault.calls == 2
    status, body = health(signed_in(user("ops")))
    assert status == 200 and body["details"]["ticket_followups"]["count"] == 0


def test_the_approved_follow_up_fails_once_and_the_later_events_wait_for_it(
    user, monkeypatch, django_capture_on_commit_callbacks
):
    # given a ticket waiting for finance, and its follow-up of the approval failing once
    ticket, request = ticket_with_request(user)
    fault = Fault(monkeypatch, "approval_approved")
    # when finance approves, the execution writes the refund, finance records the payout made by hand
    # (the manual gateway) and the execution verifies it
    with django_capture_on_commit_callbacks(execute=True):
        decide(user, request)
    with django_capture_on_commit_callbacks(execute=True):
        manual_payout_record(request)
    # then the money moved and the request is executed
    request.refresh_from_db()
    assert request.status == ApprovalRequest.Status.EXECUTED
    assert RefundEntry.objects.get(idempotency_key=request.idempotency_key).status == "succeeded"
    # and the ticket heard nothing out of order: the execution and the verdict wait behind the
    # approval (verified first would find it approval_required, and leave it there)
    ticket.refresh_from_db()
    assert ticket.status == Ticket.Status.APPROVAL_REQUIRED and spans(ticket) == []
    assert followups(request) == [
        ("approval_approved", 1, False),
        ("refund_executed", 0, False),
        ("refund_executed", 0, False),  # the execution again, after the payout was recorded
        ("refund_verified", 0, False),
    ]

    # when the sweep runs after the backoff
    with at(timezone.now() + timedelta(seconds=61)):
        assert outbox_sweep()["approval_followups"] == 4
    # then the ticket took the four in order and is refunded
    ticket.refresh_from_db()
    assert ticket.status == Ticket.Status.REFUNDED
    assert spans(ticket) == [
        ("approval", "approve"),
        ("ledger", "refund_issued"),
        ("ledger", "payout_recorded"),
        ("verify", "verified"),
    ]
    assert followups(request) == [
        ("approval_approved", 2, True),
        ("refund_executed", 1, True),
        ("refund_executed", 1, True),
        ("refund_verified", 1, True),
    ]
    assert fault.calls == 2
    assert RefundEntry.objects.filter(order=ticket.order).count() == 1


@pytest.fixture
def shop(policy, make_order, make_user):
    return {
        "order": make_order("100.00", external_id="ORD-FU", payment_ref="pi_fu"),
        "support": make_user("support", "support"),
        "finance": make_user("finance", "finance"),
    }


def test_the_payment_failed_follow_up_fails_once_and_the_ticket_goes_back_to_finance(
    fake_stripe, shop, monkeypatch, django_capture_on_commit_callbacks
):
    # given the provider refuses the refund, and the ticket's follow-up of the refusal fails once
    fake_stripe.fail_next("402")
    fault = Fault(monkeypatch, "refund_payment_failed")
    ticket, request = ticket_awaiting_approval(order=shop["order"], filer=shop["support"], amount="40.00", key="fu-1")
    # when finance approves and the payout is refused
    with django_capture_on_commit_callbacks(execute=True):
        approve(request, shop["finance"])
    # then the ledger and the request recorded the refusal; nothing was paid
    request.refresh_from_db()
    assert request.status == ApprovalRequest.Status.PAYMENT_FAILED and "card_declined" in request.verification["detail"]
    assert RefundEntry.objects.get(order=shop["order"]).status == "failed" and not fake_stripe.refunds
    # but the ticket still says approved, and the refusal waits for the sweep
    ticket.refresh_from_db()
    assert ticket.status == Ticket.Status.APPROVED
    assert followups(request) == [("refund_payment_failed", 1, False)]
    # and finance cannot file it again while the ticket is behind (asked now, it would answer
    # from the state it is about to leave): 409, nothing written
    with pytest.raises(ApprovalConflict) as refused:
        approval_request_payment_retry(request_id=request.pk, user=shop["finance"])
    assert refused.value.code == "followup_waiting"
    assert ApprovalRequest.objects.filter(order=shop["order"]).count() == 1

    # when the sweep runs after the backoff
    with at(timezone.now() + timedelta(seconds=61)):
        assert outbox_sweep()["approval_followups"] == 1
    # then the ticket is back with finance with the provider's reason
    ticket.refresh_from_db()
    assert ticket.status == Ticket.Status.PAYMENT_FAILED and "card_declined" in ticket.stop_detail
    assert spans(ticket)[-1] == ("ledger", "payment_failed")
    assert fault.calls == 2
    # and finance files it again as before; once approved, it is paid once and the ticket refunded
    again = approval_request_payment_retry(request_id=request.pk, user=shop["finance"])
    ticket.refresh_from_db()
    assert ticket.status == Ticket.Status.APPROVAL_REQUIRED
    with django_capture_on_commit_callbacks(execute=True):
        approve(again, shop["finance"])
    ticket.refresh_from_db()
    assert ticket.status == Ticket.Status.REFUNDED and len(fake_stripe.refunds) == 1


def test_the_changes_requested_follow_up_fails_once_and_the_sweep_runs_the_agent_again(
    user, monkeypatch, django_capture_on_commit_callbacks
):
    # given a ticket waiting for finance, and its follow-up of "request changes" failing once
    ticket, request = ticket_with_request(user)
    fault = Fault(monkeypatch, "approval_changes_requested")
    # when finance asks for changes
    with django_capture_on_commit_callbacks(execute=True) as callbacks:
        decide(user, request, decision="request_changes", note="only the headphones", wanted_amount="50.00")
    # then the decision stands, the ticket stayed where it was, and no agent run was enqueued
    request.refresh_from_db()
    assert request.status == ApprovalRequest.Status.CHANGES_REQUESTED
    ticket.refresh_from_db()
    assert ticket.status == Ticket.Status.APPROVAL_REQUIRED and callbacks == []
    # when the sweep delivers it (its agent run is enqueued when the delivery commits)
    with django_capture_on_commit_callbacks(execute=True), at(timezone.now() + timedelta(seconds=61)):
        assert outbox_sweep()["approval_followups"] == 1
    # then the agent ran again with the amount finance wants, and made a new request
    ticket.refresh_from_db()
    assert fault.calls == 2
    assert ticket.requested_amount == 50
    assert ("approval", "request_changes") in spans(ticket)
    assert ticket.status == Ticket.Status.APPROVAL_REQUIRED
    newest = ApprovalRequest.objects.filter(ticket_ref=ticket.pk).order_by("-id").first()
    assert newest.pk != request.pk and newest.amount == 50


def test_a_follow_up_that_keeps_failing_stays_visible_and_is_tried_once_per_backoff(
    user, monkeypatch, django_capture_on_commit_callbacks, settings
):
    # given the ticket's follow-up of the verdict failing every time (a bug in it)
    settings.APPROVAL_FOLLOWUP_RETRY_SECONDS = 60
    settings.APPROVAL_FOLLOWUP_RETRY_MAX_SECONDS = 3600
    ticket, request = ticket_with_request(user)
    fault = Fault(monkeypatch, "refund_verified", times=10**6)
    with django_capture_on_commit_callbacks(execute=True):
        decide(user, request)
    with django_capture_on_commit_callbacks(execute=True):
        manual_payout_record(request)  # the manual gateway: finance paid by hand
    start = timezone.now()
    # when beat sweeps every minute for six hours
    tried_at = []
    for minute in range(1, 6 * 60 + 1):
        with at(start + timedelta(minutes=minute)):
            before = fault.calls
            outbox_sweep()
            if fault.calls != before:
                tried_at.append(minute)
    # then it was tried once per backoff (1, 2, 4, ... minutes, at most an hour apart), no more
    kept = ApprovalFollowUp.objects.get(request=request, receiver="refundagent.ticket_follow")
    gaps = [later - earlier for earlier, later in pairwise([0, *tried_at])]
    assert gaps[:7] == [1, 2, 4, 8, 16, 32, 60] and set(gaps[7:]) == {60}
    assert kept.attempts == fault.calls == len(tried_at) + 1 and kept.attempts <= 12
    assert kept.delivered_at is None and "refund_verified follow-up broke" in kept.last_error
    # and the money and the decision stand, the ticket is still behind
    request.refresh_from_db()
    ticket.refresh_from_db()
    assert request.status == ApprovalRequest.Status.EXECUTED and ticket.status == Ticket.Status.APPROVED
    assert RefundEntry.objects.get(idempotency_key=request.idempotency_key).status == "succeeded"

    # and health fails, naming the check; the numbers are for staff only
    with at(start + timedelta(hours=6)):
        status, body = health(signed_in(user("ops")))
        anonymous_status, anonymous = health(Client())
    assert status == anonymous_status == 503
    assert body["ticket_followups"].startswith("error: an approval event has waited 21")
    assert anonymous["ticket_followups"] == body["ticket_followups"] and anonymous["details"] == {}
    assert body["details"]["ticket_followups"] == {
        "count": 1,
        "failing": 1,
        "most_attempts": kept.attempts,
        "oldest_age_seconds": body["details"]["ticket_followups"]["oldest_age_seconds"],
        "threshold_seconds": 300,
    }
    # and the operator dashboard lists it with its ticket, attempts and error
    page = signed_in(user("ops")).get("/evals/operations/").content.decode()
    assert f'data-followup="{kept.pk}"' in page and f"#{ticket.pk}</a>" in page
    assert "refund_verified" in page and "refund_verified follow-up broke" in page

    # when the bug is fixed, the next attempt (within the hour) delivers it
    fault.times = 0
    with at(start + timedelta(hours=7, minutes=1)):
        assert outbox_sweep()["approval_followups"] == 1
        status, body = health(signed_in(user("ops")))
    ticket.refresh_from_db()
    assert ticket.status == Ticket.Status.REFUNDED
    assert status == 200 and body["ticket_followups"] == "ok"
    assert "Every ticket has taken every event" in signed_in(user("ops")).get("/evals/operations/").content.decode()


def test_a_kept_event_waits_only_for_its_own_ticket(user, monkeypatch, django_capture_on_commit_callbacks):
    # given one ticket whose approval follow-up failed
    first, first_request = ticket_with_request(user, order="ORD-5001")
    fault = Fault(monkeypatch, "approval_approved")
    with django_capture_on_commit_callbacks(execute=True):
        decide(user, first_request)
    assert fault.calls == 1
    # when another ticket's refund is approved meanwhile
    second, second_request = ticket_with_request(user, order="ORD-5003")
    with django_capture_on_commit_callbacks(execute=True):
        decide(user, second_request)
    for request in (first_request, second_request):  # the manual gateway: finance paid both by hand
        with django_capture_on_commit_callbacks(execute=True):
            manual_payout_record(request)
    # then that ticket follows at once; only the first waits
    second.refresh_from_db()
    first.refresh_from_db()
    assert second.status == Ticket.Status.REFUNDED and followups(second) == []
    # (its approval, execution, the execution after the payout was recorded, and the verdict)
    assert first.status == Ticket.Status.APPROVAL_REQUIRED and len(followups(first)) == 4
