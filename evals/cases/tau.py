"""The τ-bench retail suite: one case per refund action of every training and dev task.

An action becomes a case when money comes back: `cancel_pending_order` (the paid total, to the
original method), `return_delivered_order_items` (the sum of the returned items' prices, to the
original method or an existing gift card) and `exchange_delivered_order_items` when the new
items are cheaper (the difference, to the named method). The expected outcome is computed here
from the source files, as the benchmark's own tool would compute it, and checked against the
data at build time: a case whose expectation does not follow from the files is an error, not
a silently wrong case.
"""

from collections import Counter
from decimal import Decimal

from evals.tau import TAU_POLICY_VERSION, TauData, dec, tau_convert, tau_load
from ledger.money import ZERO

REFUND_ACTIONS = ("cancel_pending_order", "return_delivered_order_items", "exchange_delivered_order_items")
# The files the cases are built from (tau_load reads these from the data directory).
TAU_DATA_FILES = ("users.json", "orders.json", "products.json", "tasks_train.json", "tasks_dev.json")


class CaseBuildError(ValueError):
    """A task's expectation does not follow from the data files."""


def tau_cases(data: TauData | None = None) -> list[dict]:
    """Every refund case of the training and dev tasks (of the vendored data by default)."""
    if data is None:
        data = tau_load()
    prices = data.item_prices
    cases = []
    for split, tasks in data.tasks.items():
        for task_index, task in enumerate(tasks):
            for action_index, action in enumerate(task.get("actions", [])):
                if action["name"] not in REFUND_ACTIONS:
                    continue
                case = tau_case(data, prices, split, task_index, task, action_index, action)
                if case is not None:
                    cases.append(case)
    return cases


def _paid_and_refunded(order: dict) -> tuple[Decimal, Decimal]:
    paid = sum((dec(h["amount"]) for h in order["payment_history"] if h["transaction_type"] == "payment"), ZERO)
    refunded = sum((dec(h["amount"]) for h in order["payment_history"] if h["transaction_type"] == "refund"), ZERO)
    return paid, refunded


def _items_value(order: dict, item_ids: list[str], where: str) -> Decimal:
    """Sum of the prices of the named units; each id matches one line (ids may repeat)."""
    available = Counter(item["item_id"] for item in order["items"])
    wanted = Counter(item_ids)
    for item_id, count in wanted.items():
        if available[item_id] < count:
            raise CaseBuildError(f"{where}: item {item_id} x{count} is not on {order['order_id']} that often.")
    price = {item["item_id"]: dec(item["price"]) for item in order["items"]}
    return sum((price[item_id] for item_id in item_ids), ZERO)


def _paid_with(order: dict) -> str:
    return next(h["payment_method_id"] for h in order["payment_history"] if h["transaction_type"] == "payment")


def _destination(data: TauData, user_id: str, order: dict, method_id: str) -> str:
    """'original' (the order's payment method), 'gift_card' (another gift card of the user), or
    'other' (another card or PayPal account: outside what the policy lets a refund go to)."""
    if method_id == _paid_with(order):
        return "original"
    method = data.users[user_id]["payment_methods"].get(method_id)
    if method is None:
        raise CaseBuildError(f"{method_id} is not a payment method of {user_id}.")
    return "gift_card" if method["source"] == "gift_card" else "other"


def _orders_of(data: TauData, user_id: str, first: str) -> list[str]:
    """The case's order first, then the user's other orders (as orders.json lists them)."""
    return [first, *(oid for oid, o in data.orders.items() if o["user_id"] == user_id and oid != first)]


