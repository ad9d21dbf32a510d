"""Paying a refund out at the provider: the second half of moving money.

`ledger_refund_issue` wrote the entry `pending` under the order lock (so it already counts);
`ledger_refund_payout` then calls the gateway with no transaction open and no row locked (the
call may take seconds; a lock held across it would stall every refund of the order) and records
the answer with `ledger_refund_record_outcome`. A process that dies between the provider's
answer and our record is safe: the retry sends the same Idempotency-Key (the entry's, which is
the approval's) and gets the same refund back; past the provider's idempotency window the
refund is first looked up by its metadata, so a late retry never pays twice.

Before the first payout the payment reference (imported with the order) is checked against the
provider (`payment_ref_problem`): on the shop's account, the shop's, in the refund's currency, able
to return the amount. A payment that fails it is never paid against: the entry is recorded
`failed` with the reason, and the request goes back to finance (`payment_failed`).
"""

import logging
from datetime import timedelta

from django.db import transaction
from django.utils import timezone

from .exceptions import PaymentProviderUnavailable
from .gateways import ProviderRefund, RefundRequest, gateway_for
from .models import Payment, RefundEntry, RefundEntryEvent, RefundStatus
from .services import ledger_refund_record_outcome, refund_entry_log
from .telemetry import traced

PROVIDER_PREFIXES = ("pi_", "ch_", "py_", "gid://shopify/OrderTransaction/")


def refund_entry_payment_ref(*, entry: RefundEntry) -> str:
    """The provider payment the refund goes back to: the payment the entry names (the approved
    leg's), and only that one: a refund approved to one tender is never paid to another ("" when
    that payment was not made through the provider). Entries written before they named their
    payment: the order's payment made with the entry's destination method, or, with no method
    (the order's payment recorded none), the order's first provider payment."""
    if entry.payment_id is not None:
        ref = Payment.objects.filter(pk=entry.payment_id).values_list("payment_ref", flat=True).first() or ""
        return ref if ref.startswith(PROVIDER_PREFIXES) else ""
    payments = [
        p
        for p in Payment.objects.filter(order_id=entry.order_id).order_by("id")
        if p.payment_ref.startswith(PROVIDER_PREFIXES)
    ]
    if entry.destination_id:
        return next((p.payment_ref for p in payments if p.payment_method_id == entry.destination_id), "")
    return payments[0].payment_ref if payments else ""


def refund_entry_metadata(*, entry: RefundEntry, extra: dict | None = None) -> dict[str, str]:
    """What the provider's refund carries, to find it again and to tell whose it is. Must be the
    same on every attempt (the provider compares a retried request's parameters)."""
    metadata = {"ledger_entry": str(entry.pk), "approval": entry.approval_ref, "tenant": entry.tenant.slug}
    metadata.update({str(k): str(v) for k, v in (extra or {}).items()})
    return metadata


def _payout_attributes(entry: RefundEntry) -> dict:
    return {
        "refund.ledger.entry_id": entry.pk,
        "refund.ledger.status": entry.status,
        "refund.ledger.gateway": entry.gateway,
        "refund.ledger.provider_ref": entry.provider_ref,
    }


@traced("refund.ledger.payout", result=_payout_attributes)
def ledger_refund_payout(*, entry_id: int, metadata: dict | None = None) -> RefundEntry:
    """Execute a pending refund at its gateway, exactly once; returns the entry as recorded.

    Call it with no transaction open (never under a row lock). An entry that is not pending
    (already paid, failed, store credit) or waiting for a manual payout is returned unchanged: calling again is safe.
    `metadata` adds to what the refund carries (e.g. {"ticket": "42"}); pass the same each time.

    Raises `ledger.exceptions.PaymentProviderUnavailable` (transient: the entry stays pending;
    retry later, the same key makes the same refund). A refusal (card declined, charge already
    refunded) is not raised: the entry is recorded `failed` with the provider's reason and
    `refund_entry_status_changed` is sent.

    Each answer of the provider is one `payout.result` line on the money log (INFO; ERROR with
    the provider's reason for failed/canceled); an unreachable provider, `payout.unavailable`
    (WARNING: the caller retries).
    """
    entry = RefundEntry.objects.select_related("tenant", "order").get(pk=entry_id)
    if entry.status != RefundStatus.PENDING or entry.gateway == RefundEntry.Gateway.MANUAL:
        # A manual payout is made by a person, who records it (`ledger_refund_record_paid`).
        return entry
    order_ref = entry.order.external_id
    gateway = gateway_for(entry.gateway)
    payment_ref = refund_entry_payment_ref(entry=entry)
    if gateway.executes_refunds and not payment_ref:
        reason = "no_payment_ref: the order has no provider payment (pi_… or ch_…) to refund."
        return _payout_record(entry=entry, order_ref=order_ref, status=RefundStatus.FAILED, reason=reason)
    request = RefundRequest(
        payment_ref=payment_ref,
        amount=entry.amount,
        currency=entry.currency,
        idempotency_key=entry.idempotency_key,
        metadata=refund_entry_metadata(entry=entry, extra=metadata),
        account=entry.tenant.stripe_account,
    )
    result = None
    window = gateway.idempotency_window_seconds
    try:
        if gateway.executes_refunds and not entry.provider_ref:
            # Before the first payout: the payment is the provider's fact, not the import's.
            problem = payment_ref_problem(entry=entry, payment_ref=payment_ref, gateway=gateway)
            if problem:
                # A refund an earlier attempt made (its answer lost) has taken back part of the
                # payment already: it is ours, and it is the answer.
                result = gateway.refund_find(
                    payment_ref=payment_ref,
                    metadata_key="ledger_entry",
                    metadata_value=str(entry.pk),
                    account=request.account,
                )
                if result is None:
                    return _payout_record(entry=entry, order_ref=order_ref, status=RefundStatus.FAILED, reason=problem)
        if result is None and window is not None and timezone.now() - entry.created_at > timedelta(seconds=window):
            # The provider may have forgotten our key: a refund made by an earlier attempt is only
            # found by its metadata.
            result = gateway.refund_find(
                payment_ref=payment_ref,
                metadata_key="ledger_entry",
                metadata_value=str(entry.pk),
                account=request.account,
            )
        if result is None:
            result = gateway.refund_create(request)
    except PaymentProviderUnavailable as exc:
        refund_entry_log(
            entry,
            event="payout.unavailable",
            order_ref=order_ref,
            reason=f"the provider is unavailable, the entry stays pending: {exc}",
            level=logging.WARNING,
        )
        raise
    return _payout_record(
        entry=entry, order_ref=order_ref, status=result.status, provider_ref=result.provider_ref, reason=result.reason
    )


