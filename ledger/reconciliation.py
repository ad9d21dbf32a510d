"""The ledger and the provider, compared.

`provider_refund_reconcile` applies one refund as the provider reports it (from a webhook or a
listing) to the ledger: a known refund's status is recorded by compare-and-set (an old event
arriving late changes nothing); a refund the ledger does not know, made by hand in the
provider's dashboard, is a fact — it becomes an `external` entry that counts against the order,
flagged for review, with a `missing_in_ledger` finding.

`payments_reconcile` lists the provider's refunds of a period and stores a finding for every
difference left: missing in the ledger, missing at the provider, amount differs, status differs.
It also lists the provider's disputes of the period and records each on its order
(`ledger.disputes.dispute_record`), so a lost `charge.dispute.*` webhook still makes it disputed.
It also compares every gift card the ledger credited with the ledger (`store_credit_reconcile`):
a kept balance that is not the opening balance plus the ledger's store credit is a
`store_credit_differs` finding, whatever the gateway.
"""

import logging
from datetime import datetime, timedelta
from decimal import Decimal

from django.conf import settings
from django.db import transaction
from django.utils import timezone

from .disputes import dispute_record
from .gateways import ProviderDispute, ProviderRefund, gateway_for, gateway_get
from .gateways.shopify import provider_refund_from_shopify
from .models import (
    COUNTING_STATUSES,
    Payment,
    PaymentMethod,
    ReconciliationFinding,
    ReconciliationRun,
    RefundEntry,
    RefundEntryEvent,
    RefundStatus,
    ShopifyOrder,
    Tenant,
)
from .money import ZERO, to_minor_units
from .selectors import refund_entries_with_effective_amount, store_credit_movements
from .services import ledger_refund_record_external, ledger_refund_record_outcome
from .shopify.mapping import external_refunds_record, refund_note_entry

logger = logging.getLogger(__name__)

Kind = ReconciliationFinding.Kind
# A pending entry this young may still be on its way to the provider: not "missing" yet.
IN_FLIGHT_GRACE = timedelta(minutes=15)
# Which provider statuses agree with each ledger status.
AGREES = {
    RefundStatus.PENDING: {"pending"},
    RefundStatus.SUCCEEDED: {"succeeded"},
    RefundStatus.FAILED: {"failed"},
    RefundStatus.CANCELED: {"canceled"},
    RefundStatus.EXTERNAL: {"pending", "succeeded"},
}


def reconciliation_finding_record(
    *,
    kind: str,
    tenant: Tenant | None,
    run: ReconciliationRun | None = None,
    entry: RefundEntry | None = None,
    provider_ref: str = "",
    **fields,
) -> ReconciliationFinding:
    """Store a finding once: an unresolved finding of the same kind about the same refund is reused."""
    existing = (
        ReconciliationFinding.objects.unresolved()
        .filter(kind=kind, entry=entry, provider_ref=provider_ref, payment_method=fields.get("payment_method"))
        .first()
    )
    if existing is not None:
        return existing
    return ReconciliationFinding.objects.create(
        kind=kind, tenant=tenant, run=run, entry=entry, provider_ref=provider_ref, **fields
    )


def _finding_missing_in_ledger(
    *,
    run: ReconciliationRun | None,
    tenant: Tenant | None,
    entry: RefundEntry | None,
    provider_ref: str,
    amount: Decimal,
    currency: str,
    status: str,
    detail: str,
) -> ReconciliationFinding:
    """A refund the provider made and the ledger did not: `entry` is the external entry it was
    recorded as (None when it could not be)."""
    return reconciliation_finding_record(
        kind=Kind.MISSING_IN_LEDGER,
        tenant=tenant,
        run=run,
        entry=entry,
        provider_ref=provider_ref,
        provider_amount=amount,
        currency=currency,
        provider_status=status,
        ledger_status=entry.status if entry else "",
        detail=detail,
    )


