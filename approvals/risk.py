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

import functools
from dataclasses import dataclass
from datetime import datetime, timedelta
from decimal import Decimal

from django.db.models import BigIntegerField, CharField, DateTimeField, Exists, F, Func, OuterRef, Subquery, Value

from ledger.models import Customer, Order, Payment, PaymentMethod, RefundEntry
from ledger.models.refunds import COUNTING_STATUSES
from ledger.money import ZERO, money_parse

from .models import ApprovalRequest
from .reason_words import method_kind_words
from .risk_rules import DEFAULT_WINDOW_DAYS, risk_rules_validate

# Requests whose money may still go out without a ledger entry yet.
_IN_FLIGHT = ("pending", "approved")
# The types of the outer query's aliases (risk_check), made once rather than at every check.
_CURRENCY, _SINCE, _METHOD = CharField(), DateTimeField(), BigIntegerField()


def _scalar(queryset) -> Subquery:
    """An aggregate of `queryset` as a subquery of one value (its `value` annotation over all rows:
    one row whatever matches, so no LIMIT)."""
    return Subquery(queryset.order_by().values("value"))


@functools.cache
def _figures() -> dict:
    """The risk figures of a customer as subqueries of the customer's row, built once per process
    (building them cost more than running them): the currency, the window's start and the
    destination method are the outer query's aliases (`risk_check`), so only the query is kept,
    never an answer. Refunds are the ledger's entries that count against an order, and approval
    requests not yet paid (money possibly out)."""
    mine = {"order__customer_id": OuterRef("pk"), "currency": OuterRef("risk_currency")}
    since = OuterRef("risk_since")
    entries = RefundEntry.objects.filter(**mine, status__in=COUNTING_STATUSES, created_at__gte=since)
    in_flight = ApprovalRequest.objects.filter(
        **mine, status__in=_IN_FLIGHT, ledger_entry__isnull=True, created_at__gte=since
    )
    paid = Payment.objects.filter(order__customer_id=OuterRef("pk"), payment_method_id=OuterRef("risk_method"))
    return {
        "entries_count": _scalar(entries.annotate(value=Func(F("id"), function="COUNT"))),
        "entries_amount": _scalar(entries.annotate(value=Func(F("amount"), function="SUM"))),
        "requests_count": _scalar(in_flight.annotate(value=Func(F("id"), function="COUNT"))),
        "requests_amount": _scalar(in_flight.annotate(value=Func(F("amount"), function="SUM"))),
        # Read only when a method is named (with none, `risk_method` is NULL and matches nothing).
        "paid_with": Exists(paid),
    }


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
    open_tickets_on_order,
    now: datetime,
) -> RiskCheck:
    """The policy's risk rules on a refund of `amount` on `order` to `method`: the figures read
    and the rules tripped. Reads only, in one query: the ledger, the approval requests and the
    caller's count of open tickets (a number, or an expression the query evaluates, so the count
    is as fresh as the other figures)."""
    rules = risk_rules_validate(policy.risk_rules or {})
    if not rules:
        return RiskCheck(figures={}, codes=[], reasons=[])
    window_days = rules.get("window_days", DEFAULT_WINDOW_DAYS)
    since = now - timedelta(days=window_days)
    customer = order.customer
    # One query for every figure: the rules run inside the agent's decision, whose statements
    # are budgeted (refundagent/tests/test_loop_persist.py). Its subqueries are built once per
    # process (_figures) and read this call's values from the outer query's aliases.
    row = (
        Customer.objects.filter(pk=order.customer_id)
        .alias(
            risk_currency=Value(order.currency, output_field=_CURRENCY),
            risk_since=Value(since, output_field=_SINCE),
            risk_method=Value(method.pk if method else None, output_field=_METHOD),
        )
        .annotate(
            **_figures(),
            open_tickets=open_tickets_on_order
            if hasattr(open_tickets_on_order, "resolve_expression")
            else Value(open_tickets_on_order),
        )
        .values("entries_count", "entries_amount", "requests_count", "requests_amount", "paid_with", "open_tickets")
        .get()
    )
    count = (row["entries_count"] or 0) + (row["requests_count"] or 0)
    refunded = (row["entries_amount"] or ZERO) + (row["requests_amount"] or ZERO)
    paid_with = None if method is None else row["paid_with"]
    open_tickets_on_order = row["open_tickets"]
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
    figures["destination_kind"] = method.kind if method else None
    figures["order"] = order.external_id
    codes, reasons = risk_rules_judge(rules=rules, figures=figures, amount=amount, policy_version=policy.version)
    return RiskCheck(figures=figures, codes=codes, reasons=reasons)


def risk_rules_judge(*, rules: dict, figures: dict, amount: Decimal, policy_version: str) -> tuple[list, list]:
    """The rules tripped by the figures (as `risk_check` read them): pure, so a policy replay
    judges a decision's recorded figures by a draft's limits (approvals.replay). A draft that
    changes the window cannot be judged so: the figures were counted over the old one."""
    count = figures["customer_refunds_in_window"]
    refunded = money_parse(figures["customer_refunded_in_window"])
    customer, currency, window_days = figures["customer"], figures["currency"], figures["window_days"]
    codes, reasons = [], []
    limit = rules.get("max_refunds_per_customer")
    if limit is not None and count + 1 > limit:
        codes.append("risk_customer_refund_count")
        reasons.append(
            f"Customer {customer} had {count} refund(s) in the last {window_days} days across their "
            f"orders; this would be refund {count + 1}, above the {limit} {policy_version} allows without a person."
        )
    limit = rules.get("max_refund_amount_per_customer")
    if limit is not None and refunded + amount > money_parse(limit):
        codes.append("risk_customer_refund_amount")
        reasons.append(
            f"Customer {customer} had {refunded} {currency} refunded in the last {window_days} "
            f"days; with this {amount} it would be {refunded + amount}, above the {limit} {policy_version} allows "
            "without a person."
        )
    limit = rules.get("max_open_tickets_per_order")
    open_tickets = figures["open_tickets_on_order"]
    if limit is not None and open_tickets > limit:
        codes.append("risk_open_tickets_on_order")
        reasons.append(
            f"Order {figures.get('order', '')} has {open_tickets} open tickets (this one included); "
            f"{policy_version} allows {limit} at a time without a person."
        )
    kinds = rules.get("unpaid_destination_kinds") or []
    kind = figures.get("destination_kind")
    if figures["destination_method"] is not None and kind in kinds and not figures["destination_paid_with"]:
        codes.append("risk_unpaid_destination")
        reasons.append(
            f"The refund would go to {method_kind_words(kind)} {figures['destination_method']}, which customer "
            f"{customer} never paid with."
        )
    return codes, reasons
