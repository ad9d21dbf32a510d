"""The evaluator: separate code from the actor (approvals.services.execution.approval_execute).

It trusts nothing the actor recorded about itself. It re-reads the ledger and the policy the
request was made under and checks that exactly the approved refund was recorded: one entry
under the request's key, on that order, for exactly the approved amount and currency, to
exactly the approved payment method, the order's refunds within its total, the order within the
policy window when the request was made (unless a person's policy exception waived the window
as the policy allows), and the approvals the policy asked for, none by the filer.

Where the request names its tender legs (per leg the order's payment, its method, the amount),
there is one entry per leg under its leg key, each that leg, paid the way that tender is paid, the
provider's refund of each on that leg's payment (its reference as the ledger records it) for that
leg's amount, and the legs and the entries add up to the approved amount.

It also asks where the money moved: the entry must be `succeeded`, and for a refund paid through
a provider (stripe) the provider's own record of the refund, read through the gateway by its
provider_ref, must be that refund: succeeded, the same amount and currency, carrying this
approval in its metadata. A provider that cannot be asked raises PaymentProviderUnavailable
(the task retries); nothing is recorded then.
"""

import logging
from decimal import Decimal

from django.db import transaction
from django.utils import timezone

from ledger.models import Order, Payment, PaymentMethod, RefundEntry, RefundStatus
from ledger.money import CENT
from ledger.payouts import refund_entry_provider_record
from ledger.selectors import order_refunded_total, refund_entries_with_effective_amount
from ledger.services import canonical_hash

from ..destinations import approval_leg_key, approval_request_entries
from ..models import ApprovalRequest, ApprovalVote
from ..request_state import approval_request_transition
from ..signals import refund_verified

logger = logging.getLogger(__name__)


def _check(name: str, ok: bool, expected, actual) -> dict:
    return {"name": name, "ok": bool(ok), "expected": _plain(expected), "actual": _plain(actual)}


def _plain(value):
    if isinstance(value, Decimal):
        return str(value.quantize(CENT))
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    return value


