"""A Shopify order onto the product's records, through the service `import_orders` uses
(`ledger.importing.orders_import`): the same rules, so a re-sync duplicates nothing and never
rewrites what a refund depended on (customer, total, currency, items, payments stay as first
seen; status and note follow the shop).

- the order's id is its `name` (`#1001`), as the customer knows it;
- the customer is found by email (lower-cased, unique per tenant); without one, by Shopify's id;
- payments are its successful SALE/CAPTURE transactions not voided, `payment_ref` the
  transaction's gid; one that appears after the order was first stored (a later capture, a second
  sale) is added to it, the payments already stored stay as they are (refunds depend on them);
  `shopify_payments` is a card, `gift_card` a gift card, another gateway by its name (PayPal's
  as paypal, any other as a card of that brand); each customer has one payment method per gateway;
- items are its line items (id: the SKU, else the line item's number), with the line item's gid
  and refundable quantity beside them (`options`);
- refunds made in Shopify's admin are `external` ledger entries on the payment each refund
  transaction returned (`ledger_refund_record_external`, flagged for review); refunds this
  product made (their note names the ledger entry) are the payout's to record, not external;
- a cancelled order is `cancelled`, a fulfilled one `delivered`, the rest `processed`.

Everything from the shop is the shop's text: stored as data, shown to the agent as data.

An order the mapping or the import refuses (hostile or inconsistent data, amounts in another
currency than the order, or than the order recorded) is skipped: the rest of the page is stored,
the refusal is a warning in the counts, the log and the connection's `refused_orders` (shown in
its admin) until the order is applied again.
"""

import logging
import re
from dataclasses import dataclass, field
from decimal import Decimal

from django.db import DataError, IntegrityError, transaction
from django.utils import timezone
from django.utils.dateparse import parse_datetime

from ..exceptions import DomainError, ShopifyOrderRefused
from ..importing import orders_import
from ..models import Order, Payment, PaymentMethod, RefundEntry, ShopifyConnection, ShopifyOrder
from ..money import CENT
from ..services import ledger_refund_record_external
from .nested import order_label, shown

logger = logging.getLogger(__name__)

PAID_KINDS = ("SALE", "CAPTURE")
# What the product writes in the note of each refund it makes, to know it again.
NOTE_MARK = "refundagent ledger_entry="
_NOTE_ENTRY = re.compile(r"refundagent ledger_entry=(\d+)")
_TRANSACTION_GID = re.compile(r"gid://shopify/OrderTransaction/\d{1,20}")


# What one order's data can raise on its way in: a refusal, or shop data of the wrong shape or
# size (a missing key, text where a number goes, a value the database refuses). Each skips that
# order only. A lost database connection is none of these: it stops the run.
ORDER_REFUSALS = (
    DomainError,
    KeyError,
    TypeError,
    ValueError,
    ArithmeticError,
    AttributeError,
    IntegrityError,
    DataError,
)
# Refusals the connection remembers for the operator (the most recent ones).
MAX_REFUSALS_KEPT = 200


@dataclass
class SyncCounts:
    orders: int = 0
    created: int = 0
    updated: int = 0
    external_refunds: int = 0
    payments_added: int = 0
    skipped: int = 0
    warnings: list[str] = field(default_factory=list)

    def add(self, other: "SyncCounts") -> None:
        self.orders += other.orders
        self.created += other.created
        self.updated += other.updated
        self.external_refunds += other.external_refunds
        self.payments_added += other.payments_added
        self.skipped += other.skipped
        self.warnings.extend(other.warnings)


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
    """Its successful sales and captures, less those a successful VOID cancelled."""
    transactions = node.get("transactions") or []
    voided = {
        (t.get("parentTransaction") or {}).get("id")
        for t in transactions
        if t.get("kind") == "VOID" and t.get("status") == "SUCCESS"
    }
    return [
        t
        for t in transactions
        if t.get("kind") in PAID_KINDS and t.get("status") == "SUCCESS" and t.get("id") not in voided
    ]


def currency_check(node: dict) -> None:
    """Every amount of the order in its own currency (Shopify's shopMoney is the shop's): an order
    whose amounts disagree is refused whole, never stored with amounts in the wrong currency."""
    currency = node.get("currencyCode")
    bags = [node.get("totalPriceSet")]
    bags += [t.get("amountSet") for t in node.get("transactions") or []]
    bags += [line.get("originalUnitPriceSet") for line in (node.get("lineItems") or {}).get("nodes") or []]
    for refund in node.get("refunds") or []:
        bags += [t.get("amountSet") for t in (refund.get("transactions") or {}).get("nodes") or []]
    for bag in bags:
        other = ((bag or {}).get("shopMoney") or {}).get("currencyCode")
        if other and other != currency:
            raise ShopifyOrderRefused(f"{order_label(node)}: an amount in {other}, the order in {currency}")


