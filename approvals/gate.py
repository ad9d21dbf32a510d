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
from ledger.selectors import (
    PaymentReturnable,
    RefundPosition,
    order_open_disputes,
    order_payments_returnable,
    order_refund_position,
)
from ledger.telemetry import traced

from .models import RefundPolicy
from .reason_words import destination_words, destinations_words, recommendation_sentence
from .reply_claims import reply_money_claims
from .risk import RiskCheck, risk_rules_judge
from .risk import risk_check as risk_rules_check
from .risk_rules import risk_rules_validate


class Outcome:
    APPROVAL_REQUIRED = "approval_required"
    ESCALATED = "escalated"
    DENIED = "denied"


# The only facts that end a ticket denied: the gate derives them from the ledger itself, so no
# model output can bring them about. Anything else that would refuse goes to a person.
DENYING_FACTS = frozenset({"fully_refunded", "items_already_refunded"})


@dataclass(frozen=True)
class Proposal:
    """What the model drafted (refunds.create_draft), already schema-validated."""

    recommendation: str  # refund / escalate / deny / request_info
    amount: Decimal | None
    policy_version: str
    customer_reply: str = ""
    # 'original' or 'gift_card'; None: the model did not say (the ticket's choice stands).
    destination: str | None = None
    # The item ids the draft names (None: the whole scope the ticket was filed for). They narrow
    # a whole-order ticket only where the policy's item rules say what its whole-order rules say.
    items: list[str] | None = None
    # A second check's finding that the reply speaks of money moving (refundagent.agent.reply_check),
    # made outside the gate; '' when it found nothing or did not run.
    reply_model_claim: str = ""


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
    # The tender legs that receive the money (docs/payments.md, "Split tender"): per leg the order's
    # payment (its id; None for store credit to a gift card the order was not paid with), its
    # method and kind, the amount and what that payment could still return. The payment's provider
    # reference is read from the ledger (it stays redacted on screens). Exactly what the payout
    # executes and the evaluator checks.
    legs: list[dict] = field(default_factory=list)
    codes: list[str] = field(default_factory=list)
    reasons: list[str] = field(default_factory=list)
    # The ledger's facts the gate read beside the position (open disputes, what each payment can
    # still return), as plain data: a decision record keeps them, so that a replay decides on
    # what was true then (approvals.decision_records). Not part of the verdict's dict.
    facts: dict = field(default_factory=dict, repr=False)
    # The risk figures the policy's risk rules read (approvals.risk), as plain JSON values; empty
    # when no rule was checked.
    risk: dict = field(default_factory=dict)

    @property
    def reason(self) -> str:
        return " ".join(self.reasons)

    def as_dict(self) -> dict:
        data = asdict(self)
        data.pop("facts")
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


@dataclass(frozen=True)
class DecisionReads:
    """What the agent's decision reads besides the order's position, in two queries."""

    policy: RefundPolicy | None
    original_method: PaymentMethod | None
    payments: list[PaymentReturnable]


