"""Refunds in the fake Shopify: `suggestedRefund`, `refundCreate`'s checks, and making a refund.

Shopify's rules, as the fake applies them:
- a refund transaction returns money on a parent, a successful SALE or CAPTURE of the same order,
  through the parent's gateway, at most what the parent can still return (its amount less its
  refunds; nothing once voided);
- a suggested refund spreads the amount over the refundable transactions in the order they were
  made (or the shop's `suggestion_order` of gateways first), each up to what it can still return;
- a refunded line item quantity is at most its refundable quantity;
- a cancelled order can still be refunded (Shopify's admin offers it on cancel), up to what is left.
The userError messages below are the fake's wording of Shopify's checks, with Shopify's field
paths (`["transactions", "0", "amount"]`).
"""

from decimal import Decimal, InvalidOperation

from .models import ZERO, Order, Refund, RefundLine, Transaction, money_bag, places


def _line_by_gid(order: Order, line_gid: str):
    return next((line for line in order.lines if line.id == line_gid), None)


def spread(order: Order, amount: Decimal) -> list[tuple[Transaction, Decimal]]:
    """The amount over the order's refundable transactions, oldest first, or the gateways named in
    the shop's `suggestion_order` first (a test can flip it to show the product does not depend on
    how Shopify happens to spread a suggestion)."""
    first = order.shop.suggestion_order or ()
    txns = sorted(
        order.refundable_transactions,
        key=lambda t: first.index(t.gateway) if t.gateway in first else len(first),
    )
    left, parts = amount, []
    for txn in txns:
        if left <= 0:
            break
        take = min(txn.remaining, left)
        parts.append((txn, take))
        left -= take
    return parts


def suggest_refund(order: Order, *, refund_line_items, refund_shipping, shipping_amount, suggest_full_refund) -> dict:
    currency = order.currency
    lines = []
    if suggest_full_refund:
        lines = [RefundLine(None, line, line.refundable_quantity) for line in order.lines if line.refundable_quantity]
    for item in refund_line_items or []:
        line = _line_by_gid(order, item["lineItemId"])
        if line is None or item["quantity"] <= 0:
            continue
        lines.append(
            RefundLine(
                None, line, min(item["quantity"], line.refundable_quantity), item.get("restockType") or "NO_RESTOCK"
            )
        )
    subtotal = sum((line.line_item.price * line.quantity for line in lines), ZERO)
    shipping_left = max(order.shipping - order.shipping_refunded, ZERO)
    shipping = ZERO
    if refund_shipping or suggest_full_refund:
        shipping = shipping_left
    elif shipping_amount is not None:
        shipping = min(Decimal(str(shipping_amount)), shipping_left)
    maximum = sum((t.remaining for t in order.refundable_transactions), ZERO)
    amount = maximum if suggest_full_refund else min(subtotal + shipping, maximum)
    return {
        "amountSet": money_bag(amount, currency),
        "maximumRefundableSet": money_bag(maximum, currency),
        "subtotalSet": money_bag(subtotal, currency),
        "discountedSubtotalSet": money_bag(subtotal, currency),
        "totalTaxSet": money_bag(ZERO, currency),
        "totalCartDiscountAmountSet": money_bag(ZERO, currency),
        "refundLineItems": lines,
        "shipping": {
            "amountSet": money_bag(shipping, currency),
            "maximumRefundableSet": money_bag(shipping_left, currency),
            "taxSet": money_bag(ZERO, currency),
        },
        "suggestedTransactions": [
            {
                "accountNumber": None,
                "amountSet": money_bag(take, currency),
                "formattedGateway": txn.formatted_gateway,
                "gateway": txn.gateway,
                "kind": "SUGGESTED_REFUND",
                "maximumRefundableSet": money_bag(txn.remaining, currency),
                "parentTransaction": txn,
            }
            for txn, take in spread(order, amount)
        ],
    }


def _amount(value, currency: str) -> Decimal | None:
    try:
        amount = Decimal(str(value).strip())
    except (InvalidOperation, ValueError):
        return None
    if not amount.is_finite() or amount.as_tuple().exponent < -places(currency):
        return None
    return amount