def _finding_missing_at_provider(
    *, run: ReconciliationRun, entry: RefundEntry, ledger_amount: Decimal, detail: str
) -> ReconciliationFinding:
    """A refund the ledger counts and the provider does not list."""
    return reconciliation_finding_record(
        kind=Kind.MISSING_AT_PROVIDER,
        tenant=entry.tenant,
        run=run,
        entry=entry,
        provider_ref=entry.provider_ref,
        ledger_amount=ledger_amount,
        currency=entry.currency,
        ledger_status=entry.status,
        detail=detail,
    )


def reconciliation_findings_resolve(*, queryset, user, note: str = "") -> int:
    """Finance marks findings resolved (who and when are kept); returns how many changed."""
    return queryset.filter(resolved_at__isnull=True).update(
        resolved_at=timezone.now(), resolved_by=user, resolution_note=note
    )


def _entry_for(refund: ProviderRefund, gateway: str) -> RefundEntry | None:
    # No id, no match: provider_ref="" is every entry whose payout has no answer yet, any shop's.
    if not refund.provider_ref:
        return None
    # The account is checked on this path too: a refund of another account is never ours.
    entry = (
        RefundEntry.objects.select_related("tenant")
        .filter(gateway=gateway, provider_ref=refund.provider_ref, tenant__stripe_account=refund.account)
        .first()
    )
    if entry is not None or not refund.metadata.get("ledger_entry", "").isdigit():
        return entry
    # Our refund whose answer we never recorded (the response was lost): its metadata names the
    # entry. Only an entry of the same shop, on the same account, still without a provider id.
    entry = (
        RefundEntry.objects.select_related("tenant")
        .filter(pk=int(refund.metadata["ledger_entry"]), gateway=gateway, provider_ref="")
        .first()
    )
    if (
        entry is None
        or entry.tenant.slug != refund.metadata.get("tenant")
        or entry.tenant.stripe_account != refund.account
    ):
        return None
    return entry


def _payment_for(refund: ProviderRefund) -> Payment | None:
    return (
        (
            Payment.objects.select_related("order", "order__tenant")
            .filter(payment_ref__in=refund.payment_refs, order__tenant__stripe_account=refund.account)
            .order_by("id")
            .first()
        )
        if refund.payment_refs
        else None
    )


def _dispute_payment(dispute: ProviderDispute) -> Payment | None:
    return (
        Payment.objects.select_related("order")
        .filter(payment_ref__in=dispute.payment_refs, order__tenant__stripe_account=dispute.account)
        .first()
        if dispute.payment_refs
        else None
    )


def provider_refund_reconcile(
    *,
    refund: ProviderRefund,
    gateway: str = "stripe",
    source: str = RefundEntryEvent.Source.WEBHOOK,
    event_ref: str = "",
    run: ReconciliationRun | None = None,
) -> tuple[RefundEntry | None, str]:
    """Apply one provider refund to the ledger. Returns (the entry, what happened)."""
    if not refund.provider_ref:
        return None, "ignored"  # nothing to match it to, nor to record it by
    entry = _entry_for(refund, gateway)
    if entry is not None:
        if (
            refund.status == entry.status
            or entry.status == RefundStatus.EXTERNAL
            and refund.status in AGREES[entry.status]
        ):
            if not entry.provider_ref:
                entry = ledger_refund_record_outcome(
                    entry_id=entry.pk,
                    status=entry.status,
                    source=source,
                    provider_ref=refund.provider_ref,
                    event_ref=event_ref,
                )
            return entry, "unchanged"
        before = entry.status
        entry = ledger_refund_record_outcome(
            entry_id=entry.pk,
            status=refund.status,
            provider_ref=refund.provider_ref,
            reason=refund.reason,
            source=source,
            event_ref=event_ref,
        )
        return entry, "updated" if entry.status != before else "kept"
    if refund.status in (RefundStatus.FAILED, RefundStatus.CANCELED):
        return None, "ignored"  # an unknown refund that moved no money
    payment = _payment_for(refund)
    entry = None
    if payment is not None:
        entry = ledger_refund_record_external(
            order=payment.order,
            amount=refund.amount,
            currency=refund.currency,
            gateway=gateway,
            provider_ref=refund.provider_ref,
            event_ref=event_ref,
            payment=payment,
        )
    detail = "A refund made at the provider outside the product" + (
        f": recorded as external entry #{entry.pk}, flagged for review."
        if entry is not None
        else "; it could not be recorded (no order with that payment, or above what is refundable while refunds are pending)."
    )
    _finding_missing_in_ledger(
        run=run,
        tenant=payment.order.tenant if payment else None,
        entry=entry,
        provider_ref=refund.provider_ref,
        amount=refund.amount,
        currency=refund.currency,
        status=refund.status,
        detail=detail,
    )
    return entry, "external" if entry is not None else "unrecorded"