def import_data(*, tenant_slug: str, nodes: list[dict], held: dict[str, set[str]] | None = None) -> dict:
    """The import file (ledger/import_format.py) for these Shopify orders. `held`: the payment
    refs already stored for an order this connection stored before (by its gid); only those are
    in its row, so the import compares what it keeps, and the new ones are added apart
    (`new_payments_add`)."""
    held = held or {}
    customers: dict[str, dict] = {}
    orders = []
    for node in nodes:
        currency_check(node)
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
            if node["id"] in held and txn["id"] not in held[node["id"]]:
                continue
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


def shopify_orders_apply(
    *, connection: ShopifyConnection, nodes: list[dict], refused: list[tuple[dict, str]] = ()
) -> SyncCounts:
    """Write these Shopify orders (one page, or one order a webhook re-read) into the tenant, in
    one transaction: the import, the gid mapping, payments new to stored orders, then refunds
    made in Shopify's admin. A node older than what was already applied (`updatedAt`) changes
    nothing: any order of delivery ends in the newest state. `refused`: (node, reason) of orders
    already refused on the way in (nested.py), recorded with the rest.

    An order the mapping refuses is skipped, not the page: the page is applied at once and, only
    when that fails, again order by order in savepoints, so the others are stored and the refused
    one is named (module doc). Queries: a constant number per call when nothing is refused, plus
    one transaction per refund made in the admin that the ledger does not hold yet."""
    counts = SyncCounts(orders=len(nodes) + len(refused))
    if not nodes and not refused:
        return counts
    skipped = list(refused)
    with transaction.atomic():
        # One writer per shop at a time: a webhook and the sync applying the same order serialise here.
        locked = ShopifyConnection.objects.select_for_update().filter(pk=connection.pk).first()
        try:
            with transaction.atomic():
                counts.add(_orders_write(connection=connection, nodes=nodes))
        except ORDER_REFUSALS:
            for node in nodes:
                try:
                    with transaction.atomic():
                        counts.add(_orders_write(connection=connection, nodes=[node]))
                except ORDER_REFUSALS as exc:
                    skipped.append((node, _refusal_reason(exc)))
        applied = [n for n in nodes if all(n is not node for node, _ in skipped)]
        counts.skipped = len(skipped)
        skipped = [(node, shown(reason)) for node, reason in skipped]
        for node, reason in skipped:
            warning = f"{order_label(node)}: skipped, nothing of it stored: {reason}"
            counts.warnings.append(warning)
            logger.warning("shopify %s: %s", connection.shop_domain, warning)
        _refusals_remember(connection=locked or connection, applied=applied, skipped=skipped)
    return counts


def _refusal_reason(exc: Exception) -> str:
    if isinstance(exc, DomainError):
        errors = (exc.details or {}).get("errors")
        return "; ".join(str(e) for e in errors) if errors else exc.message
    # Shop data of the wrong shape: the warning names the failure; the traceback goes to the log.
    logger.info("shopify: order data refused", exc_info=True)
    return f"malformed order data ({type(exc).__name__}: {str(exc)[:200]})"


def _refusal_key(node) -> str:
    ident = node.get("id") if isinstance(node, dict) else None
    return shown(ident, 160) if isinstance(ident, str) and ident else order_label(node)


def _refusals_remember(*, connection: ShopifyConnection, applied: list[dict], skipped: list[tuple[dict, str]]) -> None:
    """The connection's `refused_orders`: each order refused and not applied since, with the
    reason and when (the operator's view in the admin). Written only when it changes."""
    refusals = dict(connection.refused_orders or {})
    before = dict(refusals)
    for node in applied:
        refusals.pop(_refusal_key(node), None)
    at = timezone.now().isoformat()
    for node, reason in skipped:
        refusals[_refusal_key(node)] = {"order": order_label(node), "reason": reason, "at": at}
    if len(refusals) > MAX_REFUSALS_KEPT:
        newest = sorted(refusals.items(), key=lambda item: item[1]["at"])[-MAX_REFUSALS_KEPT:]
        refusals = dict(newest)
    if refusals != before:
        ShopifyConnection.objects.filter(pk=connection.pk).update(refused_orders=refusals)


