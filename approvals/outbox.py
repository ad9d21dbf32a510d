"""The approvals layer's outbox: an `approved` request is its own execution instruction.

The decision writes `status=approved` in its transaction, so the instruction commits with the
decision or not at all. Handing it to Celery after commit (`approval_execution_publish`) is an
optimisation: when the broker is down the publish fails, is logged and recorded on the row, and
the decision still answers 200. The periodic sweep (`approval_executions_sweep`) enqueues again
every approved request whose decision or last hand-off is older than the grace period, so a lost
message, a broker outage or a killed worker delays the refund by minutes and never loses it.
Executing twice is safe: the ledger and the provider are keyed by the request's idempotency key.
"""

import logging
from datetime import timedelta

from django.db import transaction
from django.db.models import F, Q
from django.db.models.functions import Coalesce
from django.utils import timezone

from ledger.outbox import outbox_publish, publish_on_commit

from .models import ApprovalRequest, PolicyReplay
from .replay import DEFAULT_DAYS, policy_replay_create
from .tasks import approval_execute_task, approval_settle_task, policy_replay_task

logger = logging.getLogger(__name__)


def approval_execution_publish(*, request_id: int) -> bool:
    """Enqueue the execution of one approved request; True if the broker took it. Never raises:
    the instruction is already committed and the sweep re-sends what this could not."""
    return _approval_publish(approval_execute_task, request_id=request_id, what="its execution")


def approval_settlement_publish(*, request_id: int) -> bool:
    """Enqueue the settlement of an approved request whose payout succeeded since it was written
    (approvals.tasks.approval_settle_task). Never raises: the request is still `approved`, so should
    this fail the sweep enqueues its execution again, which settles it the same way."""
    return _approval_publish(approval_settle_task, request_id=request_id, what="its settlement")


def _approval_publish(task, *, request_id: int, what: str) -> bool:
    # The hand-off is recorded on the row either way: the sweep's grace counts from it.
    now = timezone.now()
    return outbox_publish(
        lambda: task.delay(request_id),
        what=f"approval {request_id}: {what}",
        extra={"approval": request_id},
        handed_over=lambda: ApprovalRequest.objects.filter(pk=request_id).update(
            dispatched_at=now, dispatch_attempts=F("dispatch_attempts") + 1, dispatch_error=""
        ),
        not_handed_over=lambda exc: ApprovalRequest.objects.filter(pk=request_id).update(
            dispatch_attempts=F("dispatch_attempts") + 1, dispatch_error=f"{type(exc).__name__}: {exc}"[:2000]
        ),
    )


def approval_executions_due(*, older_than: timedelta):
    """Approved requests (not yet executed and verified) whose decision and last hand-off are
    both older than `older_than`: the instructions nobody picked up (or whose worker died)."""
    cutoff = timezone.now() - older_than
    return (
        ApprovalRequest.objects.filter(status=ApprovalRequest.Status.APPROVED)
        # Written and waiting for a person to pay it by hand: nothing for a worker to do.
        .exclude(ledger_entry__gateway="manual", ledger_entry__status="pending")
        .annotate(last_handoff=Coalesce("dispatched_at", "decided_at", "updated_at"))
        .filter(Q(last_handoff__lte=cutoff))
        .order_by("decided_at", "id")
    )


def approval_executions_sweep(*, older_than: timedelta, limit: int = 500) -> int:
    """Enqueue again the executions not picked up within `older_than`. Returns how many were
    enqueued (a publish that fails again is logged and left for the next sweep)."""
    sent = 0
    for request_id in approval_executions_due(older_than=older_than).values_list("pk", flat=True)[:limit]:
        logger.warning(
            "approval %s: execution not done within the grace period; enqueued again",
            request_id,
            extra={"approval": request_id},
        )
        sent += approval_execution_publish(request_id=request_id)
    return sent


def policy_replay_start(*, tenant, draft_version: str, days: int = DEFAULT_DAYS, user=None) -> PolicyReplay:
    """A replay queued on Celery once committed (the admin's action; its page shows the progress).
    Should the broker lose it, the replay stays `queued` and is started again from the admin."""
    with transaction.atomic():
        replay = policy_replay_create(tenant=tenant, draft_version=draft_version, days=days, user=user)
        publish_on_commit(policy_replay_task.delay, replay_id=replay.pk)
    return replay