def refund_errors(order: Order | None, refund_input: dict) -> list[dict]:
    """The userErrors Shopify answers for this RefundInput, or [] when it can be made."""
    if order is None:
        return [{"field": ["orderId"], "message": "Order does not exist"}]
    errors = []
    currency = order.currency
    if refund_input.get("currency") and refund_input["currency"] != currency:
        errors.append({"field": ["currency"], "message": "Currency does not match the order's currency"})
    asked: dict[int, Decimal] = {}
    txns_by_gid = {t.id: t for t in order.txns}
    for i, item in enumerate(refund_input.get("transactions") or []):
        path = ["transactions", str(i)]
        amount = _amount(item.get("amount"), currency)
        if amount is None:
            errors.append({"field": [*path, "amount"], "message": "Amount is invalid"})
            continue
        if amount <= 0:
            errors.append({"field": [*path, "amount"], "message": "Amount must be greater than 0"})
            continue
        if item.get("orderId") != order.id:
            errors.append({"field": [*path, "orderId"], "message": "Transaction does not belong to this order"})
            continue
        if item.get("kind") != "REFUND":
            errors.append({"field": [*path, "kind"], "message": "Kind must be refund"})
            continue
        parent = txns_by_gid.get(item.get("parentId") or "")
        if parent is None or not parent.refundable:
            errors.append(
                {"field": [*path, "parentId"], "message": "Parent transaction is not a successful sale or capture"}
            )
            continue
        if item.get("gateway") != parent.gateway:
            errors.append({"field": [*path, "gateway"], "message": "Gateway does not match the parent transaction"})
            continue
        asked[parent.num] = asked.get(parent.num, ZERO) + amount
        if asked[parent.num] > parent.remaining:
            errors.append(
                {
                    "field": [*path, "amount"],
                    "message": f"Refund amount cannot be greater than the refundable amount ({parent.remaining})",
                }
            )
    for i, item in enumerate(refund_input.get("refundLineItems") or []):
        path = ["refundLineItems", str(i)]
        line = _line_by_gid(order, item.get("lineItemId") or "")
        if line is None:
            errors.append({"field": [*path, "lineItemId"], "message": "Line item does not exist"})
        elif item.get("quantity", 0) <= 0:
            errors.append({"field": [*path, "quantity"], "message": "Quantity must be greater than 0"})
        elif item["quantity"] > line.refundable_quantity:
            errors.append(
                {"field": [*path, "quantity"], "message": "Quantity cannot refund more items than were purchased"}
            )
    shipping = refund_input.get("shipping") or {}
    if shipping.get("amount") is not None:
        amount = _amount(shipping["amount"], currency)
        if amount is None or amount < 0 or amount > order.shipping - order.shipping_refunded:
            errors.append(
                {"field": ["shipping", "amount"], "message": "Shipping refund amount exceeds the refundable shipping"}
            )
    return errors


def make_refund(fake, order: Order, *, parts, lines=(), shipping=ZERO, note=None) -> Refund:
    """Record a refund: REFUND transactions on their parents, refunded quantities, updatedAt moved.
    `parts` is [(parent transaction, amount)], `lines` [(line item, quantity, restock type)]."""
    now = fake.now()
    refund = Refund(fake.next_id("Refund"), order, now, note, [], [], shipping)
    for parent, amount in parts:
        txn = Transaction(
            fake.next_id("OrderTransaction"), order, "REFUND", "SUCCESS", parent.gateway, amount, parent, now
        )
        parent.children.append(txn)
        order.txns.append(txn)
        refund.txns.append(txn)
    for line, quantity, restock_type in lines:
        line.refunded_quantity += quantity
        refund.lines.append(RefundLine(fake.next_id("RefundLineItem"), line, quantity, restock_type or "NO_RESTOCK"))
    order.shipping_refunded += shipping
    order.refund_list.append(refund)
    order.shop.touch(order, now)
    return refund


def create_from_input(fake, order: Order, refund_input: dict) -> Refund:
    """A refund from a RefundInput that `refund_errors` accepted."""
    txns_by_gid = {t.id: t for t in order.txns}
    currency = order.currency
    parts = [
        (txns_by_gid[item["parentId"]], _amount(item["amount"], currency))
        for item in refund_input.get("transactions") or []
    ]
    lines = [
        (_line_by_gid(order, item["lineItemId"]), item["quantity"], item.get("restockType"))
        for item in refund_input.get("refundLineItems") or []
    ]
    shipping_input = refund_input.get("shipping") or {}
    if shipping_input.get("fullRefund"):
        shipping = order.shipping - order.shipping_refunded
    else:
        shipping = _amount(shipping_input.get("amount") or "0", currency) or ZERO
    return make_refund(fake, order, parts=parts, lines=lines, shipping=shipping, note=refund_input.get("note"))
