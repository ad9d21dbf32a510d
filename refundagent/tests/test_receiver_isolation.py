"""A failing listener cannot roll back finance's decision: each receiver of an approval event
runs in its own savepoint (approvals.signals), while the ticket still moves in the same
transaction as the decision when its receiver works. The failed listener's event is kept for
it (approvals.followups)."""

import logging

import pytest

from approvals.models import ApprovalFollowUp
from approvals.signals import approval_approved
from refundagent.models import Ticket
from refundagent.tests.test_receivers import decide, spans, ticket_with_request
from refundagent.tracing import trace_record

pytestmark = pytest.mark.django_db


def test_a_receiver_that_raises_does_not_undo_the_approval(user, django_capture_on_commit_callbacks, caplog):
    # given a ticket waiting for finance, and a listener of approvals that writes, then raises
    ticket, request = ticket_with_request(user)

    def broken_listener(sender, request, **kwargs):
        trace_record(ticket=ticket, span="approval", status="ok", decision="broken_listener", reason="about to fail")
        raise RuntimeError("a bug in a listener")

    approval_approved.connect(broken_listener)
    try:
        # when finance approves
        with caplog.at_level(logging.ERROR, logger="approvals.signals"):
            with django_capture_on_commit_callbacks() as callbacks:
                decide(user, request)
    finally:
        approval_approved.disconnect(broken_listener)
    # then the approval stands: approved, the vote recorded, the execution enqueued on commit
    request.refresh_from_db()
    assert request.status == "approved"
    assert list(request.votes.values_list("decision", flat=True)) == ["approve"]
    assert len(callbacks) == 1
    # and the product's receiver still moved the ticket and traced the approval
    ticket.refresh_from_db()
    assert ticket.status == Ticket.Status.APPROVED
    assert spans(ticket) == [("approval", "approve")]
    # and only the broken listener's own write was rolled back, and its error logged
    assert "broken_listener" in caplog.text and "a bug in a listener" in caplog.text
    # and its event is kept for it (the sweep delivers it again), not dropped
    [kept] = ApprovalFollowUp.objects.filter(request=request)
    assert (kept.event, kept.attempts, kept.delivered_at) == ("approval_approved", 1, None)
    assert kept.receiver.endswith("broken_listener") and "a bug in a listener" in kept.last_error
