"""A real Celery worker whose ticket follow-up of the evaluator's verdict fails once, after the
money moved: the verdict is kept with the execution, and the sweep task, run by the worker as beat
would have it, makes the ticket refunded without a person."""

import os
import time
from pathlib import Path

import pytest

from approvals.models import ApprovalFollowUp, ApprovalRequest
from ledger.models import RefundEntry
from refundagent.models import Ticket
from refundagent.sweep import outbox_sweep_task
from refundagent.tests.test_receivers import decide, spans, ticket_with_request
from tests.factories import manual_payout_record_when_written
from tests.helpers import wait_for

# The fault injection lives with the tests (refundagent/tests/faults/sitecustomize.py), loaded
# into the worker through PYTHONPATH: the product has no fault hook.
FAULTS = Path(__file__).parent / "faults"
FOLLOW_VERIFIED_FAIL_ONCE_ENV = "TICKET_FOLLOW_VERIFIED_FAIL_ONCE_MARKER"


@pytest.mark.worker
@pytest.mark.django_db(transaction=True)
def test_a_worker_whose_verified_follow_up_fails_once_refunds_the_ticket_at_the_next_sweep(
    money_worker_process, user, tmp_path
):
    # given a real worker whose first ticket follow-up of a verdict raises, and a 1 s backoff
    marker = tmp_path / "follow-up-failed-once"
    pythonpath = os.pathsep.join(p for p in (str(FAULTS), os.environ.get("PYTHONPATH", "")) if p)
    money_worker_process.start(
        extra_env={
            FOLLOW_VERIFIED_FAIL_ONCE_ENV: str(marker),
            "PYTHONPATH": pythonpath,
            "APPROVAL_FOLLOWUP_RETRY_SECONDS": "1",
        }
    )
    ticket, request = ticket_with_request(user)
    # when finance approves (the execution goes to Redis on commit; the worker runs it)
    decide(user, request)
    # and finance records the payout made by hand (the manual gateway) once the refund is written
    assert manual_payout_record_when_written(request) is not None
    # then the money moved and was verified, and the ticket's follow-up of the verdict is kept
    kept = ApprovalFollowUp.objects.filter(request=request, event="refund_verified")
    assert wait_for(kept.exists), f"nothing kept; ticket {Ticket.objects.get(pk=ticket.pk).status}"
    assert marker.exists()
    request.refresh_from_db()
    assert request.status == ApprovalRequest.Status.EXECUTED
    assert RefundEntry.objects.get(idempotency_key=request.idempotency_key).status == "succeeded"
    assert Ticket.objects.get(pk=ticket.pk).status == Ticket.Status.APPROVED
    assert kept.get().attempts == 1 and "fault injected once" in kept.get().last_error
    # when beat's sweep task reaches the worker after the backoff
    time.sleep(1.5)
    outbox_sweep_task.delay()
    # then the ticket is refunded, the trace says so once, and there is one ledger entry
    assert wait_for(lambda: Ticket.objects.get(pk=ticket.pk).status == Ticket.Status.REFUNDED), spans(ticket)
    assert spans(ticket) == [
        ("approval", "approve"),
        ("ledger", "refund_issued"),
        ("ledger", "payout_recorded"),
        ("verify", "verified"),
    ]
    assert kept.get().delivered_at is not None and kept.get().attempts == 2
    assert RefundEntry.objects.filter(order=ticket.order).count() == 1
