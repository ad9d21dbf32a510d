"""The τ-bench retail shop as a tenant: a converter from its files to the order import format
(ledger/import_format.py), the tenant policy that encodes its wiki.md refund rules, and the import itself.

The converter is a plain function over the parsed JSON so tests can check it line by line.
Amounts in the source are JSON floats; every one is read by `dec` as the decimal written in the
file (summing the floats would not: 209 of the 1,000 orders have an item sum that differs from
the paid total in binary floating point).
"""

import json
from contextlib import contextmanager
from dataclasses import dataclass
from decimal import Decimal
from pathlib import Path

from django.conf import settings
from django.contrib.auth import get_user_model
from django.db import transaction
from django.utils import timezone

from approvals.models import RefundPolicy
from ledger.importing import orders_import
from ledger.models import Tenant
from ledger.money import ZERO, money_parse
from ledger.tenancy import membership_ensure, roles_sync

TAU_TENANT = "tau-retail"
TAU_TENANT_NAME = "τ-bench retail shop"
TAU_POLICY_VERSION = "tau-retail-policy-v1"
TAU_CURRENCY = "USD"
# τ-bench orders carry no dates and its policy has no refund window: one fixed, documented date.
TAU_PLACED_AT = "2024-05-15T12:00:00Z"
TAU_USERS = [("tau-support", ["support"]), ("tau-finance", ["finance"]), ("tau-finance2", ["finance"])]

TAU_POLICY_TEXT = """Refund policy tau-retail-policy-v1 (the τ-bench retail wiki's rules for money coming back)
1. There is no refund window.
2. Cancel pending order: only an order whose status is 'pending' can be cancelled; the whole paid
   total is refunded to the original payment method.
3. Return delivered order: only items of an order whose status is 'delivered' can be returned; the
   refund is the sum of the prices of the returned items (an item id may repeat: one unit each), to
   the original payment method or an existing gift card of the customer.
4. Exchange delivered order: money comes back only when the new items are cheaper; the price
   difference is refunded like a return.
5. 'processed' and 'cancelled' orders can be neither cancelled nor returned: a person decides.
6. A refund is never above what is still refundable on the order, and finance approves every refund."""


def dec(value) -> Decimal:
    """A τ-bench amount (a JSON float) as the exact decimal written in the file: a float's repr
    is the shortest text that reads back as it ("47.84"), which the money parser then takes like
    any amount. A value with more places than cents is refused (a ValueError), never rounded."""
    return money_parse(repr(value) if isinstance(value, float) else value)


# The vendored copy (MIT, see its LICENSE and ORIGIN.md), found from this module, not the cwd.
TAU_DATA_DIR = Path(__file__).resolve().parent / "data" / "tau_bench_retail"


@dataclass
class TauData:
    users: dict
    orders: dict
    products: dict
    tasks: dict  # split name -> list of tasks

    @property
    def item_prices(self) -> dict[str, Decimal]:
        return {
            item_id: dec(variant["price"])
            for product in self.products.values()
            for item_id, variant in product["variants"].items()
        }


def tau_load(directory: Path | str | None = None) -> TauData:
    directory = Path(directory) if directory else TAU_DATA_DIR

    def read(name, default=None):
        path = directory / name
        if not path.exists():
            if default is not None:
                return default
            raise FileNotFoundError(f"{path} not found: is this a τ-bench retail data directory?")
        try:
            return json.loads(path.read_text(encoding="utf-8"))
        except (ValueError, RecursionError) as exc:  # not UTF-8, not JSON, nested too deeply
            raise ValueError(f"{path} is not a readable JSON file: {exc}") from None

    return TauData(
        users=read("users.json"),
        orders=read("orders.json"),
        products=read("products.json", {}),
        tasks={"train": read("tasks_train.json", []), "dev": read("tasks_dev.json", [])},
    )


def tau_payment_method(method: dict) -> dict:
    source = method["source"]
    if source == "credit_card":
        return {
            "id": method["id"],
            "kind": "card",
            "brand": method.get("brand", ""),
            "last4": method.get("last_four", ""),
        }
    if source == "gift_card":
        return {"id": method["id"], "kind": "gift_card", "balance": str(dec(method.get("balance", 0)))}
    if source == "paypal":
        return {"id": method["id"], "kind": "paypal"}
    raise ValueError(f"payment method {method.get('id')} has an unknown source {source!r}")


def tau_customer(user_id: str, user: dict) -> dict:
    name = user.get("name") or {}
    return {
        "id": user_id,
        "name": f"{name.get('first_name', '')} {name.get('last_name', '')}".strip(),
        "email": user.get("email", ""),
        "address": user.get("address") or {},
        "payment_methods": [tau_payment_method(m) for m in user.get("payment_methods", {}).values()],
    }


