"""Approval requests: the exact action to approve (its canonical args), making one, the key of
a replacement, and the expiry sweep. Deciding them is approvals.services.decisions; executing them
approvals.services.execution."""

import re
from datetime import datetime
from decimal import Decimal

from django.conf import settings
from django.db import IntegrityError, transaction
from django.db.models import Q, Sum
from django.utils import timezone

from ledger.models import Order
from ledger.money import ZERO, money_check_currency
from ledger.selectors import order_refunded_total
from ledger.services import canonical_hash

from ..gate import GateVerdict, Outcome
from ..models import ApprovalRequest, RefundPolicy, threshold_rate_parse
from ..request_state import approval_request_transition
from ..signals import approval_expired

ISSUE_REFUND = "refunds.issue_refund"
# A policy exception is decided by this many distinct approvers at least, whatever the amount.
EXCEPTION_APPROVALS = 2


def refund_args_canonical(*, order: Order, verdict: GateVerdict, ticket_ref: int | None) -> dict:
    """The exact arguments `refunds.issue_refund` will be executed with. Hash these, show these,
    execute these: nothing else. `destination` is the kind ('original', 'gift_card'),
    `destination_method` the exact payment method's external id (None only when the order's
    payment recorded no method), `legs` the tender legs that receive the money (gate.py)."""
    return {
        "action": ISSUE_REFUND,
        "tenant": order.tenant.slug,
        "order": order.external_id,
        "customer": order.customer.external_id,
        "amount": str(verdict.allowed_amount),
        "currency": order.currency,
        "destination": verdict.destination,
        "destination_method": verdict.destination_method,
        "items": list(verdict.item_ids),
        "legs": list(verdict.legs),
        "policy_version": verdict.policy_version,
        "ticket": ticket_ref,
    }


def approval_request_create(
    *,
    order: Order,
    policy: RefundPolicy,
    verdict: GateVerdict,
    idempotency_key: str,
    requested_by=None,
    filed_by=None,
    ticket_ref: int | None = None,
    trace_id: str = "",
    fresh_key: bool = False,
    origin: str = ApprovalRequest.Origin.AGENT,
    policy_exception: bool = False,
    waived_rules: list[str] | tuple = (),
    proposal_reason: str = "",
) -> tuple[ApprovalRequest, bool]:
    """Create the one approval request for an eligible refund. Keyed: calling it again with the
    same idempotency key (a resumed run) returns the request already made, and False.

    `fresh_key=True` is for a caller whose key cannot exist yet (the agent's decision derives it
    from the draft it inserted in the same transaction): no savepoint, and a duplicate would be
    an IntegrityError that rolls the caller's transaction back.

    `policy_exception` (a person's proposal outside the policy's `waived_rules`,
    approvals.services.proposals) needs two distinct approvers at least, whatever the amount."""
    if verdict.outcome != Outcome.APPROVAL_REQUIRED or verdict.allowed_amount is None:
        raise ValueError("Only an eligible verdict becomes an approval request.")
    # Never a request that no provider can pay (the gate and the proposal refuse it first).
    money_check_currency(amount=verdict.allowed_amount, currency=order.currency)
    # No look-up first: the unique key decides (a replay is the rare path, and the insert in a
    # savepoint costs the common path one query less).
    args = refund_args_canonical(order=order, verdict=verdict, ticket_ref=ticket_ref)
    required = approval_required_count(
        order=order, policy=policy, amount=verdict.allowed_amount, refunded=order.total - verdict.refundable
    )
    if policy_exception:
        required = max(required, EXCEPTION_APPROVALS)
    fields = dict(
        tenant_id=order.tenant_id,
        action=ISSUE_REFUND,
        order=order,
        amount=verdict.allowed_amount,
        currency=order.currency,
        args=args,
        args_hash=canonical_hash(args),
        idempotency_key=idempotency_key,
        policy=policy,
        policy_version=policy.version,
        refundable_at_request=verdict.refundable,
        trace_id=str(trace_id),
        ticket_ref=ticket_ref,
        approver_role="finance",
        required_approvals=required,
        expires_at=timezone.now() + settings.APPROVAL_EXPIRY,
        requested_by=requested_by,
        filed_by=filed_by,
        origin=origin,
        policy_exception=policy_exception,
        waived_rules=list(waived_rules),
        proposal_reason=proposal_reason,
    )
    if fresh_key:
        return ApprovalRequest.objects.create(**fields), True
    try:
        with transaction.atomic():
            request = ApprovalRequest.objects.create(**fields)
    except IntegrityError:
        existing = ApprovalRequest.objects.filter(idempotency_key=idempotency_key).first()
        if existing is None:
            raise  # not a replay: another constraint refused the row
        return existing, False
    return request, True


