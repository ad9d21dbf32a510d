"""A real Celery worker killed after the ledger write, before the task was acknowledged: the
redelivered task finishes the job, and there is still one ledger entry."""

import os
from pathlib import Path

import pytest

from ledger.models import RefundEntry
from refundagent.models import Ticket
from refundagent.tests.test_receivers import decide, spans, ticket_with_request
from tests.factories import manual_payout_record_when_written
from tests.helpers import wait_for

# The fault injection lives with the tests (refundagent/tests/faults/sitecustomize.py), loaded
# into the worker through PYTHONPATH: the product has no crash hook.
FAULTS = Path(__file__).parent / "faults"
CRASH_AFTER_LEDGER_WRITE_ENV = "APPROVALS_CRASH_AFTER_LEDGER_WRITE_MARKER"


@pytest.mark.worker
@pytest.mark.django_db(transaction=True)
def test_worker_killed_after_the_ledger_write_still_one_entry(money_worker_process, user, tmp_path):
    # given a real worker whose first execution SIGKILLs its own process right after the ledger
    # write committed (before the task is acknowledged)
    marker = tmp_path / "killed-once"
    pythonpath = os.pathsep.join(p for p in (str(FAULTS), os.environ.get("PYTHONPATH", "")) if p)
    money_worker_process.start(extra_env={CRASH_AFTER_LEDGER_WRITE_ENV: str(marker), "PYTHONPATH": pythonpath})
    ticket, request = ticket_with_request(user)
    # when finance approves (the execution task goes to Redis on commit)
    decide(user, request)
    # and finance records the payout made by hand (the manual gateway) once the refund is written
    assert manual_payout_record_when_written(request) is not None
    # then the first attempt died after writing, the task was redelivered and finished
    refunded = wait_for(lambda: Ticket.objects.get(pk=ticket.pk).status == Ticket.Status.REFUNDED)
    assert marker.exists(), "the worker was never killed after the ledger write"
    assert refunded, f"ticket is {Ticket.objects.get(pk=ticket.pk).status}: {spans(ticket)}"
    # and there is exactly one ledger entry, which the redelivery replayed by its key
    assert RefundEntry.objects.filter(order=ticket.order, source="approval").count() == 1
    entry = RefundEntry.objects.get(idempotency_key=request.idempotency_key)
    request.refresh_from_db()
    assert request.status == "executed" and request.ledger_entry_id == entry.pk
    # (the redelivery found the entry written and waiting for the payout: nothing to trace; the
    # execution the recorded payout set off replayed it by its key)
    assert spans(ticket) == [
        ("approval", "approve"),
        ("ledger", "refund_issued"),
        ("ledger", "payout_recorded"),
        ("verify", "verified"),
    ]


@pytest.mark.worker
@pytest.mark.django_db(transaction=True)
def test_worker_executes_and_verifies(celery_worker_process, user):
    celery_worker_process.start()
    ticket, request = ticket_with_request(user, order="ORD-5003")
    decide(user, request)
    assert manual_payout_record_when_written(request) is not None  # the manual gateway: paid by hand
    assert wait_for(lambda: Ticket.objects.get(pk=ticket.pk).status == Ticket.Status.REFUNDED)
    assert RefundEntry.objects.filter(idempotency_key=request.idempotency_key).count() == 1