def _accounts(tenant: Tenant | None) -> dict[str, list[Tenant]]:
    """The provider accounts to list, each with the shops it holds ("" is the platform's own)."""
    tenants = [tenant] if tenant is not None else list(Tenant.objects.order_by("id"))
    accounts: dict[str, list[Tenant]] = {}
    for t in tenants:
        accounts.setdefault(t.stripe_account, []).append(t)
    return accounts


def payments_reconcile(*, tenant: Tenant | None = None, since: datetime | None = None) -> ReconciliationRun:
    """Compare the provider's refunds created since `since` with the ledger; store the differences.

    The provider is listed first, with no transaction open (it may page for a while); then each
    refund is applied and compared. Raises `PaymentProviderUnavailable` when the provider cannot
    be listed (nothing is half-written: a run is only stored once the listing is complete)."""
    since = since or timezone.now() - timedelta(days=settings.RECONCILE_LOOKBACK_DAYS)
    gateway = gateway_get()
    # Refunds of payments Shopify took are compared order by order with the connected stores,
    # whatever the configured gateway (they are always paid through Shopify).
    shop_orders = shopify_orders_read(tenant=tenant, since=since)
    if not gateway.executes_refunds or gateway.name == "shopify":
        with transaction.atomic():
            run = ReconciliationRun.objects.create(
                tenant=tenant,
                gateway=gateway.name,
                since=since,
                note=(
                    f"The {gateway.name} gateway pays refunds by hand: there is no provider record to compare."
                    if not gateway.executes_refunds
                    else "Compared with each connected Shopify store's orders."
                ),
            )
            findings = store_credit_reconcile(run=run, tenant=tenant) | shopify_orders_reconcile(
                run=run, listed=shop_orders
            )
            findings.discard(None)
            run.provider_refunds = sum(len(node.get("refunds") or []) for _, node in shop_orders)
            run.findings_count = len(findings)
            run.finished_at = timezone.now()
            run.save()
        return run
    accounts = _accounts(tenant)
    listed = [
        (account, refund) for account in accounts for refund in gateway.refunds_list(since=since, account=account)
    ]
    disputes = [dispute for account in accounts for dispute in gateway.disputes_list(since=since, account=account)]
    with transaction.atomic():
        run = ReconciliationRun.objects.create(tenant=tenant, gateway=gateway.name, since=since)
        # Disputes a lost webhook never told us about: the order becomes disputed all the same.
        in_scope_tenants = {t.pk for ts in accounts.values() for t in ts}
        for dispute in disputes:
            payment = _dispute_payment(dispute)
            if payment is not None and payment.order.tenant_id in in_scope_tenants:
                dispute_record(dispute=dispute, provider=gateway.name)
        findings: set[int] = set()
        seen_refs: set[str] = set()
        for account, refund in listed:
            entry, outcome = None, ""
            in_scope = {t.pk for t in accounts[account]}
            owner = _entry_for(refund, gateway.name) or _payment_for(refund)
            owner_tenant = (
                owner.tenant_id if isinstance(owner, RefundEntry) else owner.order.tenant_id if owner else None
            )
            if tenant is not None and owner_tenant not in in_scope:
                continue  # another shop's refund on the shared platform account
            seen_refs.add(refund.provider_ref)
            entry, outcome = provider_refund_reconcile(
                refund=refund, gateway=gateway.name, run=run, source=RefundEntryEvent.Source.RECONCILIATION
            )
            if outcome in ("external", "unrecorded"):
                findings.add(
                    ReconciliationFinding.objects.unresolved()
                    .filter(kind=Kind.MISSING_IN_LEDGER, provider_ref=refund.provider_ref)
                    .values_list("pk", flat=True)
                    .first()
                )
                continue
            if entry is None:
                continue
            findings.update(_compare(entry=entry, refund=refund, run=run))
        findings.update(
            _missing_at_provider(
                run=run,
                tenants=[t for ts in accounts.values() for t in ts],
                since=since,
                seen_refs=seen_refs,
                gateway=gateway.name,
            )
        )
        findings.update(store_credit_reconcile(run=run, tenant=tenant))
        findings.update(shopify_orders_reconcile(run=run, listed=shop_orders))
        findings.discard(None)
        run.provider_refunds = len(seen_refs)
        run.ledger_entries = RefundEntry.objects.filter(
            gateway=gateway.name, created_at__gte=since, tenant__in=[t for ts in accounts.values() for t in ts]
        ).count()
        run.findings_count = len(findings)
        run.finished_at = timezone.now()
        run.save()
    return run


