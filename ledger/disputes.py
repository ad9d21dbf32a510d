"""Disputes: a customer's bank disputing a payment (a chargeback, or an inquiry before one).

`dispute_record` applies a dispute as the provider reports it (`charge.dispute.*` webhooks, the
reconciliation's listing) to the order it was paid for: stored once by its id, its latest status
kept. While a dispute is open the order is disputed: the policy gate escalates a refund on it
(`disputed`), and `order_dispute_changed` tells the layers above, which hold the order's refunds
waiting for a decision or a payout (approvals.receivers).
"""

import logging

from django.db import transaction

from .gateways import ProviderDispute
from .locks import order_lock
from .models import Dispute, Payment
from .signals import order_dispute_changed

logger = logging.getLogger(__name__)

# A dispute that ended stays ended: an older event arriving late never reopens it.
FINAL_STATUSES = {"won", "lost", "warning_closed"}


def _payment_for(dispute: ProviderDispute) -> Payment | None:
    """The shop's payment the dispute is about: its reference, on the account the dispute came from."""
    if not dispute.payment_refs:
        return None
    return (
        Payment.objects.select_related("order", "order__tenant")
        .filter(payment_ref__in=dispute.payment_refs, order__tenant__stripe_account=dispute.account)
        .order_by("id")
        .first()
    )


def dispute_record(*, dispute: ProviderDispute, provider: str = "stripe") -> tuple[Dispute | None, str]:
    """Record one dispute as the provider reports it. Returns (the stored dispute or None, what
    happened: created / updated / unchanged / stale / unknown_payment). Runs in the caller's
    transaction (or its own); the order row is locked first, as every ledger write does."""
    if not dispute.provider_ref:
        return None, "unknown_payment"
    payment = _payment_for(dispute)
    if payment is None:
        return None, "unknown_payment"
    with transaction.atomic():
        order = order_lock(order_id=payment.order_id)
        stored = (
            Dispute.objects.select_for_update().filter(provider=provider, provider_ref=dispute.provider_ref).first()
        )
        values = {
            "status": dispute.status[:40],
            "reason": dispute.reason[:100],
            "amount": dispute.amount,
            "currency": dispute.currency,
            "is_charge_refundable": dispute.is_charge_refundable,
        }
        if stored is None:
            stored = Dispute.objects.create(
                tenant_id=order.tenant_id,
                order=order,
                payment=payment,
                provider=provider,
                provider_ref=dispute.provider_ref,
                **values,
            )
            outcome = "created"
        elif stored.status in FINAL_STATUSES and dispute.status not in FINAL_STATUSES:
            return stored, "stale"
        elif all(getattr(stored, key) == value for key, value in values.items()):
            return stored, "unchanged"
        else:
            Dispute.objects.filter(pk=stored.pk).update(**values)
            stored.refresh_from_db()
            outcome = "updated"
        logger.warning(
            "dispute %s on order %s: %s (%s)",
            stored.provider_ref,
            order.external_id,
            stored.status,
            "open" if stored.is_open else "settled for the shop",
            extra={"tenant": order.tenant_id},
        )
        order_dispute_changed.send(sender=Dispute, dispute=stored, order=order)
    return stored, outcome
