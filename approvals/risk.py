"""Refund-abuse signals as rules of the versioned policy (`RefundPolicy.risk_rules`), derived by
the gate from the ledger, never from what the model or the ticket says.

A rule that trips escalates the draft to a person with a reason in plain words; the figures it
read are a plain dict on the verdict (`GateVerdict.risk`), so a person and the decision record
see the numbers the runtime saw. Every rule is optional: a policy without `risk_rules` checks
none. The rules:

- `max_refunds_per_customer` / `max_refund_amount_per_customer`: the customer's refunds across
  all their orders in the last `window_days` (ledger entries that count against an order, and
  approval requests not yet paid: money possibly out), this one included;
- `max_open_tickets_per_order`: tickets on the order not yet finished, this one included (the
  caller counts them: tickets are not the gate's);
- `unpaid_destination_kinds`: a refund to a method of one of these kinds that the customer
  never paid with, on any order.
"""

from dataclasses import dataclass
from datetime import datetime, timedelta
from decimal import Decimal

from django.db.models import Count, Sum

from ledger.models import Order, Payment, PaymentMethod, RefundEntry
from ledger.models.refunds import COUNTING_STATUSES
from ledger.money import ZERO, money_parse

from .models import ApprovalRequest
from .risk_rules import DEFAULT_WINDOW_DAYS, risk_rules_validate

# Requests whose money may still go out without a ledger entry yet.
_IN_FLIGHT = ("pending", "approved")


@dataclass(frozen=True)
class RiskCheck:
    figures: dict  # what the rules read, as plain JSON values
    codes: list[str]
    reasons: list[str]


def risk_check(
    *,
    order: Order,
    policy,
    amount: Decimal,
    method: PaymentMethod | None,
    open_tickets_on_order: int,
    now: datetime,
) -> RiskCheck:
    """The policy's risk rules on a refund of `amount` on `order` to `method`: the figures read
    and the rules tripped. Reads only: the ledger, the approval requests and the caller's count
    of open tickets."""
    rules = risk_rules_validate(policy.risk_rules or {})
    if not rules:
        return RiskCheck(figures={}, codes=[], reasons=[])
    window_days = rules.get("window_days", DEFAULT_WINDOW_DAYS)
    since = now - timedelta(days=window_days)
    customer = order.customer
    entries = RefundEntry.objects.filter(
        order__customer_id=order.customer_id,
        currency=order.currency,
        status__in=COUNTING_STATUSES,
        created_at__gte=since,
    ).aggregate(count=Count("id"), amount=Sum("amount"))
    in_flight = ApprovalRequest.objects.filter(
        order__customer_id=order.customer_id,
        currency=order.currency,
        status__in=_IN_FLIGHT,
        ledger_entry__isnull=True,
        created_at__gte=since,
    ).aggregate(count=Count("id"), amount=Sum("amount"))
    count = entries["count"] + in_flight["count"]
    refunded = (entries["amount"] or ZERO) + (in_flight["amount"] or ZERO)
    paid_with = (
        None
        if method is None
        else Payment.objects.filter(order__customer_id=order.customer_id, payment_method=method).exists()
    )
    figures = {
        "policy_version": policy.version,
        "window_days": window_days,
        "customer": customer.external_id,
        "customer_refunds_in_window": count,
        "customer_refunded_in_window": str(refunded),
        "currency": order.currency,
        "with_this_refund": {"count": count + 1, "amount": str(refunded + amount)},
        "open_tickets_on_order": open_tickets_on_order,
        "destination_method": method.external_id if method else None,
        "destination_paid_with": paid_with,
    }
    codes, reasons = [], []
    limit = rules.get("max_refunds_per_customer")
    if limit is not None and count + 1 > limit:
        codes.append("risk_customer_refund_count")
        reasons.append(
            f"Customer {customer.external_id} had {count} refund(s) in the last {window_days} days across their "
            f"orders; this would be refund {count + 1}, above the {limit} {policy.version} allows without a person."
        )
    limit = rules.get("max_refund_amount_per_customer")
    if limit is not None and refunded + amount > money_parse(limit):
        codes.append("risk_customer_refund_amount")
        reasons.append(
            f"Customer {customer.external_id} had {refunded} {order.currency} refunded in the last {window_days} "
            f"days; with this {amount} it would be {refunded + amount}, above the {limit} {policy.version} allows "
            "without a person."
        )
    limit = rules.get("max_open_tickets_per_order")
    if limit is not None and open_tickets_on_order > limit:
        codes.append("risk_open_tickets_on_order")
        reasons.append(
            f"Order {order.external_id} has {open_tickets_on_order} open tickets (this one included); "
            f"{policy.version} allows {limit} at a time without a person."
        )
    kinds = rules.get("unpaid_destination_kinds") or []
    if method is not None and method.kind in kinds and not paid_with:
        codes.append("risk_unpaid_destination")
        reasons.append(
            f"The refund would go to {method.kind} {method.external_id}, which customer {customer.external_id} "
            "never paid with."
        )
    return RiskCheck(figures=figures, codes=codes, reasons=reasons)