def decision_reads(*, tenant, order: Order) -> DecisionReads:
    """The tenant's current policy, and the order's payments with what each can still return,
    whose first method is the order's original one (`order_original_method`, from the same
    read): the agent's decision passes all three to `policy_gate_evaluate`."""
    payments = order_payments_returnable(order)
    original = next((payment.payment_method for payment in payments if payment.payment_method is not None), None)
    return DecisionReads(policy=policy_current(tenant), original_method=original, payments=payments)


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
    if order.payments.filter(payment_method=refund_to).exists():
        return "original", refund_to  # the order was paid in part with it (split tender)
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
    disputes: list | None = None,
    payments: list[PaymentReturnable] | None = None,
    scope_open: bool = False,
    risk_check: bool = False,
    open_tickets_on_order=1,
    risk_figures: dict | None = None,
) -> GateVerdict:
    """Decide what a draft may lead to. Pure: reads the ledger, writes nothing.

    `refund_to` is the payment method the ticket names (resolved by the caller, tenant-scoped);
    None means the order's original payment method. The verdict names the exact method.

    `waive` names policy rules a person's approved-by-two exception goes outside ('window',
    'order_status'; approvals.services.proposals checks they are the policy's `waivable_rules`). The hard
    limits (refundable amount, currency, the customer's own methods) are checked regardless.

    `original_method`: the order's original payment method, when the caller read it with the
    policy (`decision_facts`); else it is read here.

    `item_ids` are the items the ticket was filed for (none: the whole order); the proposal's
    items narrow that scope only where the item rules equal the whole-order rules. `scope_open`:
    the ticket was filed without an order, so the draft's order and items identify what the
    filer left open (any rules apply), but items the model chose still never deny.

    `risk_check`: check the policy's risk rules (approvals.risk) on an otherwise eligible draft;
    the agent's decision asks for it, with its count of the order's open tickets (a number or a
    query expression, approvals.risk). Not at a
    request's re-check (the request itself would count) nor on a person's proposal.

    `position`: the order's refund position when the caller read it (the decision records it; a
    policy replay passes the recorded one); else it is read here. `disputes` (the order's open
    disputes) and `payments` (what each of its payments can still return) likewise: the agent's
    decision passes the payments it read (`decision_reads`), a replay the recorded ones, and the risk figures recorded (`risk_figures`), which it judges by
    the policy's risk rules instead of reading them again."""
    if position is None:
        position = order_refund_position(order)
    filed_items = list(item_ids or [])
    # The ticket's scope is the filer's; the draft's items narrow a whole-order ticket only.
    narrowed = not filed_items and bool(proposal.items)
    item_ids = list(proposal.items) if narrowed else filed_items
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
    if payments is None:
        payments = order_payments_returnable(order)
    if disputes is None:
        # The payments say whether any is disputed; the disputes' own rows are read only then (a
        # dispute is always on one of the order's payments).
        disputes = order_open_disputes(order) if any(payment.disputed for payment in payments) else []
    verdict.facts["disputes"] = [
        {
            "provider_ref": dispute.provider_ref,
            "status": dispute.status,
            "reason": dispute.reason,
            "is_charge_refundable": dispute.is_charge_refundable,
        }
        for dispute in disputes
    ]
    if disputes:
        # The customer's bank may already have returned the money (a chargeback): a refund now
        # could pay it twice. Stripe's `is_charge_refundable` says whether it could be refunded at all.
        dispute = disputes[0]
        return stop(
            Outcome.ESCALATED,
            "disputed",
            f"A payment of order {order.external_id} is disputed ({dispute.provider_ref}: {dispute.status}"
            f"{', ' + dispute.reason if dispute.reason else ''}); the provider says the charge is "
            f"{'still' if dispute.is_charge_refundable else 'not'} refundable. A person decides.",
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
    claims = [str(claim) for claim in reply_money_claims(proposal.customer_reply)]
    if claims or proposal.reply_model_claim:
        return stop(
            Outcome.ESCALATED,
            "reply_promises_payment",
            "The customer reply draft promises a payment before finance approved one: "
            f"{claims[0] if claims else proposal.reply_model_claim}.",
        )

    if narrowed and not scope_open:
        differ = _scope_rules_differ(order=order, policy=policy, destination=verdict.destination, waive=waive)
        if differ:
            verdict.item_ids = filed_items
            return stop(
                Outcome.ESCALATED,
                "scope_not_filed",
                f"The ticket was filed for the whole order; the draft names items {', '.join(item_ids)}, which "
                f"{policy.version} treats under other rules ({differ}): a person decides.",
            )

    eligible, code, reason = _eligibility(order, policy, position, item_ids, now, waive)
    # A denial rests on the gate's own facts about the scope the filer set: items the model chose,
    # or the order it picked on a ticket filed without one, cannot make one.
    gate_denies = (
        not eligible and code in DENYING_FACTS and not scope_open and not (narrowed and code != "fully_refunded")
    )
    if proposal.recommendation != "refund":
        if proposal.recommendation == "deny" and gate_denies:
            return stop(Outcome.DENIED, code, reason)
        return stop(
            Outcome.ESCALATED,
            f"model_recommends_{proposal.recommendation}",
            recommendation_sentence(proposal.recommendation)
            + ("" if eligible else f" {reason}")
            + ("" if proposal.recommendation == "escalate" else " A person decides."),
        )
    if not eligible:
        return stop(Outcome.DENIED if gate_denies else Outcome.ESCALATED, code, reason)
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
            f"The draft sends the refund to {destination_words(proposal.destination)}, but the ticket asks for "
            f"{destination_words(verdict.destination)}"
            f"{f' ({verdict.destination_method})' if verdict.destination_method else ''}: a person decides.",
        )
    destinations = policy.item_refund_destinations if item_ids else policy.full_refund_destinations
    if verdict.destination not in destinations:
        return stop(
            Outcome.ESCALATED,
            "destination_not_allowed",
            f"Refunds to {destination_words(verdict.destination)}"
            f"{f' ({verdict.destination_method})' if verdict.destination_method else ''} are not allowed by "
            f"{policy.version} for {'item refunds' if item_ids else 'full refunds'} (allowed: "
            f"{destinations_words(destinations)}).",
        )

    cap, cap_words = refund_cap(position=position, item_ids=item_ids, currency=order.currency)
    allowed = cap
    for limit, label in ((requested_amount, "requested amount"), (proposal.amount, "drafted amount")):
        if limit is not None and limit < allowed:
            allowed = limit
        elif limit is not None and limit > cap:
            verdict.codes.append(f"{label.split()[0]}_capped")
            verdict.reasons.append(f"The {label} {limit} was capped at {cap_words}.")
    if cap <= ZERO:
        return stop(Outcome.DENIED, "nothing_refundable", "There is nothing to refund.")
    if allowed <= ZERO:
        # A zero drafted (or requested) amount on an eligible order is a refusal in disguise: only
        # a person may refuse what the ledger says is refundable.
        return stop(
            Outcome.ESCALATED,
            "amount_zero",
            f"The draft proposes {allowed} {order.currency} although {cap} {order.currency} is refundable under "
            f"{policy.version}: refusing is a person's decision.",
        )
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
    # 'original' with no method named: any of the order's payments may take it.
    verdict.facts["payments"] = [
        {
            "payment_id": payment.payment_id,
            "method_id": payment.method_id,
            "method": payment.method,
            "kind": payment.kind,
            "paid": str(payment.paid),
            "returnable": str(payment.returnable),
        }
        for payment in payments
    ]
    legs, why = _refund_legs(
        order=order, destination=destination, method=refund_to, amount=allowed, payments=payments, items=item_ids
    )
    if why:
        return stop(Outcome.ESCALATED, "split_tender", why)
    verdict.legs = legs
    if legs:
        verdict.destination_method, verdict.destination_method_kind = legs[0]["method"], legs[0]["kind"]
    if risk_figures:
        codes, reasons = risk_rules_judge(
            rules=risk_rules_validate(policy.risk_rules or {}),
            figures=risk_figures,
            amount=allowed,
            policy_version=policy.version,
        )
        check = RiskCheck(figures=risk_figures, codes=codes, reasons=reasons)
    elif risk_check:
        check = risk_rules_check(
            order=order,
            policy=policy,
            amount=allowed,
            method=method,
            open_tickets_on_order=open_tickets_on_order,
            now=now,
        )
    if risk_figures or risk_check:
        verdict.risk = check.figures
        if check.codes:
            verdict.outcome = Outcome.ESCALATED
            verdict.codes.extend(check.codes)
            verdict.reasons.extend([*check.reasons, "A person decides."])
            return verdict
    verdict.allowed_amount = allowed
    verdict.reasons.append(
        f"Eligible under {policy.version}: {allowed} {order.currency} of {position.refundable} still refundable; "
        "finance must approve."
    )
    return verdict


