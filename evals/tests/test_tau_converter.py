"""The τ-bench converter: exact amounts, and converted orders that match the source files."""

import json
from decimal import Decimal
from pathlib import Path

import pytest
from django.contrib.auth import get_user_model
from django.core.management import CommandError, call_command

import evals
from evals.tau import TAU_DATA_DIR, TAU_POLICY_VERSION, TAU_TENANT, tau_convert, tau_load
from ledger.models import Tenant

SOURCE = Path(evals.__file__).resolve().parent / "data" / "tau_bench_retail"


def _walk(value):
    if isinstance(value, dict):
        for v in value.values():
            yield from _walk(v)
    elif isinstance(value, list):
        for v in value:
            yield from _walk(v)
    else:
        yield value


def test_the_data_dir_is_the_vendored_copy_with_its_license_wherever_the_cwd_is(tmp_path, monkeypatch):
    # given a current directory with nothing in it
    monkeypatch.chdir(tmp_path)

    # then the data is the copy inside the repository, found from the package, not the cwd
    assert TAU_DATA_DIR == SOURCE and TAU_DATA_DIR.is_absolute()
    assert (SOURCE / "orders.json").exists()
    assert "MIT License" in (SOURCE / "LICENSE").read_text()
    assert "sierra-research/tau-bench" in (SOURCE / "ORIGIN.md").read_text()
    assert len(tau_load().orders) == 1000


def test_every_amount_is_an_exact_decimal_string(tau_data):
    converted = tau_convert(users=tau_data.users, orders=tau_data.orders)
    assert not [v for v in _walk(converted) if isinstance(v, float)], "no float may survive the conversion"
    for order in converted["orders"]:
        source = tau_data.orders[order["id"]]
        paid = sum(Decimal(str(h["amount"])) for h in source["payment_history"] if h["transaction_type"] == "payment")
        assert Decimal(order["total"]) == paid
        # Exact: the item prices add up to the paid total in Decimal (not always in float).
        assert sum(Decimal(i["price"]) for i in order["items"]) == Decimal(order["total"])
        for item, src in zip(order["items"], source["items"], strict=True):
            assert item["price"] == f"{Decimal(str(src['price'])):.2f}"
    float_mismatches = sum(
        1 for o in tau_data.orders.values() if sum(i["price"] for i in o["items"]) != o["payment_history"][0]["amount"]
    )
    assert float_mismatches > 0, "the source has float sums that differ from the paid total: Decimal is needed"


def test_a_sample_of_converted_orders_matches_the_source_files():
    users = json.loads((SOURCE / "users.json").read_text())
    orders = json.loads((SOURCE / "orders.json").read_text())
    ids = list(orders)[::37] + [i for i, o in orders.items() if o["status"] == "cancelled"][:5]
    ids += [i for i, o in orders.items() if len({x["item_id"] for x in o["items"]}) < len(o["items"])][:3]
    converted = tau_convert(users=users, orders=orders, order_ids=ids)
    assert [o["id"] for o in converted["orders"]] == ids
    by_id = {c["id"]: c for c in converted["customers"]}
    for order in converted["orders"]:
        src = orders[order["id"]]
        user = users[src["user_id"]]
        assert order["customer"] == src["user_id"]
        assert order["status"] == src["status"]
        assert order["currency"] == "USD"
        assert [i["id"] for i in order["items"]] == [i["item_id"] for i in src["items"]]  # repeats kept
        assert [i["name"] for i in order["items"]] == [i["name"] for i in src["items"]]
        assert [i["product_id"] for i in order["items"]] == [i["product_id"] for i in src["items"]]
        assert all(i["quantity"] == 1 for i in order["items"])
        paid_with = src["payment_history"][0]["payment_method_id"]
        assert order["payment"]["payment_method_id"] == paid_with
        method = user["payment_methods"][paid_with]
        assert (
            order["payment"]["method"]
            == {"credit_card": "card", "paypal": "paypal", "gift_card": "gift_card"}[method["source"]]
        )
        if method["source"] == "credit_card":
            assert order["payment"]["card_last4"] == method["last_four"]
        refunds = [h for h in src["payment_history"] if h["transaction_type"] == "refund"]
        assert [Decimal(r["amount"]) for r in order["refunds"]] == [Decimal(str(r["amount"])) for r in refunds]
        if src["status"] == "cancelled":
            assert sum(Decimal(r["amount"]) for r in order["refunds"]) == Decimal(order["total"])
        customer = by_id[src["user_id"]]
        assert customer["email"] == user["email"]
        assert customer["name"] == f"{user['name']['first_name']} {user['name']['last_name']}"
        kinds = {m["id"]: m for m in customer["payment_methods"]}
        for method_id, m in user["payment_methods"].items():
            if m["source"] == "gift_card":
                assert kinds[method_id]["balance"] == f"{Decimal(str(m['balance'])):.2f}"
            if m["source"] == "credit_card":
                assert (kinds[method_id]["brand"], kinds[method_id]["last4"]) == (m["brand"], m["last_four"])