def approval_verdict(*, request: ApprovalRequest) -> dict:
    """The verdict on one approval request, read from the ledger. Pure: writes nothing."""
    checks: list[dict] = []
    args = request.args or {}
    legs = args.get("legs") or []
    # One entry per leg, each under its leg's key (a request naming no leg: one, under its key).
    keys = [approval_leg_key(request_key=request.idempotency_key, index=n) for n in range(max(1, len(legs)))]
    by_key = {
        entry.idempotency_key: entry
        for entry in refund_entries_with_effective_amount(RefundEntry.objects.filter(idempotency_key__in=keys))
        .select_related("order", "destination")
        .prefetch_related("items__order_item")
    }
    entries = [by_key[key] for key in keys if key in by_key]
    if len(keys) == 1:
        checks.append(_check("one_entry_under_key", len(entries) == 1, 1, len(entries)))
    else:
        missing = [n + 1 for n, key in enumerate(keys) if key not in by_key]
        checks.append(_check("one_entry_per_leg", not missing, len(keys), f"{len(entries)} (missing legs {missing})"))
    complete = len(entries) == len(keys)
    entry = entries[0] if complete else None
    order = Order.objects.get(pk=request.order_id)

    checks.append(
        _check("args_match_hash", canonical_hash(args) == request.args_hash, request.args_hash, canonical_hash(args))
    )
    if complete:
        several = len(entries) > 1
        for n, leg_entry in enumerate(entries):
            checks.extend(
                _entry_checks(request=request, args=args, order=order, entry=leg_entry, leg=n if several else None)
            )
        amounts = sum((e.amount for e in entries), Decimal(0))
        effective = sum((e.effective_amount for e in entries), Decimal(0))
        checks.append(
            _check(
                "amount_exact",
                amounts == request.amount
                and effective == request.amount
                and str(request.amount) == str(args.get("amount")),
                request.amount,
                effective,
            )
        )
        if "destination_method" in args:  # requests made before the method was named have no such arg
            actual = entry.destination.external_id if entry.destination_id else None
            same_customer = entry.destination_id is None or entry.destination.customer_id == order.customer_id
            checks.append(
                _check(
                    "destination_method_exact",
                    actual == args["destination_method"] and same_customer,
                    args["destination_method"],
                    actual,
                )
            )
        if legs:
            named = sum((Decimal(str(leg.get("amount"))) for leg in legs), Decimal(0))
            checks.append(_check("legs_sum", named == request.amount, request.amount, named))
        for n, (leg, leg_entry) in enumerate(zip(legs, entries, strict=False)):
            checks.extend(_leg_checks(leg=leg, entry=leg_entry, legs=len(legs), index=n))
        entry_items = sorted(ri.order_item.item_id for e in entries for ri in e.items.all() for _ in range(ri.quantity))
        checks.append(
            _check(
                "items_exact",
                entry_items == sorted(args.get("items") or []),
                sorted(args.get("items") or []),
                entry_items,
            )
        )
        if request.ledger_entry_id is not None:
            # The first leg's entry (a refused leg's, once the provider refused it).
            checks.append(
                _check(
                    "entry_recorded_on_request",
                    request.ledger_entry_id in {e.pk for e in entries},
                    [e.pk for e in entries] if several else entry.pk,
                    request.ledger_entry_id,
                )
            )
        for n, leg_entry in enumerate(entries):
            checks.extend(
                _provider_checks(
                    request=request,
                    entry=leg_entry,
                    leg=legs[n] if n < len(legs) else None,
                    index=n if several else None,
                )
            )

    refunded = order_refunded_total(order)
    checks.append(_check("order_refunds_within_total", refunded <= order.total, f"<= {order.total}", refunded))

    policy = request.policy
    waived = set(request.waived_rules or ()) if request.policy_exception else set()
    if request.policy_exception:
        # A person's exception is legitimate only as the policy lets it be: rules the policy
        # lists as waivable, a written reason, and at least two distinct approvers.
        allowed = set(policy.waivable_rules or ())
        checks.append(
            _check(
                "exception_within_policy",
                waived <= allowed and bool(request.proposal_reason.strip()) and request.required_approvals >= 2,
                f"waived within {sorted(allowed)}, a reason, >= 2 approvers",
                f"waived {sorted(waived)}, reason {'given' if request.proposal_reason.strip() else 'missing'}, "
                f"{request.required_approvals} approvers",
            )
        )
    if policy.window_days is not None and "window" not in waived:
        age_days = (request.created_at - order.placed_at).days
        checks.append(
            _check(
                "within_policy_window",
                age_days <= policy.window_days,
                f"<= {policy.window_days} days ({policy.version})",
                f"{age_days} days",
            )
        )
    checks.append(
        _check(
            "amount_within_refundable_at_request",
            request.amount <= request.refundable_at_request,
            f"<= {request.refundable_at_request}",
            request.amount,
        )
    )

    approvers = set(request.votes.filter(decision=ApprovalVote.Decision.APPROVE).values_list("approver_id", flat=True))
    checks.append(
        _check(
            "distinct_approvers",
            len(approvers) >= request.required_approvals,
            request.required_approvals,
            len(approvers),
        )
    )
    makers_approving = request.maker_ids & approvers
    checks.append(
        _check(
            "filer_not_approver",
            not makers_approving,
            "filer not among approvers",
            "filer approved" if makers_approving else "ok",
        )
    )

    ok = all(c["ok"] for c in checks)
    return {
        "ok": ok,
        "stage": "verify",
        "entry": entry.pk if entry else None,
        "entries": [e.pk for e in entries],
        "idempotency_key": request.idempotency_key,
        "order": order.external_id,
        "amount": str(request.amount),
        "currency": request.currency,
        "failed": [c["name"] for c in checks if not c["ok"]],
        "checks": checks,
        "verified_at": timezone.now().isoformat(),
    }


def _entry_checks(*, request: ApprovalRequest, args: dict, order: Order, entry: RefundEntry, leg: int | None):
    """One entry (one leg's) against the request: its order, tenant, currency, approval, kind of
    destination, and that its money moved (`succeeded`)."""
    checks = [
        _check("entry_on_order", entry.order_id == request.order_id, order.external_id, entry.order.external_id),
        _check("entry_same_tenant", entry.tenant_id == request.tenant_id, request.tenant_id, entry.tenant_id),
        _check(
            "currency_exact",
            entry.currency == request.currency == args.get("currency"),
            request.currency,
            entry.currency,
        ),
        _check("approval_ref", entry.approval_ref == str(request.pk), str(request.pk), entry.approval_ref),
        _check(
            "destination",
            entry.destination_kind == (args.get("destination") or "original"),
            args.get("destination") or "original",
            entry.destination_kind,
        ),
        _check("entry_succeeded", entry.status == RefundStatus.SUCCEEDED, RefundStatus.SUCCEEDED, entry.status),
    ]
    return _numbered(checks, leg)


def _numbered(checks: list[dict], leg: int | None) -> list[dict]:
    """The checks of one leg of several carry its number (1-based), so the evidence says which."""
    return checks if leg is None else [{**check, "leg": leg + 1} for check in checks]


