"""The deterministic policy gate: what the runtime allows, derived from the ledger and the
tenant's current policy, never from what the model or the ticket text claims.

The model's proposal and the customer's requested amount can only lower the allowed
amount, never raise it. Everything here is pure: no writes, so tests and evals call it
directly.
"""

from dataclasses import asdict, dataclass, field
from datetime import datetime
from decimal import Decimal

from ledger.exceptions import InvalidAmount
from ledger.models import Order, PaymentMethod
from ledger.money import ZERO, money_check_currency
from ledger.selectors import RefundPosition, order_refund_position
from ledger.telemetry import traced

from .models import RefundPolicy
from .reply_claims import reply_money_claims


class Outcome:
    APPROVAL_REQUIRED = "approval_required"
    ESCALATED = "escalated"
    DENIED = "denied"


@dataclass(frozen=True)
class Proposal:
    """What the model drafted (refunds.create_draft), already schema-validated."""

    recommendation: str  # refund / escalate / deny / request_info
    amount: Decimal | None
    policy_version: str
    customer_reply: str = ""
    # 'original' or 'gift_card'; None: the model did not say (the ticket's choice stands).
    destination: str | None = None


@dataclass
class GateVerdict:
    outcome: str
    currency: str
    refundable: Decimal
    allowed_amount: Decimal | None = None
    policy_version: str | None = None
    destination: str = "original"  # the kind: 'original', 'gift_card' (or 'other', never allowed)
    destination_method: str | None = None  # the exact payment method's external id
    destination_method_kind: str | None = None  # its kind: card, paypal, gift_card
    item_ids: list[str] = field(default_factory=list)
    codes: list[str] = field(default_factory=list)
    reasons: list[str] = field(default_factory=list)

    @property
    def reason(self) -> str:
        return " ".join(self.reasons)

    def as_dict(self) -> dict:
        data = asdict(self)
        for key in ("refundable", "allowed_amount"):
            data[key] = None if data[key] is None else str(data[key])
        return data


def policy_current(tenant) -> RefundPolicy | None:
    """The tenant's current policy (RefundPolicy.objects.current), or None."""
    return RefundPolicy.objects.current_for(tenant)


def order_original_method(order: Order) -> PaymentMethod | None:
    """The payment method the order was paid with (its first recorded payment's), or None when
    the shop recorded none."""
    return PaymentMethod.objects.filter(payments__order=order).order_by("payments__id").first()


def decision_facts(*, tenant, order: Order) -> tuple[RefundPolicy | None, PaymentMethod | None]:
    """The tenant's current policy and the order's original payment method: what a decision on a
    draft reads besides the order's position (the agent's decision passes both to
    `policy_gate_evaluate`)."""
    return policy_current(tenant), order_original_method(order)


# `original` not given: read it.
_UNREAD = object()


def refund_destination_of(
    *, order: Order, refund_to: PaymentMethod | None, original=_UNREAD
) -> tuple[str, PaymentMethod | None]:
    """The destination kind and exact method of a refund on `order` chosen on the ticket:
    'original' is the order's own payment method (also when no method is named), 'gift_card' an
    existing gift card of the customer, 'other' any other method of theirs (no policy allows it).
    `original`: the order's original method when the caller has read it (`decision_facts`)."""
    if original is _UNREAD:
        original = order_original_method(order)
    if refund_to is None:
        return "original", original
    if original is not None and refund_to.pk == original.pk:
        return "original", refund_to
    if refund_to.kind == PaymentMethod.Kind.GIFT_CARD:
        return "gift_card", refund_to
    return "other", refund_to


def _verdict_attributes(verdict: "GateVerdict") -> dict:
    return {
        "refund.gate.outcome": verdict.outcome,
        "refund.gate.codes": verdict.codes,
        "refund.gate.allowed_amount": verdict.allowed_amount,
        "refund.gate.currency": verdict.currency,
        "refund.gate.policy_version": verdict.policy_version,
    }


