"""A Shopify order onto the product's records, through the service `import_orders` uses
(`ledger.importing.orders_import`): the same rules, so a re-sync duplicates nothing and never
rewrites what a refund depended on (customer, total, currency, items, payments stay as first
seen; status and note follow the shop).

- the order's id is its `name` (`#1001`), as the customer knows it;
- the customer is found by email (lower-cased, unique per tenant); without one, by Shopify's id;
- payments are its successful SALE/CAPTURE transactions, `payment_ref` the transaction's gid;
  `shopify_payments` is a card, `gift_card` a gift card, another gateway by its name (PayPal's
  as paypal, any other as a card of that brand); each customer has one payment method per gateway;
- items are its line items (id: the SKU, else the line item's number), with the line item's gid
  and refundable quantity beside them (`options`);
- refunds made in Shopify's admin are `external` ledger entries on the payment each refund
  transaction returned (`ledger_refund_record_external`, flagged for review); refunds this
  product made (their note names the ledger entry) are the payout's to record, not external;
- a cancelled order is `cancelled`, a fulfilled one `delivered`, the rest `processed`.

Everything from the shop is the shop's text: stored as data, shown to the agent as data.
"""

import re
from dataclasses import dataclass, field
from decimal import Decimal

from django.db import transaction
from django.utils.dateparse import parse_datetime

from ..importing import orders_import
from ..models import Order, Payment, RefundEntry, ShopifyConnection, ShopifyOrder
from ..money import CENT
from ..services import ledger_refund_record_external

PAID_KINDS = ("SALE", "CAPTURE")
# What the product writes in the note of each refund it makes, to know it again.
NOTE_MARK = "refundagent ledger_entry="
_NOTE_ENTRY = re.compile(r"refundagent ledger_entry=(\d+)")


@dataclass
class SyncCounts:
    orders: int = 0
    created: int = 0
    updated: int = 0
    external_refunds: int = 0
    warnings: list[str] = field(default_factory=list)


def refund_note(*, entry: RefundEntry) -> str:
    return f"{NOTE_MARK}{entry.pk} approval={entry.approval_ref or '-'} tenant={entry.tenant.slug}"


def refund_note_entry(note: str | None) -> int | None:
    """The ledger entry a refund's note names (a refund this product made), or None."""
    found = _NOTE_ENTRY.search(note or "")
    return int(found.group(1)) if found else None


def shop_money(bag) -> Decimal:
    """A MoneyBag's shop-currency amount, to the cent."""
    return Decimal(str(((bag or {}).get("shopMoney") or {}).get("amount") or "0")).quantize(CENT)


def method_for_gateway(gateway: str) -> tuple[str, str]:
    """(payment method kind, card brand) of a Shopify payment gateway."""
    name = (gateway or "").strip().lower()
    if name == "gift_card":
        return "gift_card", ""
    if "paypal" in name:
        return "paypal", ""
    if name == "shopify_payments":
        return "card", ""
    return "card", name[:40]


def customer_key(node: dict) -> tuple[str, str, str]:
    """(external id, name, email) of the order's customer."""
    customer = node.get("customer") or {}
    email = (node.get("email") or customer.get("email") or "").strip().lower()
    name = (customer.get("displayName") or "")[:200]
    if email:
        return email[:100], name, email
    ident = (customer.get("id") or node["id"]).rsplit("/", 1)[-1]
    return f"shopify-customer-{ident}", name, ""


def order_status(node: dict) -> str:
    if node.get("cancelledAt"):
        return Order.Status.CANCELLED
    if node.get("displayFulfillmentStatus") == "FULFILLED":
        return Order.Status.DELIVERED
    return Order.Status.PROCESSED


def paid_transactions(node: dict) -> list[dict]:
    return [t for t in node.get("transactions") or [] if t.get("kind") in PAID_KINDS and t.get("status") == "SUCCESS"]


def import_data(*, tenant_slug: str, nodes: list[dict]) -> dict:
    """The import file (ledger/import_format.py) for these Shopify orders."""
    customers: dict[str, dict] = {}
    orders = []
    for node in nodes:
        customer_id, name, email = customer_key(node)
        customer = customers.setdefault(
            customer_id, {"id": customer_id, "name": name, "email": email, "payment_methods": []}
        )
        known = {m["id"] for m in customer["payment_methods"]}
        payments = []
        for txn in paid_transactions(node):
            gateway = (txn.get("gateway") or "unknown")[:100]
            kind, brand = method_for_gateway(gateway)
            if gateway not in known:
                customer["payment_methods"].append({"id": gateway, "kind": kind, "brand": brand})
                known.add(gateway)
            payments.append(
                {
                    "method": kind,
                    "payment_method_id": gateway,
                    "amount": str(shop_money(txn.get("amountSet"))),
                    "card_brand": brand,
                    "payment_ref": txn["id"],
                }
            )
        items = []
        for line in (node.get("lineItems") or {}).get("nodes") or []:
            legacy = line["id"].rsplit("/", 1)[-1]
            items.append(
                {
                    "id": (line.get("sku") or f"line-{legacy}")[:100],
                    "name": (line.get("name") or "")[:200],
                    "price": str(shop_money(line.get("originalUnitPriceSet"))),
                    "quantity": max(int(line.get("quantity") or 1), 1),
                    "options": {"shopify_line_item": line["id"], "refundable_quantity": line.get("refundableQuantity")},
                }
            )
        order = {
            "id": node["name"],
            "customer": customer_id,
            "total": str(shop_money(node.get("totalPriceSet"))),
            "currency": node.get("currencyCode"),
            "placed_at": node.get("processedAt") or node.get("createdAt"),
            "status": order_status(node),
            "note": node.get("note") or "",
            "payments": payments,
        }
        if items:
            order["items"] = items
        orders.append(order)
    return {"tenant": tenant_slug, "customers": list(customers.values()), "orders": orders}


