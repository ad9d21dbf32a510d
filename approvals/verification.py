"""The evaluator: separate code from the actor (approvals.execution.approval_execute).

It trusts nothing the actor recorded about itself. It re-reads the ledger and the policy the
request was made under and checks that exactly the approved refund was recorded: one entry
under the request's key, on that order, for exactly the approved amount and currency, to
exactly the approved payment method, the order's refunds within its total, the order within the
policy window when the request was made (unless a person's policy exception waived the window
as the policy allows), and the approvals the policy asked for, none by the filer.

Where the request names its tender leg (the order's payment, its method, the amount), the entry
must be that leg, paid the way that tender is paid, and the provider's refund must be on that
leg's payment (its reference as the ledger records it).

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

from .models import ApprovalRequest, ApprovalVote
from .signals import refund_verified

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
    entries = list(
        refund_entries_with_effective_amount(RefundEntry.objects.filter(idempotency_key=request.idempotency_key))
        .select_related("order", "destination")
        .prefetch_related("items__order_item")
    )
    checks.append(_check("one_entry_under_key", len(entries) == 1, 1, len(entries)))
    entry = entries[0] if len(entries) == 1 else None
    order = Order.objects.get(pk=request.order_id)

    checks.append(
        _check("args_match_hash", canonical_hash(args) == request.args_hash, request.args_hash, canonical_hash(args))
    )
    if entry is not None:
        checks.append(
            _check("entry_on_order", entry.order_id == request.order_id, order.external_id, entry.order.external_id)
        )
        checks.append(
            _check("entry_same_tenant", entry.tenant_id == request.tenant_id, request.tenant_id, entry.tenant_id)
        )
        checks.append(
            _check(
                "amount_exact",
                entry.amount == request.amount
                and entry.effective_amount == request.amount
                and str(request.amount) == str(args.get("amount")),
                request.amount,
                entry.effective_amount,
            )
        )
        checks.append(
            _check(
                "currency_exact",
                entry.currency == request.currency == args.get("currency"),
                request.currency,
                entry.currency,
            )
        )
        checks.append(
            _check("approval_ref", entry.approval_ref == str(request.pk), str(request.pk), entry.approval_ref)
        )
        checks.append(
            _check(
                "destination",
                entry.destination_kind == (args.get("destination") or "original"),
                args.get("destination") or "original",
                entry.destination_kind,
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
        checks.extend(_leg_checks(args=args, entry=entry))
        entry_items = sorted(ri.order_item.item_id for ri in entry.items.all() for _ in range(ri.quantity))
        checks.append(
            _check(
                "items_exact",
                entry_items == sorted(args.get("items") or []),
                sorted(args.get("items") or []),
                entry_items,
            )
        )
        if request.ledger_entry_id is not None:
            checks.append(
                _check(
                    "entry_recorded_on_request", request.ledger_entry_id == entry.pk, request.ledger_entry_id, entry.pk
                )
            )
        checks.append(
            _check("entry_succeeded", entry.status == RefundStatus.SUCCEEDED, RefundStatus.SUCCEEDED, entry.status)
        )
        checks.extend(_provider_checks(request=request, entry=entry))

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
        "idempotency_key": request.idempotency_key,
        "order": order.external_id,
        "amount": str(request.amount),
        "currency": request.currency,
        "failed": [c["name"] for c in checks if not c["ok"]],
        "checks": checks,
        "verified_at": timezone.now().isoformat(),
    }


def _leg_checks(*, args: dict, entry: RefundEntry) -> list[dict]:
    """The ledger's entry against the tender leg the request names (requests made before legs were
    named, and orders with no recorded payment, name none): the same method, the same amount, and
    paid the way that tender is paid (store credit for a gift card, never for anything else)."""
    legs = args.get("legs") or []
    if not legs:
        return []
    leg = legs[0]
    method = entry.destination.external_id if entry.destination_id else None
    store_credit = entry.gateway == RefundEntry.Gateway.STORE_CREDIT
    return [
        _check("leg_one", len(legs) == 1, 1, len(legs)),
        _check("leg_method", method == leg.get("method"), leg.get("method"), method),
        _check(
            "leg_amount", str(entry.effective_amount) == leg.get("amount"), leg.get("amount"), entry.effective_amount
        ),
        _check(
            "leg_tender",
            store_credit == (leg.get("kind") == PaymentMethod.Kind.GIFT_CARD),
            "store credit" if leg.get("kind") == PaymentMethod.Kind.GIFT_CARD else "the provider or by hand",
            entry.gateway,
        ),
    ]


def _provider_checks(*, request: ApprovalRequest, entry: RefundEntry) -> list[dict]:
    """The provider's record of the refund against the ledger's (none for manual / store credit),
    and against the leg the request names: refunded on that leg's payment, no other."""
    if entry.gateway != RefundEntry.Gateway.STRIPE:
        return []
    record = refund_entry_provider_record(entry_id=entry.pk)
    if record is None:
        return [_check("provider_has_refund", False, entry.provider_ref or "a provider refund", None)]
    leg_checks = []
    legs = (request.args or {}).get("legs") or []
    if legs:
        payment = Payment.objects.filter(pk=legs[0].get("payment"), order_id=request.order_id).first()
        expected = payment.payment_ref if payment is not None else None
        # Evidence names the payment by its id: references stay out of stored verdicts (redacted data).
        leg_checks.append(
            _check(
                "leg_provider_payment",
                expected is not None and expected in record.payment_refs,
                f"payment #{legs[0].get('payment')}",
                "that payment" if expected in record.payment_refs else "another payment",
            )
        )
    return leg_checks + [
        _check(
            "provider_refund_id", record.provider_ref == entry.provider_ref, entry.provider_ref, record.provider_ref
        ),
        _check("provider_status", record.status == RefundStatus.SUCCEEDED, RefundStatus.SUCCEEDED, record.status),
        _check(
            "provider_amount",
            record.amount == request.amount and record.currency == request.currency,
            f"{request.amount} {request.currency}",
            f"{record.amount} {record.currency}",
        ),
        _check(
            "provider_metadata_approval",
            record.metadata.get("approval") == str(request.pk),
            str(request.pk),
            record.metadata.get("approval"),
        ),
    ]


def approval_verify(*, request_id: int) -> dict:
    """Verify an executed approval against the ledger and record the verdict.

    An approved request becomes `executed` when the verdict is ok and `failed` otherwise; an
    executed one that no longer verifies becomes `failed`. A failure is logged at ERROR level and
    kept on the request with its evidence. Other statuses are only read. Sends refund_verified
    when the status changed."""
    request = ApprovalRequest.objects.select_related("policy").get(pk=request_id)
    verdict = approval_verdict(request=request)
    Status = ApprovalRequest.Status
    entry_status = RefundEntry.objects.filter(idempotency_key=request.idempotency_key).values_list("status", flat=True)
    if request.status == Status.APPROVED and list(entry_status) == [RefundStatus.PENDING]:
        return verdict  # the provider has not answered yet: nothing to judge
    if request.status == Status.APPROVED:
        new_status = Status.EXECUTED if verdict["ok"] else Status.FAILED
    elif request.status == Status.EXECUTED and not verdict["ok"]:
        new_status = Status.FAILED
    else:
        return verdict
    with transaction.atomic():
        updated = ApprovalRequest.objects.filter(pk=request.pk, status=request.status).update(
            status=new_status, verification=verdict, updated_at=timezone.now()
        )
        if updated != 1:
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
