"""Celery tasks of the agent app. Thin: they take ids and call one service."""

from celery import shared_task
from django.db import InterfaceError, OperationalError

from .agent.loop import agent_run_ticket
from .agent.shadow import model_replay_run
from .emails import ticket_reply_deliver, ticket_reply_hand_over


@shared_task(
    bind=True,
    acks_late=True,
    reject_on_worker_lost=True,
    ignore_result=True,
    # A lost database connection (a restart, a failover) is retried at once and then with a
    # short backoff, so the run resumes within seconds of the database's return instead of
    # waiting for its lease: the retry keeps the task id, which is how the loop takes its own
    # run back at once (agent_run_claim). Every write of the loop is a compare-and-set on the
    # claim, so a step cut off mid-way is redone, never done twice.
    autoretry_for=(OperationalError, InterfaceError),
    retry_backoff=1,
    retry_backoff_max=10,
    retry_jitter=True,
    max_retries=60,
)
def agent_run_ticket_task(self, ticket_id: int) -> None:
    """Run the agent on a ticket. A redelivered message carries the same task id, which is how
    the loop recognises its own run and resumes it (see agent.loop.agent_run_claim)."""
    agent_run_ticket(ticket_id=ticket_id, task_id=self.request.id)


@shared_task(acks_late=True, reject_on_worker_lost=True, ignore_result=True)
def model_replay_task(replay_id: int) -> None:
    # Writes only its own row; a redelivered replay runs again (a finished one is left as it is).
    model_replay_run(replay_id=replay_id)


@shared_task(acks_late=True, reject_on_worker_lost=True, ignore_result=True)
def ticket_reply_deliver_task(reply_id: int) -> None:
    """Deliver one customer reply (refundagent.emails). Safe to run twice: the row is claimed
    by compare-and-set, and the sweep re-sends what a dead worker left."""
    ticket_reply_deliver(reply_id=reply_id, deliver_later=_ticket_reply_deliver_later)


def _ticket_reply_deliver_later(reply_id: int, countdown: int) -> bool:
    """A failed attempt's retry: this task again, after the backoff."""
    return ticket_reply_hand_over(
        reply_id=reply_id, enqueue=lambda: ticket_reply_deliver_task.apply_async((reply_id,), countdown=countdown)
    )