def shopify_orders_apply(*, connection: ShopifyConnection, nodes: list[dict]) -> SyncCounts:
    """Write these Shopify orders (one page, or one order a webhook re-read) into the tenant, in
    one transaction: the import, the gid mapping, then refunds made in Shopify's admin. A node
    older than what was already applied (`updatedAt`) changes nothing: any order of delivery
    ends in the newest state. Queries: a constant number per call, plus one transaction per
    refund made in the admin that the ledger does not hold yet."""
    counts = SyncCounts(orders=len(nodes))
    if not nodes:
        return counts
    tenant = connection.tenant
    with transaction.atomic():
        # One writer per shop at a time: a webhook and the sync applying the same order serialise here.
        ShopifyConnection.objects.select_for_update().filter(pk=connection.pk).first()
        known = {
            s.shopify_id: s
            for s in ShopifyOrder.objects.filter(connection=connection, shopify_id__in=[n["id"] for n in nodes])
        }
        newest: dict[str, dict] = {}
        for node in nodes:
            previous = newest.get(node["id"])
            if previous is None or _updated(node) >= _updated(previous):
                newest[node["id"]] = node
        fresh = [n for n in newest.values() if n["id"] not in known or _updated(n) >= known[n["id"]].shopify_updated_at]
        if not fresh:
            return counts
        result = orders_import(data=import_data(tenant_slug=tenant.slug, nodes=fresh))
        counts.created, counts.updated = result.orders.created, result.orders.updated
        counts.warnings.extend(result.warnings)
        by_name = {
            o.external_id: o for o in Order.objects.filter(tenant=tenant, external_id__in=[n["name"] for n in fresh])
        }
        new_links, moved = [], []
        for node in fresh:
            link = known.get(node["id"])
            if link is None:
                new_links.append(
                    ShopifyOrder(
                        connection=connection,
                        order=by_name[node["name"]],
                        shopify_id=node["id"],
                        shopify_updated_at=_updated(node),
                    )
                )
            else:
                link.shopify_updated_at = _updated(node)
                moved.append(link)
        ShopifyOrder.objects.bulk_create(new_links)
        ShopifyOrder.objects.bulk_update(moved, ["shopify_updated_at"])
        counts.external_refunds = len(external_refunds_record(nodes=fresh, orders=by_name))
    return counts


def _updated(node: dict):
    return parse_datetime(node["updatedAt"])


def external_refunds_record(*, nodes: list[dict], orders: dict[str, Order]) -> list[RefundEntry]:
    """Refunds made in Shopify's admin, one external entry per refund transaction, on the payment
    it returned; returns the entries written now. Keys already in the ledger are skipped with one
    query for the whole page."""
    wanted = []
    for node in nodes:
        for refund in node.get("refunds") or []:
            if refund_note_entry(refund.get("note")) is not None:
                continue  # made by this product: its payout records it
            for txn in (refund.get("transactions") or {}).get("nodes") or []:
                if txn.get("kind") == "REFUND" and txn.get("status") == "SUCCESS":
                    wanted.append((node, refund, txn))
    if not wanted:
        return []
    recorded = set(
        RefundEntry.objects.filter(
            idempotency_key__in=[f"{RefundEntry.Gateway.SHOPIFY}:{t['id']}" for _, _, t in wanted]
        ).values_list("idempotency_key", flat=True)
    )
    parents = [(t.get("parentTransaction") or {}).get("id") for _, _, t in wanted]
    payments = {
        p.payment_ref: p
        for p in Payment.objects.filter(
            order__in=list(orders.values()), payment_ref__in=[p for p in parents if p]
        ).select_related("payment_method")
    }
    made = []
    for node, refund, txn in wanted:
        if f"{RefundEntry.Gateway.SHOPIFY}:{txn['id']}" in recorded:
            continue
        order = orders[node["name"]]
        payment = payments.get((txn.get("parentTransaction") or {}).get("id"))
        entry = ledger_refund_record_external(
            order=order,
            amount=shop_money(txn.get("amountSet")),
            currency=order.currency,
            gateway=RefundEntry.Gateway.SHOPIFY,
            provider_ref=txn["id"],
            reason=f"Refunded in Shopify's admin ({refund['id']}).",
            payment=payment,
        )
        if entry is not None:
            made.append(entry)
    return made
