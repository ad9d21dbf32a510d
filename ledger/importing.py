"""Loading a shop's customers and orders into a tenant: `orders_import(data=...)`.

This is how the shop's records reach the product (`manage.py import_orders PATH`; a shop
integration would call the same service). The file is read first (`ledger.import_format`, the
format and its rules) and checked against the tenant's records; a file with any problem is
refused whole, naming the record and the field, e.g. ``orders[3] (ORD-9004): total must not be
negative (-1.00)``. Only a valid file is written, in one transaction.

- ``customer`` names a customer of the file or one the tenant already has; a payment or refund
  names a payment method of that customer (of the file or the tenant), and a payment without a
  ``method`` takes the method's kind.
- ``refunds`` are written to the ledger through ``ledger_refund_issue`` with source ``import``
  and the idempotency key ``import:<tenant>:<order>:<n>`` (n counts from 1 in the list), so a
  re-import replays them, and a re-import that changes an already imported refund is refused.
  The ledger's own checks apply (never above the order total, an item once).

Re-importing the same ids duplicates nothing. What a refund depends on never changes on an
existing order: its customer, total, currency, placed_at, items and payments stay as first
imported; a difference there is reported as a warning in the result, not applied. What may
change is applied and counted as ``updated``: an order's status, note and address; a
customer's name, email and address; a payment method's brand, last four and gift card
balance (its kind may not change: that is an error). New payment methods and new refunds of
an existing order are added.

A gift card the ledger credited (store credit this product refunded) is a ledger fact: its
balance is its opening balance plus the ledger's movements (``gift_card_balance``). A re-import
whose balance for such a card disagrees is a conflict: that card is left as it is (nothing of it
is written), the rest of the file is imported, and the result lists the conflict for a person.
A card the ledger never moved takes the shop's balance as its new opening balance. The import
takes the locks a store-credit payout takes, in the same order (the customer's orders, then the
gift cards), so a payout racing an import is either seen by it or runs after it.
"""

from dataclasses import dataclass, field

from django.db import transaction
from django.db.models import Q

from .exceptions import DomainError, ImportRefused
from .import_format import CustomerRow, OrderRow, import_file_parse
from .models import Customer, Order, OrderItem, Payment, PaymentMethod, RefundEntry, Tenant
from .money import ZERO
from .selectors import store_credit_movements
from .services import ledger_refund_issue

MAX_ERRORS_SHOWN = 20


@dataclass
class Counts:
    created: int = 0
    updated: int = 0
    unchanged: int = 0

    def __str__(self):
        return f"{self.created} created, {self.updated} updated, {self.unchanged} unchanged"


@dataclass
class ImportResult:
    tenant: str
    customers: Counts = field(default_factory=Counts)
    payment_methods: Counts = field(default_factory=Counts)
    orders: Counts = field(default_factory=Counts)
    refunds: Counts = field(default_factory=Counts)
    warnings: list[str] = field(default_factory=list)
    # Records refused because they disagree with the ledger (nothing of them was written).
    conflicts: list[str] = field(default_factory=list)

    @property
    def created(self) -> int:
        return sum(c.created for c in (self.customers, self.payment_methods, self.orders, self.refunds))

    @property
    def updated(self) -> int:
        return sum(c.updated for c in (self.customers, self.payment_methods, self.orders, self.refunds))

    @property
    def unchanged(self) -> int:
        return sum(c.unchanged for c in (self.customers, self.payment_methods, self.orders, self.refunds))

    def summary(self) -> str:
        return (
            f"tenant {self.tenant}: customers {self.customers}; payment methods {self.payment_methods}; "
            f"orders {self.orders}; refunds {self.refunds}"
        )


def orders_import(*, data: dict) -> ImportResult:
    """Read a whole import file, check it against the tenant, then write it in one transaction
    (see the module doc). ImportRefused, with nothing written, names every problem."""
    parsed = import_file_parse(data)
    errors = parsed.errors
    tenant = Tenant.objects.filter(slug=parsed.tenant).first() if parsed.tenant else None
    if parsed.tenant and tenant is None:
        errors.insert(0, f"tenant {parsed.tenant!r} does not exist")
    if tenant is not None and not errors:
        _check_references(tenant, parsed.customers, parsed.orders, errors)
    if errors:
        _refuse(errors)
    result = ImportResult(tenant=tenant.slug)
    with transaction.atomic():
        _lock_store_credit(tenant, parsed.customers, parsed.orders)
        customer_by_id = _write_customers(tenant, parsed.customers, result)
        _write_orders(tenant, parsed.orders, customer_by_id, result)
    return result


