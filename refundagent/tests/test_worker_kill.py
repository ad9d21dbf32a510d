"""A real Celery worker on Redis + PostgreSQL, SIGKILLed in the middle of a run, then restarted:
the redelivered task (same id) resumes the run and the ticket stops exactly once."""

import time

import pytest

from approvals.models import ApprovalRequest
from ledger.models import RefundEntry
from refundagent.models import AgentRun, RefundDraft, Ticket, TraceEvent
from tests.helpers import wait_for

# The offline planner pauses a second before each turn (a slow model), and unacknowledged
# messages become visible again 3 s after delivery, so the restarted worker picks the killed
# one's message up at once.
WORKER_ENV = {
    "AGENT_PROVIDER": "offline",
    "AGENT_OFFLINE_THINK_SECONDS": "1.0",
    "CELERY_VISIBILITY_TIMEOUT": "3",
    "AGENT_LEASE_SECONDS": "2",
}


@pytest.mark.worker
def test_a_worker_killed_mid_run_resumes_and_the_ticket_stops_exactly_once(celery_worker_process):
    from django.contrib.auth import get_user_model

    from refundagent.demo import demo_seed
    from refundagent.services import ticket_create

    demo_seed()
    worker = celery_worker_process.start(timeout=90, extra_env=WORKER_ENV)

    # given a ticket whose run is under way on the worker
    ticket = ticket_create(
        user=get_user_model().objects.get(username="acme-support"),
        order="ORD-5001",
        customer="CUST-1001",
        message="Broken headphones, refund $200.",
        requested_amount="200.00",
    )
    wait_for(lambda: AgentRun.objects.filter(ticket=ticket, iterations__gte=2).exists(), 60, "two persisted steps")

    # when the worker is killed mid-run
    worker.kill()
    ticket.refresh_from_db()
    assert ticket.status == Ticket.Status.RUNNING
    killed_run = AgentRun.objects.get(ticket=ticket)
    assert killed_run.status == AgentRun.Status.RUNNING and killed_run.iterations < 4

    # and a worker is started again
    time.sleep(3.5)
    celery_worker_process.start(timeout=90, extra_env=WORKER_ENV)

    # then the redelivered task resumes the same run and the ticket stops exactly once
    wait_for(
        lambda: Ticket.objects.filter(pk=ticket.pk).exclude(status__in=["queued", "running"]).exists(),
        180,
        "the ticket to stop",
    )
    ticket.refresh_from_db()
    assert ticket.status == Ticket.Status.APPROVAL_REQUIRED
    run = AgentRun.objects.get(ticket=ticket)
    assert run.claimed_by == killed_run.claimed_by  # the same Celery task id, redelivered
    assert run.status == AgentRun.Status.STOPPED and run.iterations == 4
    assert RefundDraft.objects.filter(ticket=ticket).count() == 1
    approvals = ApprovalRequest.objects.filter(ticket_ref=ticket.pk)
    assert approvals.count() == 1 and str(approvals.get().amount) == "120.00"
    assert not RefundEntry.objects.filter(order=ticket.order).exists()
    runs = list(TraceEvent.objects.filter(ticket=ticket, span="run").values_list("decision", flat=True))
    assert runs == ["filed", "claimed", "resumed"]
    assert TraceEvent.objects.filter(ticket=ticket, span="stop").count() == 1
    # the steps persisted before the kill were not done again
    lookups = TraceEvent.objects.filter(ticket=ticket, span="tool", tool="orders.lookup_order").count()
    assert lookups == 1