def tau_case(data: TauData, prices: dict, split: str, task_index: int, task: dict, action_index: int, action: dict):
    kind = {
        "cancel_pending_order": "cancel",
        "return_delivered_order_items": "return",
        "exchange_delivered_order_items": "exchange",
    }[action["name"]]
    kwargs = action["kwargs"]
    order_id = kwargs["order_id"]
    user_id = task["user_id"]
    where = f"tau {split} task {task_index} action {action_index}"
    order = data.orders.get(order_id)
    if order is None:
        raise CaseBuildError(f"{where}: order {order_id} is not in orders.json.")
    if order["user_id"] != user_id:
        raise CaseBuildError(f"{where}: order {order_id} belongs to {order['user_id']}, not {user_id}.")
    paid, refunded = _paid_and_refunded(order)
    items_total = sum((dec(item["price"]) for item in order["items"]), ZERO)
    if paid != items_total:
        raise CaseBuildError(f"{where}: {order_id} paid {paid} but its items sum to {items_total}.")
    status = order["status"]
    item_ids: list[str] = []
    requested = None
    method_id = kwargs.get("payment_method_id")

    if kind == "cancel":
        eligible_status = "pending"
        amount = paid - refunded
        destination = "original"
        message = (
            f"Please cancel my pending order {order_id} (reason: {kwargs.get('reason', 'no longer needed')}) "
            "and refund the full amount to the original payment method."
        )
    else:
        eligible_status = "delivered"
        item_ids = list(kwargs["item_ids"])
        old_value = _items_value(order, item_ids, where)
        destination = _destination(data, user_id, order, method_id)
        names = ", ".join(
            f"{next(i['name'] for i in order['items'] if i['item_id'] == item_id)} ({item_id})" for item_id in item_ids
        )
        to = {
            "original": "the original payment method",
            "gift_card": f"my gift card {method_id}",
            "other": f"my other payment method {method_id}",
        }[destination]
        if kind == "return":
            amount = old_value
            message = (
                f"I want to return these items from my delivered order {order_id}: {names}. Please refund them to {to}."
            )
        else:
            new_ids = list(kwargs["new_item_ids"])
            for old_id, new_id in zip(item_ids, new_ids, strict=True):
                old_product = next(i["product_id"] for i in order["items"] if i["item_id"] == old_id)
                if new_id not in prices or new_id not in data.products.get(old_product, {}).get("variants", {}):
                    raise CaseBuildError(f"{where}: new item {new_id} is not a variant of product {old_product}.")
            new_value = sum((prices[new_id] for new_id in new_ids), ZERO)
            if new_value >= old_value:
                return None  # the customer pays the difference: no money comes back, not a refund case
            amount = old_value - new_value
            requested = amount
            message = (
                f"I am exchanging {names} from my delivered order {order_id} for cheaper variants "
                f"({', '.join(new_ids)}). Please refund the price difference of {amount} USD to {to}."
            )

    if status != eligible_status:
        # The benchmark's tool would refuse: a person decides.
        expected = {"stop_reason": "escalated", "approval_amount": None, "policy_gate_code": "status_not_eligible"}
    elif destination == "other":
        # τ-bench lets an exchange's difference go to any method of the user; tau-retail-policy-v1
        # (the wiki's rules for returns) allows only the original method or a gift card.
        expected = {
            "stop_reason": "escalated",
            "approval_amount": None,
            "policy_gate_code": ["destination_not_allowed", "model_recommends_escalate"],
        }
    else:
        if amount <= ZERO:
            raise CaseBuildError(f"{where}: nothing to refund on {order_id}.")
        expected = {
            "stop_reason": "approval_required",
            "approval_amount": str(amount),
            "destination": destination,
            "items": item_ids,
            "policy_version": TAU_POLICY_VERSION,
            # The payment method the money must land on: the one the order was paid with for a
            # cancellation, the one the task names for a return or exchange.
            "payment_method_id": method_id if kind != "cancel" else _paid_with(order),
        }
    expected["benchmark"] = {"action": action["name"], "kwargs": kwargs, "refund": str(amount)}
    return {
        "name": f"tau_{split}_{task_index:03d}_{action_index}_{kind}",
        "suite": "tau_retail",
        "tags": ["tau_bench", split, kind],
        "description": f"τ-bench {split} task {task_index}, action {action_index}: {action['name']} on {order_id}.",
        "ticket_input": {
            "order": order_id,
            "customer": user_id,
            "message": message,
            "requested_amount": str(requested) if requested is not None else None,
            "items": item_ids,
            # The customer's choice of destination, on the filing form: the method the task names
            # (a cancellation names none: the original payment method).
            "refund_to": method_id,
            "payment_method_id": method_id,
            "destination": destination,
            "instruction": task.get("instruction", ""),
        },
        # All of the user's orders: with the anthropic provider the ticket names none, and the
        # agent must find this one among them (the offline run files the order and ignores the rest).
        "fixture": {
            **tau_convert(users=data.users, orders=data.orders, order_ids=_orders_of(data, user_id, order_id)),
            "policy": "tau",
        },
        "provider_script": None,
        "expected": expected,
    }
