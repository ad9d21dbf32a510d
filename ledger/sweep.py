"""The ledger's sweep jobs (run by the periodic outbox sweep, refundagent.sweep):

- `refund_entries_poll`: a refund the provider answered `pending` (Stripe's bank refunds) stays
  pending until a webhook says more; if the webhook is lost, this asks the provider for its
  record of each pending entry that has a provider_ref and records the answer, as a webhook
  would. Entries without a provider_ref (the create's answer never arrived) are re-paid by the
  layer that made them (the approval's execution, with the same key and metadata), not here.
- `webhook_events_republish`: stored webhook events never processed are enqueued again.
"""

import logging
from datetime import timedelta
from functools import partial

from .exceptions import DomainError, PaymentProviderUnavailable
from .models import RefundEntryEvent
from .outbox import outbox_publish
from .payouts import refund_entries_pending, refund_entry_provider_record
from .services import ledger_refund_record_outcome
from .tasks import webhook_event_process_task
from .webhooks import webhook_events_unprocessed

logger = logging.getLogger(__name__)


def refund_entries_poll(*, older_than: timedelta, limit: int = 200) -> int:
    """Ask the provider about pending entries it already knows; returns how many changed."""
    changed = 0
    for entry in refund_entries_pending(older_than=older_than).exclude(provider_ref="")[:limit]:
        try:
            record = refund_entry_provider_record(entry_id=entry.pk)
        except PaymentProviderUnavailable as exc:
            logger.warning("polling refund #%s: the provider is unavailable (%s)", entry.pk, exc)
            break  # the next sweep asks again
        if record is None or record.status == entry.status:
            continue
        try:
            after = ledger_refund_record_outcome(
                entry_id=entry.pk,
                status=record.status,
                provider_ref=record.provider_ref,
                reason=record.reason,
                source=RefundEntryEvent.Source.GATEWAY,
            )
        except DomainError as exc:
            logger.error("polling refund #%s: %s", entry.pk, exc)
            continue
        changed += after.status != entry.status
    return changed


def webhook_events_republish(*, older_than: timedelta, limit: int = 500) -> int:
    """Enqueue again the stored webhook events nobody processed; returns how many were sent."""
    sent = 0
    for event_id in webhook_events_unprocessed(older_than=older_than).values_list("pk", flat=True)[:limit]:
        if not outbox_publish(
            partial(webhook_event_process_task.delay, event_id), what=f"webhook event {event_id}: its processing"
        ):
            break  # the broker is down: the next sweep tries again
        sent += 1
    return sent