def tau_order(order: dict, user: dict) -> dict:
    """One τ-bench order in the import format. The total is what was paid (payments in the
    payment history); refunds in the history become earlier refunds of the ledger."""
    methods = user.get("payment_methods", {})
    payments = [h for h in order["payment_history"] if h["transaction_type"] == "payment"]
    refunds = [h for h in order["payment_history"] if h["transaction_type"] == "refund"]
    if not payments:
        raise ValueError("it has no payment")
    total = sum((dec(p["amount"]) for p in payments), ZERO)
    method_id = payments[0]["payment_method_id"]
    if method_id not in methods:
        raise ValueError(f"it was paid with {method_id}, not a method of {order['user_id']}")
    method = tau_payment_method(methods[method_id])
    payment = {"method": method["kind"], "payment_method_id": method_id}
    if method["kind"] == "card":
        payment.update(card_brand=method["brand"], card_last4=method["last4"])
    item_ids = [item["item_id"] for item in order["items"]]
    converted_refunds = []
    for refund in refunds:
        amount = dec(refund["amount"])
        # A refund of the whole paid total (a cancellation) covers every line of the order.
        converted_refunds.append(
            {
                "amount": str(amount),
                "payment_method_id": refund["payment_method_id"],
                "items": item_ids if amount == total else [],
            }
        )
    return {
        "id": order["order_id"],
        "customer": order["user_id"],
        "total": str(total),
        "currency": TAU_CURRENCY,
        "placed_at": TAU_PLACED_AT,
        "status": order["status"],
        "address": order.get("address") or {},
        "items": [
            {
                "id": item["item_id"],
                "name": item["name"],
                "price": str(dec(item["price"])),
                "quantity": 1,  # a repeated item id is a separate line, as in the source
                "product_id": item.get("product_id", ""),
                "options": item.get("options") or {},
            }
            for item in order["items"]
        ],
        "payment": payment,
        "refunds": converted_refunds,
    }


@contextmanager
def _record(where: str):
    """A malformed record (a missing key, a list for an object...) as a ValueError naming it,
    which import_tau_bench reports, instead of a KeyError or TypeError from deep in the converter."""
    try:
        yield
    except KeyError as exc:
        raise ValueError(f"{where}: {exc.args[0]!r} is missing") from None
    except (ValueError, TypeError, AttributeError, ArithmeticError) as exc:
        raise ValueError(f"{where}: {exc}") from None


def _records(name: str, value) -> dict:
    if not isinstance(value, dict) or not all(isinstance(v, dict) for v in value.values()):
        raise ValueError(f"{name} must be a JSON object of records by id")
    return value


def tau_convert(*, users: dict, orders: dict, order_ids: list[str] | None = None, tenant: str = TAU_TENANT) -> dict:
    """τ-bench users + orders (parsed JSON) → the order import format. With `order_ids`, only
    those orders and their customers (an eval case imports only what it needs). A malformed
    record is a ValueError naming its file and id."""
    users, orders = _records("users.json", users), _records("orders.json", orders)
    wanted = list(orders) if order_ids is None else list(order_ids)
    for order_id in wanted:
        if order_id not in orders:
            raise ValueError(f"orders.json: there is no order {order_id}")
        with _record(f"orders.json: order {order_id}"):
            if orders[order_id]["user_id"] not in users:
                raise ValueError(f"its user {orders[order_id]['user_id']} is not in users.json")
    selected = [orders[order_id] for order_id in wanted]
    customer_ids = list(users) if order_ids is None else list(dict.fromkeys(o["user_id"] for o in selected))
    customers = []
    for user_id in customer_ids:
        with _record(f"users.json: user {user_id}"):
            customers.append(tau_customer(user_id, users[user_id]))
    converted = []
    for order_id, order in zip(wanted, selected, strict=True):
        with _record(f"orders.json: order {order_id}"):
            converted.append(tau_order(order, users[order["user_id"]]))
    return {"tenant": tenant, "customers": customers, "orders": converted}


def tau_policy_publish(tenant: Tenant) -> RefundPolicy:
    """tau-retail-policy-v1: the wiki's refund rules as data the policy gate reads."""
    policy, _ = RefundPolicy.objects.get_or_create(
        tenant=tenant,
        version=TAU_POLICY_VERSION,
        defaults=dict(
            status=RefundPolicy.Status.PUBLISHED,
            window_days=None,
            full_refund_statuses=["pending"],
            item_refund_statuses=["delivered"],
            full_refund_destinations=["original"],
            item_refund_destinations=["original", "gift_card"],
            two_approver_threshold=None,
            text=TAU_POLICY_TEXT,
            published_at=timezone.now(),
        ),
    )
    return policy


def tau_users_ensure(tenant: Tenant, users=TAU_USERS, *, password: str | None = None) -> dict:
    """The tenant's staff with the demo's roles. Without a password the users cannot log in
    (an operator sets one); eval sandboxes use that to skip the slow password hashing."""
    groups = {role: synced.group for role, synced in roles_sync().items()}
    User = get_user_model()
    made = {}
    for username, roles in users:
        user, created = User.objects.get_or_create(
            username=username, defaults={"email": f"{username}@{tenant.slug}.example"}
        )
        if created:
            if password:
                user.set_password(password)
            else:
                user.set_unusable_password()
            user.is_staff = "finance" in roles
            user.save()
        # Before any role: a user of another tenant with this name is refused, not promoted.
        membership_ensure(user=user, tenant=tenant)
        user.groups.add(*(groups[r] for r in roles))
        made[username] = user
    return made


def tau_bench_import(*, directory: Path | str | None = None):
    """Import the τ-bench shop as tenant tau-retail: staff, policy, customers and orders.
    Safe to run twice: the order import updates nothing a refund depends on and duplicates nothing."""
    data = tau_load(directory)
    converted = tau_convert(users=data.users, orders=data.orders)
    with transaction.atomic():
        tenant, _ = Tenant.objects.get_or_create(slug=TAU_TENANT, defaults={"name": TAU_TENANT_NAME})
        tau_users_ensure(tenant, password=settings.DEMO_PASSWORD)
        policy = tau_policy_publish(tenant)
        result = orders_import(data=converted)
    return tenant, policy, result