def _refuse(errors: list[str]):
    shown = errors[:MAX_ERRORS_SHOWN]
    more = f"\n... and {len(errors) - len(shown)} more" if len(errors) > len(shown) else ""
    raise ImportRefused(
        "The import file was refused; nothing was imported.\n" + "\n".join(shown) + more,
        details={"errors": errors},
    )


def _check_references(
    tenant: Tenant, customers: list[CustomerRow], orders: list[OrderRow], errors: list[str]
) -> tuple[dict, dict]:
    """Customers and payment methods the orders name must exist in the file or in the tenant."""
    known_customers = {c.id: c for c in customers}
    existing = {
        c.external_id: c for c in Customer.objects.filter(tenant=tenant, external_id__in={o.customer for o in orders})
    }
    existing_methods: dict[str, dict[str, PaymentMethod]] = {}
    for pm in PaymentMethod.objects.filter(
        customer__tenant=tenant, customer__external_id__in={*known_customers, *(o.customer for o in orders)}
    ).select_related("customer"):
        existing_methods.setdefault(pm.customer.external_id, {})[pm.external_id] = pm
    for c in customers:
        for pm in c.payment_methods:
            stored = existing_methods.get(c.id, {}).get(pm.id)
            if stored is not None and stored.kind != pm.kind:
                errors.append(f"{c.label}: payment method {pm.id} is a {stored.kind}, the file says {pm.kind}")
    for o in orders:
        if o.customer not in known_customers and o.customer not in existing:
            errors.append(f"{o.label}: customer {o.customer} is neither in the file nor a customer of {tenant.slug}")
            continue
        methods = {pm.id: pm.kind for pm in getattr(known_customers.get(o.customer), "payment_methods", [])}
        methods.update({k: v.kind for k, v in existing_methods.get(o.customer, {}).items() if k not in methods})
        for where, pm_id in [("payment", p.payment_method_id) for p in o.payments] + [
            ("refund", rf.payment_method_id) for rf in o.refunds
        ]:
            if pm_id and pm_id not in methods:
                errors.append(f"{o.label}: {where} names payment method {pm_id}, which {o.customer} does not have")
        for p in o.payments:
            if not p.method and p.payment_method_id in methods:
                p.method = methods[p.payment_method_id]
        units = {}
        for item in o.items:
            units[item.id] = units.get(item.id, 0) + item.quantity
        for j, rf in enumerate(o.refunds):
            for item_id in rf.items:
                units[item_id] = units.get(item_id, 0) - 1
                if units[item_id] < 0:
                    errors.append(
                        f"{o.label}: refunds[{j}] refunds item {item_id}, which is not (or no longer) on the order"
                    )
                    break
    return existing, existing_methods


def _lock_store_credit(tenant: Tenant, customers: list[CustomerRow], orders: list[OrderRow]):
    """Take the locks a store-credit payout takes, in its order: the order rows first (of the
    file's customers with gift cards, and the file's own orders), then those gift cards. A payout
    holding them is waited for, so its movement is counted below."""
    with_gift_cards = {
        c.id for c in customers if any(pm.kind == PaymentMethod.Kind.GIFT_CARD for pm in c.payment_methods)
    }
    if not with_gift_cards:
        return
    list(
        Order.objects.select_for_update(of=("self",))
        .filter(tenant=tenant)
        .filter(Q(customer__external_id__in=with_gift_cards) | Q(external_id__in=[o.id for o in orders]))
        .order_by("pk")
        .values_list("pk", flat=True)
    )
    list(
        PaymentMethod.objects.select_for_update(of=("self",))
        .filter(customer__tenant=tenant, customer__external_id__in=with_gift_cards, kind=PaymentMethod.Kind.GIFT_CARD)
        .order_by("pk")
        .values_list("pk", flat=True)
    )