def _refund_legs(
    *,
    order: Order,
    destination: str,
    method,
    amount: Decimal,
    payments: list[PaymentReturnable],
    items: list[str],
) -> tuple[list[dict], str]:
    """The tender legs that receive `amount`, or why they cannot (a person splits it).

    A refund to the order's own payments ('original') goes back to one payment that can still
    return all of it when there is one: the one the ticket names, else the first made. With no
    payment named and none able to return it whole, it is split over the order's payments in the
    order they were made (by id), each giving back what it still can, until the amount is covered
    (docs/payments.md, "Split tender"). Never more than a payment can return (a charge cannot give
    back more than it took). A payment the ticket names is where the customer asked for the money:
    it is never topped up from another tender, and an item refund is never split (its units would
    sit on one leg only); both go to a person. A gift card the order was not paid with
    ('gift_card') takes store credit. An order with no recorded payment names no leg."""
    if destination != "original":  # a gift card the order was not paid with: store credit
        leg = {"payment": None, "method": method.external_id, "kind": method.kind, "amount": str(amount)}
        return [{**leg, "returnable": None}], ""
    if not payments:
        return [], ""
    # By the method's id at the shop, unique per customer (a replay's methods have no row).
    candidates = [p for p in payments if method is None or p.method == method.external_id]
    for payment in candidates:
        if payment.returnable >= amount:
            return [_leg(payment, amount)], ""
    listed = ", ".join(f"{p.method or p.kind} {p.returnable}" for p in candidates)
    together = sum((p.returnable for p in candidates), ZERO)
    if method is None and not items and together >= amount:
        legs, left = [], amount
        for payment in candidates:
            share = min(payment.returnable, left)
            if share > ZERO:
                legs.append(_leg(payment, share))
                left -= share
        return legs, ""
    if method is not None:
        why = f"the ticket names {method.external_id}, which can still return {listed}"
    elif items:
        why = f"an item refund is not split over payments ({listed})"
    else:
        why = f"all its payments together can still return only {together} ({listed})"
    return [], (
        f"{amount} {order.currency} is more than any one payment of {order.external_id} can still return, and "
        f"{why}: a person decides how to split it, one refund per payment."
    )


