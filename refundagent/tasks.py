"""Celery tasks of the agent app. Thin: they take ids and call one service."""

from celery import shared_task


@shared_task(acks_late=True, reject_on_worker_lost=True, ignore_result=True)
def agent_run_ticket_task(ticket_id: int) -> None:
    from .agent.loop import agent_run_ticket

    agent_run_ticket(ticket_id=ticket_id)