@traced("refund.gate.verdict", result=_verdict_attributes)
def policy_gate_evaluate(
    *,
    order: Order,
    policy: RefundPolicy | None,
    proposal: Proposal,
    requested_amount: Decimal | None = None,
    requested_currency: str | None = None,
    item_ids: list[str] | None = None,
    refund_to: PaymentMethod | None = None,
    now: datetime,
    waive: frozenset[str] = frozenset(),
    original_method=_UNREAD,
    position: RefundPosition | None = None,
) -> GateVerdict:
    """Decide what a draft may lead to. Pure: reads the ledger, writes nothing.

    `refund_to` is the payment method the ticket names (resolved by the caller, tenant-scoped);
    None means the order's original payment method. The verdict names the exact method.

    `waive` names policy rules a person's approved-by-two exception goes outside ('window',
    'order_status'; approvals.proposals checks they are the policy's `waivable_rules`). The hard
    limits (refundable amount, currency, the customer's own methods) are checked regardless.

    `original_method`: the order's original payment method, when the caller read it with the
    policy (`decision_facts`); else it is read here. `position`: the order's refund position when
    the caller read it (the decision records it; a policy replay passes the recorded one); else
    it is read here."""
    if position is None:
        position = order_refund_position(order)
    item_ids = list(item_ids or [])
    destination, method = refund_destination_of(order=order, refund_to=refund_to, original=original_method)
    verdict = GateVerdict(
        outcome=Outcome.APPROVAL_REQUIRED,
        currency=order.currency,
        refundable=position.refundable,
        policy_version=policy.version if policy else None,
        destination=destination,
        destination_method=method.external_id if method else None,
        destination_method_kind=method.kind if method else None,
        item_ids=item_ids,
    )

    def stop(outcome: str, code: str, reason: str) -> GateVerdict:
        verdict.outcome = outcome
        verdict.allowed_amount = None
        verdict.codes.append(code)
        verdict.reasons.append(reason)
        return verdict

    if refund_to is not None and refund_to.customer_id != order.customer_id:
        return stop(
            Outcome.DENIED,
            "foreign_destination",
            f"Payment method {refund_to.external_id} is not one of customer {order.customer.external_id}'s.",
        )
    if policy is None or policy.status != RefundPolicy.Status.PUBLISHED:
        return stop(
            Outcome.ESCALATED, "policy_missing", "No current refund policy for this tenant: a person must decide."
        )
    if not proposal.policy_version:
        return stop(Outcome.ESCALATED, "citation_missing", "The draft cites no policy version.")
    if proposal.policy_version != policy.version:
        return stop(
            Outcome.ESCALATED,
            "citation_stale",
            f"The draft cites {proposal.policy_version}, but the current policy is {policy.version}.",
        )
    # Only the outcome's own reply may speak of money moving (refundagent/replies.py).
    if claims := reply_money_claims(proposal.customer_reply):
        return stop(
            Outcome.ESCALATED,
            "reply_promises_payment",
            f"The customer reply draft promises a payment before finance approved one: {claims[0]}.",
        )

    eligible, code, reason = _eligibility(order, policy, position, item_ids, now, waive)
    if proposal.recommendation != "refund":
        if proposal.recommendation == "deny" and not eligible:
            return stop(Outcome.DENIED, code, reason)
        return stop(
            Outcome.ESCALATED,
            f"model_recommends_{proposal.recommendation}",
            f"The agent recommends '{proposal.recommendation}'."
            + ("" if eligible else f" {reason}")
            + " A person decides.",
        )
    if not eligible:
        outcome = Outcome.DENIED if code in {"fully_refunded", "items_already_refunded"} else Outcome.ESCALATED
        return stop(outcome, code, reason)
    if requested_currency and requested_currency != order.currency:
        return stop(
            Outcome.ESCALATED,
            "currency_mismatch",
            f"The request is in {requested_currency}, the order in {order.currency}.",
        )
    if proposal.destination is not None and proposal.destination != verdict.destination:
        return stop(
            Outcome.ESCALATED,
            "destination_mismatch",
            f"The draft sends the refund to '{proposal.destination}', but the ticket asks for '{verdict.destination}'"
            f" ({verdict.destination_method or 'the original payment method'}): a person decides.",
        )
    destinations = policy.item_refund_destinations if item_ids else policy.full_refund_destinations
    if verdict.destination not in destinations:
        return stop(
            Outcome.ESCALATED,
            "destination_not_allowed",
            f"Refunds to '{verdict.destination}' ({verdict.destination_method}) are not allowed by {policy.version} for "
            f"{'item refunds' if item_ids else 'full refunds'} (allowed: {', '.join(destinations) or 'none'}).",
        )

    cap = position.refundable
    if item_ids:
        cap = min(cap, position.items_match(item_ids).value)
    allowed = cap
    for limit, label in ((requested_amount, "requested amount"), (proposal.amount, "drafted amount")):
        if limit is not None and limit < allowed:
            allowed = limit
        elif limit is not None and limit > cap:
            verdict.codes.append(f"{label.split()[0]}_capped")
            verdict.reasons.append(f"The {label} {limit} was capped at the refundable {cap} {order.currency}.")
    if allowed <= ZERO:
        return stop(Outcome.DENIED, "nothing_refundable", "There is nothing to refund.")
    try:
        money_check_currency(amount=allowed, currency=order.currency)
    except InvalidAmount:
        # A requested or drafted amount finer than the currency (JPY 120.50): no provider can pay
        # it, and rounding it is a person's call, not the runtime's.
        return stop(
            Outcome.ESCALATED,
            "amount_precision",
            f"{allowed} {order.currency} has more decimal places than {order.currency} has: a person decides.",
        )
    verdict.allowed_amount = allowed
    verdict.reasons.append(
        f"Eligible under {policy.version}: {allowed} {order.currency} of {position.refundable} still refundable; "
        "finance must approve."
    )
    return verdict


