"""Celery tasks of the agent app. Thin: they take ids and call one service."""

from celery import shared_task

from .agent.loop import agent_run_ticket


@shared_task(bind=True, acks_late=True, reject_on_worker_lost=True, ignore_result=True)
def agent_run_ticket_task(self, ticket_id: int) -> None:
    """Run the agent on a ticket. A redelivered message carries the same task id, which is how
    the loop recognises its own run and resumes it (see agent.loop.agent_run_claim)."""
    agent_run_ticket(ticket_id=ticket_id, task_id=self.request.id)
