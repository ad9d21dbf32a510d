"""The periodic outbox sweep: one service per job, one thin task (`outbox_sweep_task` below,
registered with django-celery-beat by migration 0006, every minute by default, editable in the
admin; the app's ready() imports this module so every worker knows the task). This is the top layer, so it runs the jobs of every layer:

- approvals: approved requests not executed within the grace (approvals.outbox), and approval
  events a receiver failed to take (the ticket did not follow them), delivered again once their
  backoff is over (approvals.followups);
- agent: queued tickets not picked up within the grace, runs whose lease expired, and tickets
  failed on a provider outage (run again after a wait, a few times);
- ledger: pending payouts polled at the provider, unprocessed webhook events (ledger.sweep);
- replies: customer emails not delivered within the grace, or whose worker died
  (refundagent.emails, refundagent.outbox);
- Zendesk: tickets its webhook stored and no worker filed, notes owed to it (refundagent.zendesk).

Each job is idempotent (every side effect is keyed), so a sweep that overlaps a slow worker
only costs a duplicate message.
"""

import logging
from datetime import timedelta

from celery import shared_task
from django.conf import settings
from django.db.models import Count, OuterRef, Q, Subquery
from django.db.models.functions import Coalesce
from django.utils import timezone

from approvals.followups import approval_followups_deliver
from approvals.outbox import approval_executions_sweep
from ledger.sweep import refund_entries_poll, webhook_events_republish

from .emails import reply_lease
from .models import AgentRun, Ticket, TicketReply
from .outbox import ticket_reply_publish, ticket_run_publish
from .services import ticket_rerun
from .zendesk.inbound import zendesk_inbound_sweep
from .zendesk.writeback import zendesk_writes_sweep

logger = logging.getLogger(__name__)


def sweep_grace() -> timedelta:
    return timedelta(seconds=settings.SWEEP_GRACE_SECONDS)


def tickets_queued_sweep(*, older_than: timedelta, limit: int = 500) -> int:
    """Enqueue again queued tickets whose last hand-off (or the step that queued them) is older
    than `older_than`. Returns how many were enqueued."""
    cutoff = timezone.now() - older_than
    due = (
        Ticket.objects.filter(status=Ticket.Status.QUEUED, updated_at__lte=cutoff)
        .annotate(last_handoff=Coalesce("run_dispatched_at", "updated_at"))
        .filter(Q(last_handoff__lte=cutoff))
        .order_by("updated_at", "id")
        .values_list("pk", flat=True)[:limit]
    )
    sent = 0
    for ticket_id in due:
        logger.warning(
            "ticket %s: queued and not picked up within the grace period; enqueued again",
            ticket_id,
            extra={"ticket": ticket_id},
        )
        sent += ticket_run_publish(ticket_id=ticket_id)
    return sent


def agent_runs_lease_expired_sweep(*, limit: int = 500) -> int:
    """Enqueue again the tickets whose run's lease expired (its worker died): the new task
    takes the run over (agent_run_claim) and resumes it. Returns how many were enqueued."""
    now = timezone.now()
    cutoff = now - sweep_grace()
    due = (
        AgentRun.objects.filter(
            status=AgentRun.Status.RUNNING, ticket__status=Ticket.Status.RUNNING, lease_expires_at__lt=now
        )
        .filter(Q(ticket__run_dispatched_at=None) | Q(ticket__run_dispatched_at__lte=cutoff))
        .order_by("lease_expires_at")
        .values_list("ticket_id", flat=True)[:limit]
    )
    sent = 0
    for ticket_id in due:
        logger.warning(
            "ticket %s: its run's lease expired; enqueued again to take it over", ticket_id, extra={"ticket": ticket_id}
        )
        sent += ticket_run_publish(ticket_id=ticket_id)
    return sent


def tickets_provider_outage_rerun(*, limit: int = 100) -> int:
    """Queue again the failed tickets whose last run stopped on a provider outage, once
    AGENT_PROVIDER_RERUN_SECONDS passed, at most AGENT_PROVIDER_RERUNS times per ticket (after
    that a person decides). Returns how many were queued."""
    cutoff = timezone.now() - timedelta(seconds=settings.AGENT_PROVIDER_RERUN_SECONDS)
    last_run = AgentRun.objects.filter(ticket=OuterRef("pk")).order_by("-created_at", "-id")
    due = (
        Ticket.objects.filter(status=Ticket.Status.FAILED, updated_at__lte=cutoff)
        .annotate(
            outage=Subquery(last_run.values("state__provider_outage")[:1]),
            run_count=Count("runs"),
        )
        .filter(outage=True, run_count__lte=settings.AGENT_PROVIDER_RERUNS)
        .order_by("updated_at", "id")[:limit]
    )
    queued = 0
    for ticket in due:
        queued += ticket_rerun(
            ticket=ticket, why=f"Run again by the sweep after a provider outage (run {ticket.run_count + 1})."
        )
    return queued


def outbox_sweep() -> dict[str, int]:
    """Every sweep job once, with SWEEP_GRACE_SECONDS as the grace; what each one did."""
    grace = sweep_grace()
    done = {
        "approval_executions": approval_executions_sweep(older_than=grace),
        "approval_followups": approval_followups_deliver(),
        "tickets_queued": tickets_queued_sweep(older_than=grace),
        "agent_runs_lease_expired": agent_runs_lease_expired_sweep(),
        "tickets_provider_outage": tickets_provider_outage_rerun(),
        "payouts_polled": refund_entries_poll(older_than=grace),
        "webhook_events": webhook_events_republish(older_than=grace),
        "ticket_replies": ticket_replies_sweep(older_than=grace),
        "zendesk_inbound": zendesk_inbound_sweep(older_than=grace),
        "zendesk_writes": zendesk_writes_sweep(older_than=grace),
    }
    if any(done.values()):
        logger.info("outbox sweep: %s", done)
    return done


@shared_task(ignore_result=True)
def outbox_sweep_task() -> dict[str, int]:
    return outbox_sweep()


def ticket_replies_sweep(*, older_than: timedelta, limit: int = 200) -> int:
    """Hand to a worker again the replies a lost message or a dead worker left behind: queued or
    retrying and due, last handed over more than `older_than` ago; or `sending` past the lease."""
    now = timezone.now()
    cutoff = now - older_than
    due = (
        TicketReply.objects.filter(
            Q(
                status__in=(TicketReply.Status.QUEUED, TicketReply.Status.RETRYING),
                next_attempt_at__lte=now,
                created_at__lte=cutoff,
            )
            & (Q(dispatched_at=None) | Q(dispatched_at__lte=cutoff))
            | Q(status=TicketReply.Status.SENDING, claimed_at__lte=now - reply_lease())
        )
        .order_by("next_attempt_at", "id")
        .values_list("pk", flat=True)[:limit]
    )
    sent = 0
    for reply_id in due:
        logger.warning("reply %s: not delivered within the grace period; handed to a worker again", reply_id)
        sent += ticket_reply_publish(reply_id=reply_id)
    return sent