def _eligibility(order, policy, position, item_ids, now, waive=frozenset()) -> tuple[bool, str, str]:
    statuses = policy.item_refund_statuses if item_ids else policy.full_refund_statuses
    kind = "item refunds" if item_ids else "refunds"
    if order.status not in statuses and "order_status" not in waive:
        return (
            False,
            "status_not_eligible",
            f"Order {order.external_id} is {order.status}; {policy.version} allows {kind} only for "
            f"{', '.join(statuses) or 'no'} orders.",
        )
    if policy.window_days is not None and "window" not in waive:
        age_days = (now - order.placed_at).days
        if age_days > policy.window_days:
            return (
                False,
                "outside_window",
                f"Order {order.external_id} was placed {age_days} days ago, outside the {policy.window_days}-day "
                f"window of {policy.version}.",
            )
    if position.refundable <= ZERO:
        return False, "fully_refunded", f"Order {order.external_id} is already fully refunded."
    if item_ids:
        match = position.items_match(item_ids)
        unmatched = match.unmatched
        if match.not_on_order:
            return False, "items_not_on_order", f"Items {', '.join(unmatched)} are not on order {order.external_id}."
        if match.over_quantity:
            # More units named than the order has: nothing says they were refunded (a person
            # reads what the customer meant; the ledger is not consulted for a false reason).
            return (
                False,
                "items_exceed_quantity",
                "; ".join(
                    f"Item {item_id} is named {named} times, but order {order.external_id} has {ordered} unit(s) of it"
                    for item_id, (named, ordered) in match.over_quantity.items()
                )
                + ".",
            )
        if unmatched:
            # Only now do the ledger's refunded units explain it.
            refunded = {line.item_id: 0 for line in position.lines}
            for line in position.lines:
                refunded[line.item_id] += line.refunded_quantity
            return (
                False,
                "items_already_refunded",
                f"Items {', '.join(dict.fromkeys(unmatched))} were already refunded ("
                + ", ".join(f"{item_id}: {refunded[item_id]} unit(s)" for item_id in dict.fromkeys(unmatched))
                + ").",
            )
    return True, "eligible", "eligible"
