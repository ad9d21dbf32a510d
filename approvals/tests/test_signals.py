"""One signal per approval event, and listeners that cannot undo what they hear about."""

import pytest

from approvals import signals
from approvals.services.decisions import approval_request_decide
from approvals.services.execution import approval_execute
from ledger.models import RefundEntry
from tests.factories import manual_payout_record

pytestmark = pytest.mark.django_db


class Heard:
    """Connects to every approval event and records which were sent, in order."""

    EVENTS = (
        "approval_vote_recorded",
        "approval_approved",
        "approval_denied",
        "approval_changes_requested",
        "approval_escalated",
        "approval_expired",
        "approval_invalidated",
        "approval_replaced",
        "refund_executed",
        "refund_verified",
    )

    def __init__(self):
        self.events = []
        self.receivers = {}

    def __enter__(self):
        for name in self.EVENTS:

            def hear(sender, request, name=name, **kwargs):
                self.events.append((name, request.pk))

            self.receivers[name] = hear
            getattr(signals, name).connect(hear)
        return self

    def __exit__(self, *exc):
        for name, hear in self.receivers.items():
            getattr(signals, name).disconnect(hear)


def decide(user, request, decision, username="acme-finance", **extra):
    return approval_request_decide(
        request_id=request.pk, user=user(username), decision=decision, args_hash=request.args_hash, **extra
    )


@pytest.mark.parametrize(
    "decision, event",
    [
        ("deny", "approval_denied"),
        ("escalate", "approval_escalated"),
        ("request_changes", "approval_changes_requested"),
        ("approve", "approval_approved"),
    ],
)
def test_each_decision_sends_its_own_event(
    approval_request_make, user, decision, event, django_capture_on_commit_callbacks
):
    # given a pending request
    request = approval_request_make(order="ORD-5001")
    # when finance decides it
    with Heard() as heard, django_capture_on_commit_callbacks():
        decide(user, request, decision, note="because")
    # then exactly that decision's event was sent, carrying the request
    assert heard.events == [(event, request.pk)]


def test_a_listener_that_raises_on_execution_does_not_undo_the_ledger_write(
    approval_request_make, user, django_capture_on_commit_callbacks
):
    # given an approved request and a listener of refund_executed that raises
    request = approval_request_make(order="ORD-5001")
    with django_capture_on_commit_callbacks():
        decide(user, request, "approve")

    def broken_listener(sender, request, **kwargs):
        raise RuntimeError("a bug in a listener")

    signals.refund_executed.connect(broken_listener)
    try:
        # when the request is executed
        with Heard() as heard:
            approval_execute(request_id=request.pk)
            manual_payout_record(request)  # the manual gateway: finance paid by hand; executed again
    finally:
        signals.refund_executed.disconnect(broken_listener)
    # then the refund is written once and recorded on the request, and verified
    request.refresh_from_db()
    entry = RefundEntry.objects.get(idempotency_key=request.idempotency_key)
    assert request.status == "executed" and request.ledger_entry == entry
    assert heard.events == [
        ("refund_executed", request.pk),
        ("refund_executed", request.pk),  # the replay after the payout was recorded
        ("refund_verified", request.pk),
    ]


def test_a_disconnected_listener_is_no_longer_called(approval_request_make, user):
    # given a listener connected, then disconnected
    request = approval_request_make(order="ORD-5001")
    calls = []

    def listener(sender, request, **kwargs):
        calls.append(request.pk)

    signals.approval_denied.connect(listener)
    signals.approval_denied.disconnect(listener)
    # when a request is denied, then it is not called
    decide(user, request, "deny", note="no")
    assert calls == []