def order_refund_exposure(*, order: Order, exclude_pk: int | None = None, refunded: Decimal | None = None) -> Decimal:
    """Everything already refunded or on its way out of `order`: the ledger's refunds (executed
    and external ones; `refunded` when the caller already knows it), approved requests not yet
    in the ledger (being paid out), and other requests still pending approval. The two-approver
    rule counts all of it, so splitting one refund into several requests does not split the
    dual control."""
    pending = order_requests_in_flight(order=order, exclude_pk=exclude_pk).aggregate(s=Sum("amount"))["s"] or ZERO
    return (order_refunded_total(order) if refunded is None else refunded) + pending


# Pending approval, or approved and not yet in the ledger (being paid out); built once.
_IN_FLIGHT = Q(status=ApprovalRequest.Status.PENDING) | Q(
    status=ApprovalRequest.Status.APPROVED, ledger_entry__isnull=True
)


def order_requests_in_flight(*, order: Order, exclude_pk: int | None = None):
    """The requests on `order` that count as on their way out: pending approval, or approved and
    not yet in the ledger (order_refund_exposure)."""
    in_flight = ApprovalRequest.objects.filter(_IN_FLIGHT, order=order)
    return in_flight if exclude_pk is None else in_flight.exclude(pk=exclude_pk)


def approval_required_count(
    *,
    order: Order,
    policy: RefundPolicy,
    amount: Decimal,
    exclude_pk: int | None = None,
    refunded: Decimal | None = None,
) -> int:
    """How many distinct approvers a refund of `amount` on `order` needs: the policy's count when
    it would take the order's refunds (see order_refund_exposure) above the threshold, else one.

    The threshold is money in its own currency. An order in another currency is converted at the
    rate the policy version recorded for it; without one, dual control cannot be judged, so the
    refund needs the approvals above the threshold."""
    return approvals_needed(
        policy=policy,
        currency=order.currency,
        order_total=order.total,
        amount=amount,
        exposure=lambda: order_refund_exposure(order=order, exclude_pk=exclude_pk, refunded=refunded),
    )


def approvals_needed(*, policy: RefundPolicy, currency: str, order_total: Decimal, amount: Decimal, exposure) -> int:
    """The dual-control rule on plain facts: `exposure()` returns what the order already has
    refunded or in flight, asked only when it matters. A policy replay passes the recorded one."""
    threshold = policy.two_approver_threshold
    if threshold is None:
        return 1
    rate = policy_threshold_rate(policy=policy, currency=currency)
    if rate is None:
        return policy.approvals_above_threshold

    def above(value: Decimal) -> bool:
        return value * rate > threshold

    # An order worth no more than the threshold can never move more than it: every request on it
    # is re-checked against what is still refundable before it is approved and executed.
    if not above(order_total):
        return 1
    if above(amount):
        return policy.approvals_above_threshold
    if above(exposure() + amount):
        return policy.approvals_above_threshold
    return 1


def policy_threshold_rate(*, policy: RefundPolicy, currency: str) -> Decimal | None:
    """How many units of the threshold's currency one unit of `currency` is worth: 1 in the
    threshold's own currency, the policy's recorded rate for another, None without one."""
    if currency == policy.two_approver_threshold_currency:
        return Decimal(1)
    return (
        threshold_rate_parse(policy.threshold_rates.get(currency)) if isinstance(policy.threshold_rates, dict) else None
    )


def approval_request_replacement_key(*, key: str) -> str:
    """The idempotency key of the replacement of the request keyed `key`: `<base>:r<n+1>`, the
    first one not taken."""
    match = re.fullmatch(r"(.*):r(\d+)", key)
    base, n = (match.group(1), int(match.group(2))) if match else (key, 0)
    candidate = f"{base}:r{n + 1}"
    while ApprovalRequest.objects.filter(idempotency_key=candidate).exists():
        n += 1
        candidate = f"{base}:r{n + 1}"
    return candidate


def approval_requests_expire(*, now: datetime | None = None) -> int:
    """Mark pending requests past their expiry `expired` (the periodic sweep). Each one by
    compare-and-set, so a decision racing the sweep wins or loses cleanly. Returns how many."""
    now = now or timezone.now()
    expired = 0
    due = ApprovalRequest.objects.filter(status=ApprovalRequest.Status.PENDING, expires_at__lte=now)
    for request_id in due.values_list("pk", flat=True).order_by("created_at")[:1000]:
        with transaction.atomic():
            moved = approval_request_transition(
                request=ApprovalRequest(pk=request_id),
                to=ApprovalRequest.Status.EXPIRED,
                when=Q(expires_at__lte=now),
                decided_at=now,
                updated_at=now,
                decision_note="Expired before finance decided.",
            )
            if not moved:
                continue
            request = ApprovalRequest.objects.get(pk=request_id)
            approval_expired.send(sender=ApprovalRequest, request=request)
            expired += 1
    return expired