def _gift_card_balance_import(pm: PaymentMethod, shop_balance, moved, label: str, result: ImportResult):
    """(balance, opening balance) to keep for a stored gift card the file names again, or None
    when the file's balance disagrees with the ledger's (a conflict, recorded in `result`)."""
    if shop_balance is None:  # the file does not say: keep what is recorded
        return pm.balance, pm.opening_balance
    if moved is None:  # the ledger never moved this card: the shop's balance is the truth
        return shop_balance, shop_balance
    derived = (pm.opening_balance or ZERO) + moved
    if shop_balance != derived:
        result.conflicts.append(
            f"{label}: gift card {pm.external_id}: the file's balance {shop_balance} disagrees with the "
            f"ledger's {derived} (opening balance {pm.opening_balance or ZERO} plus {moved} store credit "
            "refunded by this product); refused, nothing of this card was changed."
        )
        return None
    return derived, pm.opening_balance


def _write_customers(tenant: Tenant, rows: list[CustomerRow], result: ImportResult) -> dict[str, Customer]:
    existing = {c.external_id: c for c in Customer.objects.filter(tenant=tenant, external_id__in=[r.id for r in rows])}
    new, changed = [], []
    for row in rows:
        customer = existing.get(row.id)
        if customer is None:
            new.append(Customer(tenant=tenant, external_id=row.id, name=row.name, email=row.email, address=row.address))
        elif (customer.name, customer.email, customer.address) != (row.name, row.email, row.address):
            customer.name, customer.email, customer.address = row.name, row.email, row.address
            changed.append(customer)
        else:
            result.customers.unchanged += 1
    Customer.objects.bulk_create(new)
    Customer.objects.bulk_update(changed, ["name", "email", "address"])
    result.customers.created += len(new)
    result.customers.updated += len(changed)
    by_id = {c.external_id: c for c in [*existing.values(), *new]}

    stored = {
        (pm.customer_id, pm.external_id): pm for pm in PaymentMethod.objects.filter(customer__in=list(by_id.values()))
    }
    moved = store_credit_movements(
        method_ids=[pm.pk for pm in stored.values() if pm.kind == PaymentMethod.Kind.GIFT_CARD]
    )
    new_methods, changed_methods = [], []
    for row in rows:
        customer = by_id[row.id]
        for pm_row in row.payment_methods:
            pm = stored.get((customer.pk, pm_row.id))
            values = (pm_row.brand, pm_row.last4, pm_row.balance, pm.opening_balance if pm else None)
            if pm is not None and pm.kind == PaymentMethod.Kind.GIFT_CARD:
                balances = _gift_card_balance_import(pm, pm_row.balance, moved.get(pm.pk), row.label, result)
                if balances is None:
                    continue
                values = (pm_row.brand, pm_row.last4, *balances)
            if pm is None:
                new_methods.append(
                    PaymentMethod(
                        customer=customer,
                        external_id=pm_row.id,
                        kind=pm_row.kind,
                        brand=pm_row.brand,
                        last4=pm_row.last4,
                        balance=pm_row.balance,
                        opening_balance=pm_row.balance,
                    )
                )
            elif (pm.brand, pm.last4, pm.balance, pm.opening_balance) != values:
                pm.brand, pm.last4, pm.balance, pm.opening_balance = values
                changed_methods.append(pm)
            else:
                result.payment_methods.unchanged += 1
    PaymentMethod.objects.bulk_create(new_methods)
    PaymentMethod.objects.bulk_update(changed_methods, ["brand", "last4", "balance", "opening_balance"])
    result.payment_methods.created += len(new_methods)
    result.payment_methods.updated += len(changed_methods)
    return by_id