def payment_ref_problem(*, entry: RefundEntry, payment_ref: str, gateway) -> str:
    """Why the provider's payment cannot take this refund, or "" when it can: it must exist on the
    shop's own account (its Stripe account, or the platform's for a shop without one), belong to
    this shop where it says whose it is (its Connect destination, its `metadata[tenant]`), not be
    disputed, be in the entry's currency, and still be able to return the amount (Stripe's own rule). Raises
    PaymentProviderUnavailable when the provider cannot be asked (the entry stays pending)."""
    tenant = entry.tenant
    account = tenant.stripe_account
    payment = gateway.payment_get(payment_ref=payment_ref, account=account)
    where = f"the shop's account ({account})" if account else "the platform's account"
    if payment is None:
        return f"payment_ref_unknown: the provider has no payment {payment_ref} on {where}."
    if payment.destination and payment.destination != account:
        return f"payment_ref_foreign: payment {payment_ref} was paid to another account ({payment.destination})."
    owner = payment.metadata.get("tenant")
    if owner and owner != tenant.slug:
        return f"payment_ref_foreign: payment {payment_ref} belongs to another shop ({owner})."
    if payment.disputed:
        return (
            f"payment_disputed: payment {payment_ref} is disputed at the provider: the customer's bank may "
            "have returned the money already; a person decides."
        )
    if payment.currency != entry.currency:
        return f"payment_ref_currency: payment {payment_ref} was paid in {payment.currency}, the refund is in {entry.currency}."
    if payment.returnable < entry.amount:
        return (
            f"payment_ref_exceeds: payment {payment_ref} can return only {payment.returnable} {payment.currency} "
            f"({payment.refunded} of {payment.amount} already refunded at the provider), not {entry.amount}."
        )
    return ""


def _payout_record(*, entry: RefundEntry, order_ref: str, status: str, provider_ref: str = "", reason: str = ""):
    """Record the provider's answer and log it as the payout's result. One transaction around
    both, so the line comes before anything the record sets off after commit (the approval's
    next execution)."""
    with transaction.atomic():
        recorded = ledger_refund_record_outcome(
            entry_id=entry.pk,
            status=status,
            provider_ref=provider_ref,
            reason=reason,
            source=RefundEntryEvent.Source.GATEWAY,
            log_change=False,
        )
        # The ledger's status after recording (a webhook may have been faster), and the provider's answer.
        refund_entry_log(recorded, event="payout.result", order_ref=order_ref, reason=reason, provider_status=status)
    return recorded


def refund_entry_provider_record(*, entry_id: int) -> ProviderRefund | None:
    """The provider's own record of an entry's refund (for the evaluator to compare with the
    ledger), or None: not paid through a provider (manual, store credit), or not known there.
    Raises PaymentProviderUnavailable when the provider cannot be asked."""
    entry = RefundEntry.objects.select_related("tenant").get(pk=entry_id)
    gateway = gateway_for(entry.gateway)
    if not gateway.executes_refunds or not entry.provider_ref:
        return None
    return gateway.refund_get(provider_ref=entry.provider_ref, account=entry.tenant.stripe_account)


def refund_entries_pending(*, older_than: timedelta = timedelta(0)):
    """Pending entries written more than `older_than` ago: what a sweeper re-pays."""
    return RefundEntry.objects.filter(
        status=RefundStatus.PENDING, created_at__lte=timezone.now() - older_than
    ).order_by("id")
