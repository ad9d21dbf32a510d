"""The agent layer's outbox: a `queued` ticket is its own agent-run instruction.

`ticket_create` writes the ticket `queued` in its transaction, and "request changes" moves it
back to `queued` in the decision's transaction, so the instruction commits with the step. The
publish to Celery after commit (`ticket_run_publish`) is an optimisation: if the broker is down
it is logged and the request still succeeds (201); the sweep (refundagent.sweep) enqueues again
queued tickets not picked up within the grace period, and running tickets whose run's lease
expired. Running twice is safe: the loop claims a ticket by compare-and-set (agent_run_claim).

A customer reply's row is its own delivery instruction the same way: support's Send writes it,
`ticket_reply_publish` hands it to a worker after commit, and the sweep hands over again what
was lost.
"""

import logging

from django.db import transaction
from django.utils import timezone

from ledger.outbox import outbox_publish, publish_on_commit

from .agent.shadow import model_replay_create
from .emails import ticket_reply_hand_over
from .models import ModelReplay, Ticket
from .tasks import agent_run_ticket_task, model_replay_task, ticket_reply_deliver_task

logger = logging.getLogger(__name__)


def ticket_run_publish(*, ticket_id: int, mark_dispatched: bool = True) -> bool:
    """Enqueue the agent run of a ticket; True if the broker took it. Never raises.

    `run_dispatched_at` keeps the sweep from sending a ticket again within the grace period.
    The first hand-off, right after the step that queued the ticket committed, needs no mark
    (`mark_dispatched=False`): that step's `updated_at` is just as recent, and the sweep counts
    from the later of the two. Only the sweep's re-sends write the mark, which saves every
    ticket one UPDATE."""
    now = timezone.now()
    return outbox_publish(
        lambda: agent_run_ticket_task.delay(ticket_id),
        what=f"ticket {ticket_id}: its agent run",
        extra={"ticket": ticket_id},
        handed_over=(lambda: Ticket.objects.filter(pk=ticket_id).update(run_dispatched_at=now))
        if mark_dispatched
        else None,
    )


def ticket_reply_publish(*, reply_id: int) -> bool:
    """Hand one customer reply to a worker; True if the broker took it. Never raises."""
    return ticket_reply_hand_over(reply_id=reply_id, enqueue=lambda: ticket_reply_deliver_task.delay(reply_id))


def model_replay_start(*, tenant, provider: str, model: str = "", days: int = 30, limit=None, user=None) -> ModelReplay:
    """A model replay queued on Celery once committed (the admin's form; its page shows the progress)."""
    with transaction.atomic():
        replay = model_replay_create(tenant=tenant, provider=provider, model=model, days=days, limit=limit, user=user)
        publish_on_commit(model_replay_task.delay, replay_id=replay.pk)
    return replay
