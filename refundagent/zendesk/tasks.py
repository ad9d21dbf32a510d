"""Celery tasks of the Zendesk app. Thin: ids in, one service called. Both are safe twice: the
inbound row files one ticket (unique per Zendesk ticket), a write is claimed by compare-and-set."""

from celery import shared_task

from .inbound import zendesk_inbound_process
from .writeback import zendesk_write_deliver


@shared_task(acks_late=True, reject_on_worker_lost=True, ignore_result=True)
def zendesk_inbound_process_task(inbound_id: int) -> None:
    zendesk_inbound_process(inbound_id=inbound_id)


@shared_task(acks_late=True, reject_on_worker_lost=True, ignore_result=True)
def zendesk_write_deliver_task(write_id: int) -> None:
    zendesk_write_deliver(write_id=write_id)
