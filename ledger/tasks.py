"""Celery tasks of the ledger: thin, they take ids and call one service."""

import logging

from celery import shared_task

from .exceptions import PaymentProviderUnavailable
from .reconciliation import payments_reconcile
from .shopify.sync import shopify_sync, shopify_sync_all
from .webhooks import webhook_event_process

logger = logging.getLogger(__name__)


@shared_task(
    bind=True, autoretry_for=(PaymentProviderUnavailable,), retry_backoff=True, retry_backoff_max=600, max_retries=10
)
def webhook_event_process_task(self, webhook_event_id: int) -> None:
    webhook_event_process(webhook_event_id=webhook_event_id)


@shared_task(autoretry_for=(PaymentProviderUnavailable,), retry_backoff=True, retry_backoff_max=3600, max_retries=5)
def payments_reconcile_task() -> None:
    """Daily (django-celery-beat, migration 0005): every shop, the last RECONCILE_LOOKBACK_DAYS days."""
    run = payments_reconcile()
    if run.findings_count:
        logger.warning("payments reconciliation #%s: %s finding(s)", run.pk, run.findings_count)


@shared_task(autoretry_for=(PaymentProviderUnavailable,), retry_backoff=True, retry_backoff_max=900, max_retries=5)
def shopify_sync_task(connection_id: int) -> None:
    shopify_sync(connection_id=connection_id)


@shared_task
def shopify_sync_all_task() -> None:
    """Beat (migration 0014): every connected store, from its last sync, each its own task."""
    for connection_id in shopify_sync_all():
        shopify_sync_task.delay(connection_id)