def _orders_write(*, connection: ShopifyConnection, nodes: list[dict]) -> SyncCounts:
    """The write of shopify_orders_apply, for nodes that may all be refused together."""
    counts = SyncCounts()
    tenant = connection.tenant
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
    stored = {
        o.external_id: o
        for o in Order.objects.filter(tenant=tenant, external_id__in=[n["name"] for n in fresh])
        .select_related("shopify")
        .prefetch_related("payments")
    }
    for node in fresh:
        order = stored.get(node["name"])
        link = getattr(order, "shopify", None) if order is not None else None
        if link is not None and link.shopify_id != node["id"]:
            # Two Shopify orders under one name (a renamed order): never merged into one record.
            raise ShopifyOrderRefused(f"{order_label(node)}: {node['name']} is already {link.shopify_id}")
        if order is not None and order.currency != node.get("currencyCode"):
            raise ShopifyOrderRefused(
                f"{order_label(node)}: now in {node.get('currencyCode')}, recorded in {order.currency}; "
                "refunds were counted in that currency"
            )
    # The payments of orders this connection stored before, all of them Shopify's transactions:
    # those orders get Shopify's new ones. An order of the same name whose payments came another
    # way (a file import) keeps them and gets none of Shopify's added.
    held = {}
    for node in fresh:
        order = stored.get(node["name"])
        if node["id"] in known and order is not None and known[node["id"]].order_id == order.pk:
            refs = {p.payment_ref for p in order.payments.all()}
            if all(_TRANSACTION_GID.fullmatch(ref) for ref in refs):
                held[node["id"]] = refs
    result = orders_import(data=import_data(tenant_slug=tenant.slug, nodes=fresh, held=held))
    counts.created, counts.updated = result.orders.created, result.orders.updated
    counts.warnings.extend(result.warnings)
    by_name = {
        o.external_id: o for o in Order.objects.filter(tenant=tenant, external_id__in=[n["name"] for n in fresh])
    }
    added = new_payments_add(nodes=[n for n in fresh if n["id"] in held], held=held, orders=by_name)
    counts.payments_added = sum(added.values())
    # An order whose only change is a new payment is updated too (the import counted status and note).
    counts.updated += sum(
        1 for name in added if (stored[name].status, stored[name].note) == (by_name[name].status, by_name[name].note)
    )
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


def new_payments_add(*, nodes: list[dict], held: dict[str, set[str]], orders: dict[str, Order]) -> dict[str, int]:
    """The paid transactions of stored orders that they do not hold yet (a capture after the
    authorisation, a second capture), each a new payment of its order; the payments already
    stored are never touched. Returns {order name: payments added}. The orders are locked first
    (the payout's lock order), so a payout deciding legs sees the new payment or runs after."""
    wanted = [(node, txn) for node in nodes for txn in paid_transactions(node) if txn["id"] not in held[node["id"]]]
    if not wanted:
        return {}
    names = sorted({node["name"] for node, _ in wanted})
    list(
        Order.objects.select_for_update(of=("self",))
        .filter(pk__in=[orders[n].pk for n in names])
        .order_by("pk")
        .values_list("pk", flat=True)
    )
    methods = {
        (pm.customer_id, pm.external_id): pm
        for pm in PaymentMethod.objects.filter(
            customer_id__in={orders[n].customer_id for n in names},
            external_id__in={(t.get("gateway") or "unknown")[:100] for _, t in wanted},
        )
    }
    payments, added = [], {}
    for node, txn in wanted:
        order = orders[node["name"]]
        gateway = (txn.get("gateway") or "unknown")[:100]
        kind, brand = method_for_gateway(gateway)
        amount = shop_money(txn.get("amountSet"))
        # What the import's format checks for its own rows: a clean reference, a positive amount.
        if not isinstance(txn["id"], str) or not _TRANSACTION_GID.fullmatch(txn["id"]):
            raise ShopifyOrderRefused(f"{order_label(node)}: a transaction id that is not a Shopify id")
        if amount <= 0:
            raise ShopifyOrderRefused(f"{order_label(node)}: transaction {txn['id']} pays {amount}")
        payments.append(
            Payment(
                order=order,
                payment_method=methods.get((order.customer_id, gateway)),
                method=kind,
                amount=amount,
                currency=order.currency,
                card_brand=brand,
                payment_ref=txn["id"][:200],
            )
        )
        added[node["name"]] = added.get(node["name"], 0) + 1
    Payment.objects.bulk_create(payments)
    return added


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
