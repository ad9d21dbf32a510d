"""Celery tasks of the approvals layer. Thin: they take ids and call one service.

Nothing in approvals.services.execution or approvals.services.requests imports this module: the outbox that
enqueues the execution (approvals.outbox) does, so there is no import cycle.
"""

from celery import shared_task
from django.db import OperationalError

from ledger.exceptions import PaymentProviderUnavailable
from ledger.telemetry import bind, ticket_trace_span

from .models import ApprovalRequest
from .replay import policy_replay_run
from .services.execution import approval_execute
from .services.requests import approval_requests_expire

# The tasks that may pay. A provider that cannot be reached (after the SDK's own retries) and a
# database hiccup are transient: retry with backoff. The same idempotency key makes the same
# refund; once the retries are spent the request stays approved and the outbox sweep enqueues its
# execution again. Redelivery is safe: the ledger write is keyed by the request's idempotency key.
PAYING = {
    "acks_late": True,
    "reject_on_worker_lost": True,
    "ignore_result": True,
    "autoretry_for": (OperationalError, PaymentProviderUnavailable),
    "retry_backoff": 5,
    "retry_backoff_max": 300,
    "retry_jitter": True,
    "max_retries": 8,
}


@shared_task(**PAYING)
def approval_execute_task(request_id: int) -> None:
    _approval_execute_in_trace(request_id=request_id, span="refund.approval.execution")


@shared_task(**PAYING)
def approval_settle_task(request_id: int) -> None:
    """A payout written `pending` succeeded since (a webhook, the reconciliation, a person's record
    of a payment by hand: approvals.ledger_events). Settling is the execution run again, which is
    more than the verification: its replay announces the entries (the ticket's trace records each
    payout made by hand and who recorded it), it pays a leg still pending under its own key, and
    it verifies once every leg succeeded."""
    _approval_execute_in_trace(request_id=request_id, span="refund.approval.settlement")


def _approval_execute_in_trace(*, request_id: int, span: str) -> None:
    # The execution and the ledger write join the ticket's trace (docs/operations.md), and the
    # log lines of the execution (the ledger's payout result too) carry the ticket.
    tenant, ticket, trace_id = ApprovalRequest.objects.filter(pk=request_id).values_list(
        "tenant_id", "ticket_ref", "trace_id"
    ).first() or (None, None, None)
    with (
        bind(tenant=tenant, ticket=ticket, ticket_trace_id=(trace_id or "").replace("-", "")),
        ticket_trace_span(span, trace_id, attributes={"refund.approval.id": request_id}),
    ):
        approval_execute(request_id=request_id)


@shared_task(ignore_result=True)
def approval_requests_expire_task() -> int:
    return approval_requests_expire()


@shared_task(acks_late=True, reject_on_worker_lost=True, ignore_result=True)
def policy_replay_task(replay_id: int) -> None:
    # Reads only and writes its own row: a redelivered replay simply runs again (a finished one
    # is returned as it is).
    policy_replay_run(replay_id=replay_id)