def _write_orders(tenant: Tenant, rows: list[OrderRow], customer_by_id: dict[str, Customer], result: ImportResult):
    missing = {r.customer for r in rows} - set(customer_by_id)
    customer_by_id = {
        **customer_by_id,
        **{c.external_id: c for c in Customer.objects.filter(tenant=tenant, external_id__in=missing)},
    }
    methods: dict[tuple[int, str], PaymentMethod] = {
        (pm.customer_id, pm.external_id): pm
        for pm in PaymentMethod.objects.filter(customer__in=list(customer_by_id.values()))
    }
    existing = {
        o.external_id: o
        for o in Order.objects.filter(tenant=tenant, external_id__in=[r.id for r in rows])
        .select_related("customer")
        .prefetch_related("items", "payments__payment_method")
    }
    new_orders, changed = [], []
    for row in rows:
        order = existing.get(row.id)
        if order is None:
            new_orders.append(
                Order(
                    tenant=tenant,
                    customer=customer_by_id[row.customer],
                    external_id=row.id,
                    total=row.total,
                    currency=row.currency,
                    placed_at=row.placed_at,
                    status=row.status,
                    note=row.note,
                    address=row.address,
                )
            )
            continue
        _warn_about_kept_fields(order, row, result)
        if (order.status, order.note, order.address) != (row.status, row.note, row.address):
            order.status, order.note, order.address = row.status, row.note, row.address
            changed.append(order)
        else:
            result.orders.unchanged += 1
    Order.objects.bulk_create(new_orders, batch_size=500)
    Order.objects.bulk_update(changed, ["status", "note", "address"], batch_size=500)
    result.orders.created += len(new_orders)
    result.orders.updated += len(changed)

    order_by_id = {o.external_id: o for o in [*existing.values(), *new_orders]}
    lines, payments = [], []
    for row in rows:
        if row.id in existing:
            continue
        order = order_by_id[row.id]
        for line_no, item in enumerate(row.items, start=1):
            lines.append(
                OrderItem(
                    order=order,
                    line_no=line_no,
                    item_id=item.id,
                    name=item.name,
                    price=item.price,
                    quantity=item.quantity,
                    product_id=item.product_id,
                    options=item.options,
                )
            )
        for p in row.payments:
            pm = methods.get((order.customer_id, p.payment_method_id)) if p.payment_method_id else None
            payments.append(
                Payment(
                    order=order,
                    payment_method=pm,
                    method=p.method,
                    amount=p.amount,
                    currency=row.currency,
                    card_brand=p.card_brand or (pm.brand if pm and pm.kind == PaymentMethod.Kind.CARD else ""),
                    card_last4=p.card_last4 or (pm.last4 if pm and pm.kind == PaymentMethod.Kind.CARD else ""),
                    payment_ref=p.payment_ref,
                )
            )
    OrderItem.objects.bulk_create(lines, batch_size=1000)
    Payment.objects.bulk_create(payments, batch_size=1000)

    keys = [f"import:{tenant.slug}:{row.id}:{n}" for row in rows for n in range(1, len(row.refunds) + 1)]
    recorded = set(RefundEntry.objects.filter(idempotency_key__in=keys).values_list("idempotency_key", flat=True))
    for row in rows:
        order = order_by_id[row.id]
        for n, refund in enumerate(row.refunds, start=1):
            key = f"import:{tenant.slug}:{row.id}:{n}"
            pm = methods.get((order.customer_id, refund.payment_method_id)) if refund.payment_method_id else None
            paid_with = {p.payment_method_id for p in row.payments}
            kind = (
                "gift_card"
                if pm is not None and pm.kind == PaymentMethod.Kind.GIFT_CARD and pm.external_id not in paid_with
                else "original"
            )
            try:
                ledger_refund_issue(
                    order=order,
                    amount=refund.amount,
                    currency=order.currency,
                    idempotency_key=key,
                    destination=pm,
                    destination_kind=kind,
                    item_ids=refund.items,
                    source=RefundEntry.Source.IMPORT,
                    reason=refund.reason,
                )
            except DomainError as exc:
                # Raising rolls the whole import back: a bad file writes nothing.
                raise ImportRefused(
                    f"The import file was refused; nothing was imported.\n{row.label}: refunds[{n - 1}]: {exc.message}",
                    details={"errors": [f"{row.label}: refunds[{n - 1}]: {exc.message}"]},
                ) from exc
            if key in recorded:
                result.refunds.unchanged += 1
            else:
                result.refunds.created += 1


def _warn_about_kept_fields(order: Order, row: OrderRow, result: ImportResult):
    kept = []
    if order.customer.external_id != row.customer:
        kept.append(f"customer {order.customer.external_id}")
    if order.total != row.total:
        kept.append(f"total {order.total}")
    if order.currency != row.currency:
        kept.append(f"currency {order.currency}")
    if order.placed_at != row.placed_at:
        kept.append(f"placed_at {order.placed_at.isoformat()}")
    stored_items = [(i.item_id, i.price, i.quantity) for i in order.items.all()]
    if stored_items != [(i.id, i.price, i.quantity) for i in row.items]:
        kept.append("items")
    stored_payments = sorted(
        (p.amount, p.payment_method.external_id if p.payment_method_id else "") for p in order.payments.all()
    )
    if stored_payments != sorted((p.amount, p.payment_method_id) for p in row.payments):
        kept.append("payments")
    if kept:
        result.warnings.append(f"{row.label}: already imported; kept its recorded {', '.join(kept)}")