def _leg_checks(*, leg: dict, entry: RefundEntry, legs: int, index: int) -> list[dict]:
    """The ledger's entry against the tender leg the request names (requests made before legs were
    named, and orders with no recorded payment, name none): the same payment, the same method, the
    same amount, and paid the way that tender is paid (store credit for a gift card, never for
    anything else). A single leg's entry written before entries named their payment has none: its
    method and the provider's record (`leg_provider_payment`) still say where it went."""
    method = entry.destination.external_id if entry.destination_id else None
    store_credit = entry.gateway == RefundEntry.Gateway.STORE_CREDIT
    legacy = legs == 1 and entry.payment_id is None
    checks = [
        _check(
            "leg_payment",
            entry.payment_id == leg.get("payment") or legacy,
            f"payment #{leg.get('payment')}" if leg.get("payment") is not None else "no payment (store credit)",
            f"payment #{entry.payment_id}" if entry.payment_id is not None else "no payment",
        ),
        _check("leg_method", method == leg.get("method"), leg.get("method"), method),
        _check(
            "leg_amount", str(entry.effective_amount) == leg.get("amount"), leg.get("amount"), entry.effective_amount
        ),
        _check(
            "leg_tender",
            # Shopify refunds a gift card leg itself, on the gift card's own transaction.
            entry.gateway == RefundEntry.Gateway.SHOPIFY
            or store_credit == (leg.get("kind") == PaymentMethod.Kind.GIFT_CARD),
            "store credit" if leg.get("kind") == PaymentMethod.Kind.GIFT_CARD else "the provider or by hand",
            entry.gateway,
        ),
    ]
    return _numbered(checks, index if legs > 1 else None)


def _provider_checks(
    *, request: ApprovalRequest, entry: RefundEntry, leg: dict | None, index: int | None
) -> list[dict]:
    """The provider's record of one leg's refund against the ledger's (none for manual / store
    credit), and against the leg the request names: refunded on that leg's payment, no other, for
    exactly that leg's amount."""
    if entry.gateway not in (RefundEntry.Gateway.STRIPE, RefundEntry.Gateway.SHOPIFY):
        return []
    record = refund_entry_provider_record(entry_id=entry.pk)
    if record is None:
        return _numbered([_check("provider_has_refund", False, entry.provider_ref or "a provider refund", None)], index)
    checks = []
    if leg is not None:
        payment = Payment.objects.filter(pk=leg.get("payment"), order_id=request.order_id).first()
        expected = payment.payment_ref if payment is not None else None
        # Evidence names the payment by its id: references stay out of stored verdicts (redacted data).
        checks.append(
            _check(
                "leg_provider_payment",
                expected is not None and expected in record.payment_refs,
                f"payment #{leg.get('payment')}",
                "that payment" if expected in record.payment_refs else "another payment",
            )
        )
    amount = Decimal(str(leg["amount"])) if leg is not None else request.amount
    checks += [
        _check(
            "provider_refund_id", record.provider_ref == entry.provider_ref, entry.provider_ref, record.provider_ref
        ),
        _check("provider_status", record.status == RefundStatus.SUCCEEDED, RefundStatus.SUCCEEDED, record.status),
        _check(
            "provider_amount",
            record.amount == amount and record.currency == request.currency,
            f"{amount} {request.currency}",
            f"{record.amount} {record.currency}",
        ),
        _check(
            "provider_metadata_approval",
            record.metadata.get("approval") == str(request.pk),
            str(request.pk),
            record.metadata.get("approval"),
        ),
    ]
    return _numbered(checks, index)


def approval_verify(*, request_id: int) -> dict:
    """Verify an executed approval against the ledger and record the verdict.

    An approved request becomes `executed` when the verdict is ok and `failed` otherwise; an
    executed one that no longer verifies becomes `failed`. A failure is logged at ERROR level and
    kept on the request with its evidence. Other statuses are only read. Sends refund_verified
    when the status changed."""
    request = ApprovalRequest.objects.select_related("policy").get(pk=request_id)
    verdict = approval_verdict(request=request)
    Status = ApprovalRequest.Status
    statuses = approval_request_entries(request=request).values_list("status", flat=True)
    if request.status == Status.APPROVED and RefundStatus.PENDING in list(statuses):
        return verdict  # the provider has not answered for every leg yet: nothing to judge
    if request.status == Status.APPROVED:
        new_status = Status.EXECUTED if verdict["ok"] else Status.FAILED
    elif request.status == Status.EXECUTED and not verdict["ok"]:
        new_status = Status.FAILED
    else:
        return verdict
    with transaction.atomic():
        moved = approval_request_transition(
            request=request, to=new_status, from_=request.status, verification=verdict, updated_at=timezone.now()
        )
        if not moved:
            return verdict  # someone else recorded a verdict meanwhile
        request.refresh_from_db()
        if not verdict["ok"]:
            logger.error(
                "approval %s failed verification: %s",
                request.pk,
                ", ".join(verdict["failed"]),
                extra={"approval": request.pk, "verification": verdict},
            )
        refund_verified.send(sender=ApprovalRequest, request=request, verdict=verdict)
    return verdict
