"""The JSON bodies of Shopify's webhooks, which keep the REST Admin API's shapes (snake_case,
numeric ids beside `admin_graphql_api_id`, amounts as strings): `orders/create`,
`orders/updated`, `orders/cancelled` send the order, `refunds/create` the refund."""

from .models import ZERO, Order, Refund, Transaction


def _amount(value) -> str:
    return f"{value:.2f}"


def _price_set(value, currency: str) -> dict:
    money = {"amount": _amount(value), "currency_code": currency}
    return {"shop_money": money, "presentment_money": money}


def _line_item(line) -> dict:
    currency = line.order.currency
    return {
        "id": line.num,
        "admin_graphql_api_id": line.id,
        "name": line.name,
        "title": line.title,
        "variant_title": line.variant_title,
        "sku": line.sku,
        "quantity": line.quantity,
        "current_quantity": line.current_quantity,
        "fulfillable_quantity": line.current_quantity,
        "fulfillment_status": None,
        "price": _amount(line.price),
        "price_set": _price_set(line.price, currency),
        "total_discount": "0.00",
        "taxable": True,
        "requires_shipping": True,
        "gift_card": False,
        "tax_lines": [],
        "discount_allocations": [],
    }


def _transaction(txn: Transaction) -> dict:
    return {
        "id": txn.num,
        "admin_graphql_api_id": txn.id,
        "order_id": txn.order.num,
        "kind": txn.kind.lower(),
        "gateway": txn.gateway,
        "status": txn.status.lower(),
        "amount": _amount(txn.amount),
        "currency": txn.order.currency,
        "parent_id": txn.parent.num if txn.parent else None,
        "created_at": txn.created_at,
        "processed_at": txn.created_at,
        "error_code": txn.error_code,
        "test": False,
    }


def refund_payload(refund: Refund) -> dict:
    return {
        "id": refund.num,
        "admin_graphql_api_id": refund.id,
        "order_id": refund.order.num,
        "created_at": refund.created_at,
        "processed_at": refund.created_at,
        "note": refund.note,
        "restock": any(line.restocked for line in refund.lines),
        "user_id": None,
        "refund_line_items": [
            {
                "id": line.num,
                "line_item_id": line.line_item.num,
                "quantity": line.quantity,
                "restock_type": line.restock_type.lower(),
                "location_id": None,
                "subtotal": _amount(line.line_item.price * line.quantity),
                "subtotal_set": _price_set(line.line_item.price * line.quantity, refund.order.currency),
                "total_tax": "0.00",
                "line_item": _line_item(line.line_item),
            }
            for line in refund.lines
        ],
        "transactions": [_transaction(txn) for txn in refund.txns],
        "order_adjustments": [],
        "duties": [],
    }


def order_payload(order: Order) -> dict:
    currency = order.currency
    customer = order.customer
    status = (order.display_financial_status or "PENDING").lower()
    digits = order.name.lstrip("#")
    order_number = int(digits) if digits.isdigit() else None
    return {
        "id": order.num,
        "admin_graphql_api_id": order.id,
        "name": order.name,
        "order_number": order_number,
        "number": order_number - 1000 if order_number else None,
        "email": order.email,
        "contact_email": order.email,
        "created_at": order.created_at,
        "updated_at": order.updated_at,
        "processed_at": order.processed_at,
        "cancelled_at": order.cancelled_at,
        "cancel_reason": order.cancel_reason.lower() if order.cancel_reason else None,
        "closed_at": order.closed_at,
        "currency": currency,
        "presentment_currency": currency,
        "financial_status": status,
        "fulfillment_status": None,
        "test": order.test,
        "note": order.note,
        "tags": ", ".join(order.tags),
        "payment_gateway_names": order.payment_gateway_names,
        "subtotal_price": _amount(order.subtotal),
        "subtotal_price_set": _price_set(order.subtotal, currency),
        "total_price": _amount(order.total),
        "total_price_set": _price_set(order.total, currency),
        "current_total_price": _amount(order.total - order.refunded),
        "current_total_price_set": _price_set(order.total - order.refunded, currency),
        "total_tax": "0.00",
        "total_discounts": "0.00",
        "total_outstanding": _amount(max(order.total - order.received, ZERO)),
        "total_shipping_price_set": _price_set(order.shipping, currency),
        "customer": None
        if customer is None
        else {
            "id": customer.num,
            "admin_graphql_api_id": customer.id,
            "email": customer.email,
            "first_name": customer.first_name,
            "last_name": customer.last_name,
            "created_at": customer.created_at,
            "updated_at": customer.created_at,
        },
        "line_items": [_line_item(line) for line in order.lines],
        "refunds": [refund_payload(refund) for refund in order.refund_list],
        "shipping_lines": [],
    }