def _compare(*, entry: RefundEntry, refund: ProviderRefund, run: ReconciliationRun) -> set[int]:
    found = set()
    effective = refund_entries_with_effective_amount(RefundEntry.objects.filter(pk=entry.pk)).get().effective_amount
    common = {
        "tenant": entry.tenant,
        "run": run,
        "entry": entry,
        "provider_ref": refund.provider_ref,
        "ledger_amount": effective,
        "provider_amount": refund.amount,
        "currency": entry.currency,
        "ledger_status": entry.status,
        "provider_status": refund.status,
    }
    if refund.currency != entry.currency or to_minor_units(effective, entry.currency) != to_minor_units(
        refund.amount, refund.currency
    ):
        found.add(
            reconciliation_finding_record(
                kind=Kind.AMOUNT_DIFFERS,
                detail=f"Ledger {effective} {entry.currency}, provider {refund.amount} {refund.currency}.",
                **common,
            ).pk
        )
    if refund.status not in AGREES[RefundStatus(entry.status)]:
        found.add(
            reconciliation_finding_record(
                kind=Kind.STATUS_DIFFERS,
                detail=f"Ledger {entry.status}, provider {refund.status} (a move the ledger does not make by itself).",
                **common,
            ).pk
        )
    return found


def _missing_at_provider(*, run, tenants, since, seen_refs, gateway) -> set[int]:
    """Entries that should be at the provider (paid through it, still counting) but are not."""
    found = set()
    entries = refund_entries_with_effective_amount(
        RefundEntry.objects.select_related("tenant").filter(
            gateway=gateway,
            status__in=COUNTING_STATUSES,
            tenant__in=tenants,
            created_at__gte=since,
            created_at__lte=timezone.now() - IN_FLIGHT_GRACE,
        )
    )
    for entry in entries:
        if entry.provider_ref and entry.provider_ref in seen_refs:
            continue
        found.add(
            _finding_missing_at_provider(
                run=run,
                entry=entry,
                ledger_amount=entry.effective_amount,
                detail="The ledger counts this refund, but the provider lists no such refund for the period.",
            ).pk
        )
    return found


def store_credit_reconcile(*, run: ReconciliationRun, tenant: Tenant | None = None) -> set[int]:
    """Gift cards whose kept balance is not their opening balance plus the store credit the
    ledger issued to them (changed by hand, or by a writer that bypassed the ledger): one
    `store_credit_differs` finding each. Only cards the ledger credited are the ledger's to check."""
    moved = store_credit_movements(
        method_ids=RefundEntry.objects.filter(gateway=RefundEntry.Gateway.STORE_CREDIT, destination__isnull=False)
        .filter(**({"tenant": tenant} if tenant is not None else {}))
        .values_list("destination_id", flat=True)
        .distinct()
    )
    found = set()
    for method in PaymentMethod.objects.filter(pk__in=list(moved)).select_related("customer__tenant"):
        derived = (method.opening_balance or ZERO) + moved[method.pk]
        if method.balance == derived:
            continue
        found.add(
            reconciliation_finding_record(
                kind=Kind.STORE_CREDIT_DIFFERS,
                tenant=method.customer.tenant,
                run=run,
                payment_method=method,
                ledger_amount=derived,
                provider_amount=method.balance,
                detail=f"Gift card {method.external_id} of {method.customer.external_id} holds {method.balance}; "
                f"the ledger says {derived} (opening balance {method.opening_balance or ZERO} plus {moved[method.pk]} "
                "store credit refunded by this product).",
            ).pk
        )
    return found


