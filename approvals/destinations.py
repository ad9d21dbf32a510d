"""Where an approved refund goes: the exact payment method the request names, checked against
the order's customer and the approved kind, and the tender legs it is paid as (each leg's ledger
entry and its idempotency key; docs/payments.md "Split tender")."""

from dataclasses import dataclass

from ledger.exceptions import InvalidInput
from ledger.models import Payment, PaymentMethod, RefundEntry
from ledger.money import ZERO, money_parse

from .gate import order_original_method
from .models import ApprovalRequest


def approval_destination_resolve(*, request: ApprovalRequest) -> tuple[PaymentMethod | None, str]:
    """Where the approved refund goes, exactly as approved: the payment method named by
    `destination_method`, which must be the order's customer's and of the approved kind
    ('original': the method the order was paid with; 'gift_card': a gift card). Anything else
    refuses (InvalidInput): the execution fails with the reason, nothing is written. 'original'
    is any payment of the order (split tender: the leg the request names).

    Requests made before the method was named (no `destination_method` in their args) keep
    their old meaning: 'original' is the order's payment method, 'gift_card' the customer's
    oldest gift card."""
    args = request.args or {}
    kind = args.get("destination") or "original"
    order = request.order
    if kind not in ("original", "gift_card"):
        raise InvalidInput(f"Unknown refund destination {kind!r}.", code="bad_destination")
    original = order_original_method(order)
    if "destination_method" not in args:
        if kind == "original":
            return original, kind
        card = order.customer.payment_methods.filter(kind=PaymentMethod.Kind.GIFT_CARD).order_by("id").first()
        if card is None:
            raise InvalidInput(f"Customer {order.customer.external_id} has no gift card.", code="no_gift_card")
        return card, kind
    method_id = args["destination_method"]
    if method_id is None:
        if kind == "original" and original is None:
            return None, kind  # the order's payment recorded no method: the original, unnamed
        raise InvalidInput(f"The approved refund to '{kind}' names no payment method.", code="destination_unnamed")
    method = order.customer.payment_methods.filter(external_id=method_id).first()
    if method is None:
        raise InvalidInput(
            f"Payment method {method_id} is not one of customer {order.customer.external_id}'s.",
            code="foreign_destination",
        )
    if kind == "original" and not order.payments.filter(payment_method=method).exists():
        raise InvalidInput(
            f"Payment method {method_id} is not the one order {order.external_id} was paid with.",
            code="destination_not_original",
        )
    if kind == "gift_card" and method.kind != PaymentMethod.Kind.GIFT_CARD:
        raise InvalidInput(f"Payment method {method_id} is not a gift card.", code="destination_not_gift_card")
    _legs_check(args=args, method=method)
    return method, kind


def _legs_check(*, args: dict, method: PaymentMethod) -> None:
    """The first leg is the method the request names (`destination_method`), and the legs together
    are exactly the approved amount; each leg itself is checked by `approval_legs_resolve`. A request
    whose legs the runtime cannot pay as approved is refused (InvalidInput): it goes back to a
    person, never somewhere else."""
    if "legs" not in args or not args["legs"]:
        return  # made before legs were named, or an order with no recorded payment
    legs = args["legs"]
    try:
        total = sum((money_parse(leg.get("amount"), field="legs.amount") for leg in legs), ZERO)
        approved = money_parse(args.get("amount"))
    except (InvalidInput, AttributeError):
        total, approved = None, ZERO
    if legs[0].get("method") != method.external_id or total != approved:
        raise InvalidInput(
            f"The approved refund of {args.get('amount')} {args.get('currency')} cannot be paid as the legs it "
            f"names (the first to {method.external_id}, together the whole amount): a person decides how to split it.",
            code="legs_not_payable",
        )


@dataclass(frozen=True)
class ApprovedLeg:
    """One tender leg of an approved refund, resolved against the ledger: where it goes and under
    which idempotency key its ledger entry (and its provider refund) is written."""

    index: int
    key: str
    payment: Payment | None  # the order's payment it gives back; None: store credit, or no leg named
    method: PaymentMethod | None  # the entry's destination
    kind: str  # the entry's destination kind: 'original' or 'gift_card'
    amount: str


def approval_leg_key(*, request_key: str, index: int) -> str:
    """The idempotency key of leg `index` of the request keyed `request_key`: the first leg keeps the
    request's own key (so a single-leg refund, and every entry written before legs, is keyed as it
    always was), each further leg `<key>:leg<n>`. The provider gets the same key on every attempt."""
    return request_key if index == 0 else f"{request_key}:leg{index}"


