"""Where an approved refund goes: the exact payment method the request names, checked against
the order's customer and the approved kind."""

from ledger.exceptions import InvalidInput
from ledger.models import PaymentMethod

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
    """The payout pays one leg: exactly the one the request names, to its method, for the whole
    amount. A request whose legs the runtime cannot pay as approved is refused (InvalidInput):
    it goes back to a person, never somewhere else."""
    if "legs" not in args or not args["legs"]:
        return  # made before legs were named, or an order with no recorded payment
    legs = args["legs"]
    if len(legs) != 1 or legs[0].get("method") != method.external_id or legs[0].get("amount") != args.get("amount"):
        raise InvalidInput(
            "The approved refund cannot be paid as one leg to "
            f"{method.external_id} for {args.get('amount')} {args.get('currency')}: a person decides how to split it.",
            code="legs_not_payable",
        )