# --- Shopify: each connected order's ledger against the store's own record --------------------


def shopify_orders_read(*, tenant: Tenant | None, since: datetime) -> list[tuple[ShopifyOrder, dict]]:
    """The store's refunds of every connected order with a Shopify refund in the ledger since
    `since` (one API read per order, no transaction open). Raises PaymentProviderUnavailable."""
    links = ShopifyOrder.objects.select_related("connection", "order").filter(
        order__refund_entries__gateway=RefundEntry.Gateway.SHOPIFY,
        order__refund_entries__created_at__gte=since,
    )
    if tenant is not None:
        links = links.filter(connection__tenant=tenant)
    listed = []
    for link in links.distinct().order_by("id"):
        node = gateway_for("shopify").order_refunds_read(connection=link.connection, order_gid=link.shopify_id)
        listed.append((link, node))
    return listed


def shopify_orders_reconcile(*, run: ReconciliationRun, listed: list[tuple[ShopifyOrder, dict]]) -> set[int]:
    """Per order: admin refunds the ledger lacks are recorded (external, flagged); each refund the
    product made is compared with Shopify's; and the order's total refunded at Shopify
    (`totalRefundedSet`) must be what the ledger counts for it."""
    found: set[int] = set()
    for link, node in listed:
        order = link.order
        for entry in external_refunds_record(
            nodes=[{**node, "name": order.external_id}], orders={order.external_id: order}
        ):
            found.add(
                _finding_missing_in_ledger(
                    run=run,
                    tenant=order.tenant,
                    entry=entry,
                    provider_ref=entry.provider_ref,
                    amount=entry.amount,
                    currency=entry.currency,
                    status=RefundStatus.SUCCEEDED,
                    detail=f"A refund made in Shopify's admin: recorded as external entry #{entry.pk}, flagged for review.",
                ).pk
            )
        refunds = {r["id"]: r for r in node.get("refunds") or []}
        made = RefundEntry.objects.filter(
            order=order, gateway=RefundEntry.Gateway.SHOPIFY, source=RefundEntry.Source.APPROVAL
        ).exclude(status__in=(RefundStatus.FAILED, RefundStatus.CANCELED))
        for entry in made:
            refund = refunds.get(entry.provider_ref) or next(
                (r for r in refunds.values() if refund_note_entry(r.get("note")) == entry.pk), None
            )
            if refund is None:
                if entry.created_at <= timezone.now() - IN_FLIGHT_GRACE:
                    found.add(
                        _finding_missing_at_provider(
                            run=run,
                            entry=entry,
                            ledger_amount=entry.amount,
                            detail=f"The ledger counts this refund, but Shopify's order {order.external_id} has no such refund.",
                        ).pk
                    )
                continue
            found |= _compare(entry=entry, refund=provider_refund_from_shopify(refund, order.currency), run=run)
        counted = refund_entries_with_effective_amount(
            RefundEntry.objects.filter(order=order, gateway=RefundEntry.Gateway.SHOPIFY, status__in=COUNTING_STATUSES)
        )
        ledger_total = sum((e.effective_amount for e in counted), ZERO)
        shop_total = Decimal(str(((node.get("totalRefundedSet") or {}).get("shopMoney") or {}).get("amount") or "0"))
        if ledger_total != shop_total:
            found.add(
                reconciliation_finding_record(
                    kind=Kind.AMOUNT_DIFFERS,
                    tenant=order.tenant,
                    run=run,
                    provider_ref=link.shopify_id,
                    ledger_amount=ledger_total,
                    provider_amount=shop_total,
                    currency=order.currency,
                    detail=f"Order {order.external_id}: the ledger counts {ledger_total} refunded through Shopify, "
                    f"Shopify's totalRefundedSet is {shop_total}.",
                ).pk
            )
    return found