def approval_entry_is_request_leg(*, entry: RefundEntry, request: ApprovalRequest) -> bool:
    """Whether a ledger entry is one of the request's legs: written for it (`approval_ref` holds the
    request's id) under one of its leg keys."""
    key = entry.idempotency_key
    is_leg_key = key == request.idempotency_key or (
        key.startswith(f"{request.idempotency_key}:leg") and key.rsplit(":leg", 1)[1].isdigit()
    )
    return is_leg_key and entry.approval_ref == str(request.pk)


def approval_request_entries(*, request: ApprovalRequest):
    """The ledger entries written for the request, one per leg, in leg order (a queryset)."""
    legs = len((request.args or {}).get("legs") or []) or 1
    keys = [approval_leg_key(request_key=request.idempotency_key, index=n) for n in range(legs)]
    return RefundEntry.objects.filter(idempotency_key__in=keys, approval_ref=str(request.pk)).order_by("id")


def approval_request_of_entry(*, entry: RefundEntry) -> ApprovalRequest | None:
    """The approval request a ledger entry is a leg of (by `approval_ref`, checked against its keys),
    or None (an import, a person's refund, an external one)."""
    if entry.source != RefundEntry.Source.APPROVAL or not entry.approval_ref.isdigit():
        return None
    request = ApprovalRequest.objects.filter(pk=int(entry.approval_ref)).select_related("order").first()
    if request is None or not approval_entry_is_request_leg(entry=entry, request=request):
        return None
    return request


def approval_legs_resolve(*, request: ApprovalRequest) -> list[ApprovedLeg]:
    """The legs the execution pays, exactly as approved, each resolved against the ledger (see
    `approval_destination_resolve`, which checks the destination first): every named payment is one
    of the order's, made with the leg's method and kind, named once, and the legs add up to the
    approved amount. Anything else refuses (InvalidInput `legs_not_payable`): nothing is written.
    A request that names no legs (made before legs, or an order with no recorded payment) pays one
    leg: the whole amount to its destination."""
    method, kind = approval_destination_resolve(request=request)
    args = request.args or {}
    legs = args.get("legs") or []
    if not legs:
        key = approval_leg_key(request_key=request.idempotency_key, index=0)
        return [ApprovedLeg(index=0, key=key, payment=None, method=method, kind=kind, amount=args["amount"])]
    order = request.order
    payments = {p.pk: p for p in order.payments.select_related("payment_method")}
    resolved = []
    for index, leg in enumerate(legs):
        key = approval_leg_key(request_key=request.idempotency_key, index=index)
        if kind == "gift_card":
            # Store credit to a gift card the order was not paid with: one leg, no payment.
            if len(legs) != 1 or leg.get("payment") is not None:
                raise _not_payable(args, f"store credit to {method.external_id} is one leg")
            resolved.append(ApprovedLeg(index=0, key=key, payment=None, method=method, kind=kind, amount=leg["amount"]))
            continue
        named = leg.get("payment")
        payment = payments.pop(named, None) if isinstance(named, int) and not isinstance(named, bool) else None
        paid_with = payment.payment_method if payment is not None else None
        if (
            payment is None
            or (paid_with.external_id if paid_with else None) != leg.get("method")
            or (paid_with.kind if paid_with else payment.method) != leg.get("kind")
        ):
            raise _not_payable(args, f"leg {index + 1} names no payment of order {order.external_id} made that way")
        resolved.append(
            ApprovedLeg(index=index, key=key, payment=payment, method=paid_with, kind=kind, amount=leg["amount"])
        )
    return resolved


def _not_payable(args: dict, why: str) -> InvalidInput:
    return InvalidInput(
        f"The approved refund of {args.get('amount')} {args.get('currency')} cannot be paid as approved ({why}): "
        "a person decides how to split it.",
        code="legs_not_payable",
    )


def approval_legs_screen(*, request: ApprovalRequest) -> list[dict]:
    """The request's legs as the review page shows them (before approving: where each part of the
    money goes; after: each leg's ledger entry and status). The provider reference is not shown."""
    legs = (request.args or {}).get("legs") or []
    entries = {entry.idempotency_key: entry for entry in approval_request_entries(request=request)}
    kinds = dict(PaymentMethod.Kind.choices)
    return [
        {
            "number": index + 1,
            "method": leg.get("method") or "—",
            "kind": kinds.get(leg.get("kind"), leg.get("kind")),
            "paid_as": "store credit" if leg.get("kind") == PaymentMethod.Kind.GIFT_CARD else "refund to the payment",
            "amount": leg.get("amount"),
            "returnable": leg.get("returnable"),
            "entry": entries.get(approval_leg_key(request_key=request.idempotency_key, index=index)),
        }
        for index, leg in enumerate(legs)
    ]