@pytest.mark.django_db
def test_import_tau_bench_is_exact_and_safe_to_run_twice():
    from approvals.models import RefundPolicy
    from ledger.models import Customer, Order, RefundEntry, Tenant
    from ledger.selectors import order_refund_position

    call_command("import_tau_bench")  # no directory: the vendored copy
    tenant = Tenant.objects.get(slug=TAU_TENANT)
    counts = (
        Customer.objects.filter(tenant=tenant).count(),
        Order.objects.filter(tenant=tenant).count(),
        RefundEntry.objects.filter(tenant=tenant).count(),
    )
    assert counts == (500, 1000, 102)

    policy = RefundPolicy.objects.current_for(tenant)
    assert policy.version == TAU_POLICY_VERSION and policy.window_days is None
    assert policy.full_refund_statuses == ["pending"] and policy.item_refund_statuses == ["delivered"]
    assert set(policy.item_refund_destinations) == {"original", "gift_card"}

    orders = json.loads((SOURCE / "orders.json").read_text())
    for order in Order.objects.filter(tenant=tenant, status="cancelled")[:10]:
        assert order_refund_position(order).refundable == Decimal("0.00")  # fully refunded already
    sample = Order.objects.get(tenant=tenant, external_id="#W2611340")
    assert sample.total == Decimal("536.65")
    assert [(i.item_id, i.price) for i in sample.items.order_by("line_no")] == [
        (i["item_id"], Decimal(str(i["price"]))) for i in orders["#W2611340"]["items"]
    ]

    from django.contrib.auth import get_user_model

    users = get_user_model().objects.filter(username__in=["tau-support", "tau-finance", "tau-finance2"])
    assert {u.username: sorted(u.groups.values_list("name", flat=True)) for u in users} == {
        "tau-support": ["support"],
        "tau-finance": ["finance"],
        "tau-finance2": ["finance"],
    }

    call_command("import_tau_bench", str(SOURCE))  # again: nothing duplicated
    assert (
        Customer.objects.filter(tenant=tenant).count(),
        Order.objects.filter(tenant=tenant).count(),
        RefundEntry.objects.filter(tenant=tenant).count(),
    ) == counts
    assert RefundPolicy.objects.filter(tenant=tenant).count() == 1


def test_import_tau_bench_refuses_a_staff_username_taken_by_another_tenants_user(make_user, tmp_path):
    # given a shop whose support person happens to be called tau-finance, and a τ-bench directory
    make_user("tau-finance", "support")
    (tmp_path / "users.json").write_text("{}")
    (tmp_path / "orders.json").write_text("{}")

    # when the operator imports the τ-bench shop
    with pytest.raises(CommandError, match="User tau-finance already exists in tenant shop, not tau-retail"):
        call_command("import_tau_bench", str(tmp_path))

    # then the shop's user is still only the shop's support, and no tau-retail tenant was written
    shop_user = get_user_model().objects.get(username="tau-finance")
    assert shop_user.membership.tenant.slug == "shop"
    assert list(shop_user.groups.values_list("name", flat=True)) == ["support"]
    assert not Tenant.objects.filter(slug=TAU_TENANT).exists()
    assert not get_user_model().objects.filter(username="tau-support").exists()


METHOD = '{"id": "card_1", "source": "credit_card", "brand": "visa", "last_four": "4242"}'
ORDER = '"order_id": "#W1", "status": "delivered", "items": [], "payment_history": []'
BAD_DIRECTORIES = {
    # each was a traceback (TypeError, KeyError) before, not a message naming the record
    "users a list": ('["u1"]', "{}", "users.json must be a JSON object of records by id"),
    "order without user_id": ("{}", '{"#W1": {' + ORDER + "}}", "orders.json: order #W1: 'user_id' is missing"),
    "order of an unknown user": (
        "{}",
        '{"#W1": {"user_id": "nobody", ' + ORDER + "}}",
        "orders.json: order #W1: its user nobody is not in users.json",
    ),
    "payment method without source": (
        '{"u1": {"payment_methods": {"card_1": {"id": "card_1"}}}}',
        "{}",
        "users.json: user u1: 'source' is missing",
    ),
    "payment without amount": (
        '{"u1": {"payment_methods": {"card_1": ' + METHOD + "}}}",
        '{"#W1": {"order_id": "#W1", "user_id": "u1", "status": "delivered", "items": [], '
        '"payment_history": [{"transaction_type": "payment", "payment_method_id": "card_1"}]}}',
        "orders.json: order #W1: 'amount' is missing",
    ),
    "not UTF-8": (b"\xff\xfe{", "{}", "users.json is not a readable JSON file"),
    "nested too deeply": ("{}", '{"x": ' + "[" * 100_000 + "]" * 100_000 + "}", "orders.json is not a readable JSON"),
}


@pytest.mark.django_db
@pytest.mark.parametrize("kind", BAD_DIRECTORIES)
def test_a_malformed_data_directory_is_refused_naming_the_record(tmp_path, kind):
    # given a τ-bench directory with one malformed file or record
    users, orders, message = BAD_DIRECTORIES[kind]
    for name, content in (("users.json", users), ("orders.json", orders)):
        (tmp_path / name).write_bytes(content if isinstance(content, bytes) else content.encode())

    # when it is imported, then the refusal names the file and the record
    with pytest.raises(CommandError) as refused:
        call_command("import_tau_bench", str(tmp_path))
    assert message in str(refused.value)

    # and nothing was written: no tenant, no staff
    assert not Tenant.objects.filter(slug=TAU_TENANT).exists()
    assert not get_user_model().objects.filter(username__startswith="tau-").exists()