def _leg(payment: PaymentReturnable, amount: Decimal) -> dict:
    """One tender leg: the order's payment (its id; the provider reference stays in the ledger), its
    method and kind, the amount it gives back and what it could still return."""
    return {
        "payment": payment.payment_id,
        "method": payment.method,
        "kind": payment.kind,
        "amount": str(amount),
        "returnable": str(payment.returnable),
    }


def refund_cap(*, position, item_ids: list[str], currency: str) -> tuple[Decimal, str]:
    """The most a refund of these items (none: the order) may be, and that cap in words naming
    what sets it: the named items' unrefunded units, or the order's refundable total. The gate
    caps by it, and finance's wanted amount (approvals.services.decisions) is refused above it."""
    cap, words = position.refundable, f"the refundable total {position.refundable} {currency}"
    if item_ids:
        match = position.items_match(item_ids)
        if match.value < cap:
            units = sum(match.units.values())
            cap = match.value
            words = (
                f"the items' units {cap} {currency} ({', '.join(item_ids)}: {units} unit{'s' if units != 1 else ''}"
                " named)"
            )
    return cap, words


def _scope_rules_differ(*, order, policy, destination, waive) -> str:
    """What the policy's item rules say differently from its whole-order rules about this order
    and destination ('' when nothing): a draft may narrow a whole-order ticket to items only
    where both say the same."""
    differences = []
    if "order_status" not in waive and (order.status in policy.full_refund_statuses) != (
        order.status in policy.item_refund_statuses
    ):
        differences.append(f"order status {order.status}")
    if (destination in policy.full_refund_destinations) != (destination in policy.item_refund_destinations):
        differences.append(f"refunds to {destination_words(destination)}")
    return ", ".join(differences)


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
