"""`manage.py import_orders PATH` and `orders_import`: a good file loads once, a bad one writes nothing."""

import copy
import json
import time
from decimal import Decimal

import pytest
from django.core.management import CommandError, call_command

from ledger.exceptions import ImportRefused
from ledger.importing import orders_import
from ledger.models import Customer, Order, OrderItem, Payment, PaymentMethod, RefundEntry, RefundEntryItem
from ledger.selectors import order_refund_position
from ledger.services import ledger_refund_issue


@pytest.fixture
def good_file(tenant):
    return {
        "tenant": tenant.slug,
        "customers": [
            {
                "id": "CUST-3001",
                "name": "Ada Lovelace",
                "email": "ada@example.com",
                "address": {"city": "London"},
                "payment_methods": [
                    {"id": "card_1", "kind": "card", "brand": "visa", "last4": "4242"},
                    {"id": "gift_card_7", "kind": "gift_card", "balance": "25.00"},
                ],
            },
            {"id": "CUST-3002", "name": "Alan Turing"},
        ],
        "orders": [
            {
                "id": "ORD-9001",
                "customer": "CUST-3001",
                "total": "99.00",
                "currency": "USD",
                "placed_at": "2026-11-10T10:00:00Z",
                "status": "delivered",
                "items": [
                    {
                        "id": "ITEM-1",
                        "name": "Water Bottle",
                        "price": "47.84",
                        "quantity": 1,
                        "product_id": "8310926033",
                        "options": {"color": "blue"},
                    },
                    {"id": "ITEM-2", "name": "Socks", "price": "25.58", "quantity": 2},
                ],
                "payment": {
                    "method": "card",
                    "card_brand": "visa",
                    "card_last4": "4242",
                    "payment_method_id": "card_1",
                    "payment_ref": "pi_3PqA1b2C3d4E5f6G",
                },
                "refunds": [{"amount": "10.00", "payment_method_id": "card_1", "items": ["ITEM-1"]}],
            },
            {
                "id": "ORD-9002",
                "customer": "CUST-3001",
                "total": "40.00",
                "currency": "EUR",
                "placed_at": "2026-11-12",
                "status": "pending",
                "note": "leave at the door",
                "payments": [
                    {"payment_method_id": "gift_card_7", "amount": "25.00"},
                    {"method": "paypal", "amount": "15.00", "payment_ref": "PAYID-1"},
                ],
            },
            {
                "id": "ORD-9003",
                "customer": "CUST-3002",
                "total": "12.50",
                "currency": "USD",
                "placed_at": "2026-11-01T08:30:00+01:00",
                "address": {"city": "Manchester"},
            },
        ],
    }


def _write(tmp_path, data, name="orders.json"):
    path = tmp_path / name
    path.write_text(json.dumps(data))
    return str(path)


def _snapshot():
    return {
        model.__name__: sorted(map(repr, model.objects.values_list()))
        for model in (Customer, PaymentMethod, Order, OrderItem, Payment, RefundEntry, RefundEntryItem)
    }


def test_a_good_file_loads(good_file, tmp_path, capsys):
    # when the file is imported with the command
    call_command("import_orders", _write(tmp_path, good_file))

    # then customers, methods, orders, lines, payments and the shop's refund are all there
    assert "orders 3 created" in capsys.readouterr().out
    order = Order.objects.get(external_id="ORD-9001")
    assert (order.total, order.currency, order.status) == (Decimal("99.00"), "USD", "delivered")
    assert [(i.item_id, i.price, i.quantity, i.product_id) for i in order.items.all()] == [
        ("ITEM-1", Decimal("47.84"), 1, "8310926033"),
        ("ITEM-2", Decimal("25.58"), 2, ""),
    ]
    [payment] = order.payments.all()
    assert (payment.amount, payment.payment_method.external_id, payment.payment_ref) == (
        Decimal("99.00"),
        "card_1",
        "pi_3PqA1b2C3d4E5f6G",
    )
    [refund] = RefundEntry.objects.filter(order=order)
    assert (refund.amount, refund.source, refund.idempotency_key) == (
        Decimal("10.00"),
        "import",
        "import:shop:ORD-9001:1",
    )
    assert order_refund_position(order).refundable == Decimal("89.00")
    # an order without items is one line for its total; several payments are kept apart
    other = Order.objects.get(external_id="ORD-9002")
    assert [(i.item_id, i.price) for i in other.items.all()] == [("ORD-9002", Decimal("40.00"))]
    assert sorted((p.method, p.amount, p.currency) for p in other.payments.all()) == [
        ("gift_card", Decimal("25.00"), "EUR"),
        ("paypal", Decimal("15.00"), "EUR"),
    ]
    assert other.note == "leave at the door"
    assert Order.objects.get(external_id="ORD-9003").placed_at.isoformat() == "2026-11-01T07:30:00+00:00"
    assert Customer.objects.get(external_id="CUST-3001").payment_methods.count() == 2


def test_importing_again_duplicates_nothing(good_file):
    # given the file imported once
    first = orders_import(data=good_file)
    before = _snapshot()

    # when it is imported again
    again = orders_import(data=good_file)

    # then nothing was created or changed
    assert (first.orders.created, first.refunds.created) == (3, 1)
    assert (again.created, again.updated, again.orders.unchanged, again.refunds.unchanged) == (0, 0, 3, 1)
    assert again.warnings == []
    assert _snapshot() == before


def test_a_reimport_keeps_what_refunds_depend_on_and_updates_the_rest(good_file):
    # given the file imported once
    orders_import(data=good_file)

    # when the shop sends the order again with a new total, items and date, a new status and note
    changed = copy.deepcopy(good_file)
    row = changed["orders"][0]
    row.update(total="500.00", placed_at="2020-01-01T00:00:00Z", status="cancelled", note="returned")
    row["items"][0]["price"] = "400.00"
    changed["customers"][0]["name"] = "Ada King"
    result = orders_import(data=changed)

    # then total, date and items stay as first imported (with a warning); status, note and name update
    order = Order.objects.get(external_id="ORD-9001")
    assert (order.total, order.placed_at.year, order.status, order.note) == (
        Decimal("99.00"),
        2026,
        "cancelled",
        "returned",
    )
    assert order.items.get(line_no=1).price == Decimal("47.84")
    assert Customer.objects.get(external_id="CUST-3001").name == "Ada King"
    assert (result.orders.updated, result.customers.updated) == (1, 1)
    assert result.warnings == [
        "orders[0] (ORD-9001): already imported; kept its recorded total 99.00, "
        "placed_at 2026-11-10T10:00:00+00:00, items, payments"
    ]


def test_a_reimport_adds_a_new_refund_but_refuses_a_changed_one(good_file):
    orders_import(data=good_file)
    more = copy.deepcopy(good_file)
    more["orders"][0]["refunds"].append({"amount": "5.00"})

    assert orders_import(data=more).refunds.created == 1

    more["orders"][0]["refunds"][0]["amount"] = "11.00"
    with pytest.raises(ImportRefused, match=r"orders\[0\] \(ORD-9001\): refunds\[0\]"):
        orders_import(data=more)
    assert order_refund_position(Order.objects.get(external_id="ORD-9001")).refunded_total == Decimal("15.00")


BAD_ROWS = {
    "negative total": (lambda o: o.update(total="-1.00"), "total must not be negative"),
    "unknown currency": (lambda o: o.update(currency="XYZ"), "currency 'XYZ' is not one of"),
    "missing customer": (lambda o: o.pop("customer"), "customer is required"),
    "unknown customer": (lambda o: o.update(customer="CUST-0000"), "customer CUST-0000 is neither in the file"),
    "malformed date": (lambda o: o.update(placed_at="10/11/2026"), "placed_at is not an ISO 8601 date-time"),
    "impossible date": (lambda o: o.update(placed_at="2026-02-30T10:00:00Z"), "placed_at is not an ISO 8601"),
    # Out of a datetime's range once in UTC: an OverflowError on SQLite; on PostgreSQL the order
    # was written and every later read of it failed (its ledger page answered 500).
    "year 1 east of UTC": (
        lambda o: o.update(placed_at="0001-01-01T00:00:00+05:00"),
        "placed_at '0001-01-01T00:00:00+05:00' is not between 1970-01-01 and 2099-12-31 (UTC)",
    ),
    "year 9999 west of UTC": (
        lambda o: o.update(placed_at="9999-12-31T23:59:59-05:00"),
        "placed_at '9999-12-31T23:59:59-05:00' is not between 1970-01-01 and 2099-12-31",
    ),
    "date before 1970": (lambda o: o.update(placed_at="1969-12-31"), "placed_at '1969-12-31' is not between"),
    "float amount": (lambda o: o.update(total=12.5), 'total must be a decimal string like "12.50"'),
    "three decimals": (lambda o: o.update(total="12.505"), "total is not an amount with at most two decimal places"),
    # Amounts the currency cannot represent, which the API refuses (422 amount_precision).
    "yen total with cents": (
        lambda o: o.update(currency="JPY", total="10.50"),
        "total: JPY amounts have at most 0 decimal places, got 10.50",
    ),
    "yen item price with cents": (
        lambda o: o.update(currency="JPY", total="10", items=[{"id": "X", "price": "9.99"}]),
        "items[0]: price: JPY amounts have at most 0 decimal places",
    ),
    "yen payment with cents": (
        lambda o: o.update(currency="JPY", total="10", payments=[{"method": "card", "amount": "0.50"}] * 2),
        "payments[0]: amount: JPY amounts have at most 0 decimal places",
    ),
    "yen refund with cents": (
        lambda o: o.update(currency="JPY", total="10", refunds=[{"amount": "1.50"}]),
        "refunds[0]: amount: JPY amounts have at most 0 decimal places",
    ),
    "unknown status": (lambda o: o.update(status="lost"), "status 'lost' is not one of"),
    "negative price": (
        lambda o: o.update(items=[{"id": "X", "price": "-2.00"}]),
        "items[0]: price must not be negative",
    ),
    "zero quantity": (lambda o: o.update(items=[{"id": "X", "price": "2.00", "quantity": 0}]), "items[0]: quantity"),
    # Above the integer column: a check constraint violation on PostgreSQL (stored on SQLite), and
    # from 2**63 an OverflowError on both.
    "quantity above the column": (
        lambda o: o.update(items=[{"id": "X", "price": "2.00", "quantity": 2**31}]),
        "items[0]: quantity must be a whole number from 1 to 2147483647, got 2147483648",
    ),
    "quantity above 64 bits": (
        lambda o: o.update(items=[{"id": "X", "price": "2.00", "quantity": 10**30}]),
        "items[0]: quantity must be a whole number from 1 to 2147483647",
    ),
    "refunds above total": (lambda o: o.update(refunds=[{"amount": "13.00"}]), "refunds add up to more than the total"),
    "unknown payment method": (lambda o: o.update(payment={"payment_method_id": "card_404"}), "card_404"),
    # A NUL failed on PostgreSQL (DataError) and was stored on SQLite; other C0 controls too.
    "NUL in the note": (lambda o: o.update(note="a\x00b"), "note contains a control character"),
    "escape in the address": (lambda o: o.update(address={"city": "x\x1b[2J"}), "address contains a control"),
    "NUL in an address key": (lambda o: o.update(address={"ci\x00ty": "x"}), "address contains a control"),
    "NUL in an item id": (
        lambda o: o.update(items=[{"id": "I\x001", "price": "10.00"}]),
        "items[0]: id contains a control character",
    ),
    "NUL in an item option": (
        lambda o: o.update(items=[{"id": "I1", "price": "10.00", "options": {"color": "\x00"}}]),
        "items[0]: options contains a control character",
    ),
    "NUL in a payment ref": (
        lambda o: o.update(payment={"method": "card", "payment_ref": "pi_\x00"}),
        "payment: payment_ref contains a control character",
    ),
    "NUL in a refund reason": (
        lambda o: o.update(refunds=[{"amount": "1.00", "reason": "r\x00"}]),
        "refunds[0]: reason contains a control character",
    ),
    "NUL in a refunded item id": (
        lambda o: o.update(refunds=[{"amount": "1.00", "items": ["ORD-9003\x00"]}]),
        "refunds[0]: items contains a control character",
    ),
    # JSON "\ud800" parses to a lone surrogate, which neither database driver can encode.
    "lone surrogate in the note": (lambda o: o.update(note="a\ud800b"), "note contains a lone surrogate"),
}


@pytest.mark.parametrize("kind", BAD_ROWS)
def test_a_file_with_one_bad_row_is_refused_whole(good_file, tmp_path, kind):
    # given a good file whose last order (orders[2], ORD-9003) has one bad field
    spoil, message = BAD_ROWS[kind]
    spoil(good_file["orders"][2])

    # when it is imported with the command
    with pytest.raises(CommandError) as refused:
        call_command("import_orders", _write(tmp_path, good_file))

    # then the message names the row and the problem, and nothing at all was written
    assert "orders[2] (ORD-9003): " in str(refused.value)
    assert message in str(refused.value)
    assert not Customer.objects.exists() and not Order.objects.exists() and not RefundEntry.objects.exists()


# Shapes Python reads as a number (Decimal(), float(), int()), which an amount is not. The
# message names the record and the field; nothing is rounded and nothing is written.
NOT_AMOUNTS = {
    "exponent": ({"total": "1e2"}, "total is not an amount: '1e2'"),
    "fullwidth digits": ({"total": "１２０"}, "total is not an amount: '１２０'"),
    "underscore": ({"total": "1_000"}, "total is not an amount: '1_000'"),
    "boolean": ({"total": True}, "total must be a decimal string, got True"),
    "float": ({"total": 1.5}, 'total must be a decimal string like "1.50", not the number 1.5'),
    "NaN": ({"total": "NaN"}, "total is not an amount: 'NaN'"),
    "Infinity": ({"total": "Infinity"}, "total is not an amount: 'Infinity'"),
    "spaces": ({"total": " 12 "}, "total is not an amount: ' 12 '"),
    "minus zero": ({"total": "-0"}, "total is not an amount: '-0'"),
    "finer than a cent": ({"total": "0.004"}, "total is not an amount with at most two decimal places: '0.004'"),
    "half a yen": ({"currency": "JPY", "total": "1.5"}, "total: JPY amounts have at most 0 decimal places, got 1.50"),
    "above the column": ({"total": "10000000000.00"}, "total is too large (10000000000.00)"),
    "float item price": ({"items": [{"id": "X", "price": 9.99}]}, "items[0]: price must be a decimal string like"),
    "exponent refund": ({"refunds": [{"amount": "1e1"}]}, "refunds[0]: amount is not an amount: '1e1'"),
}


@pytest.mark.parametrize("kind", NOT_AMOUNTS)
def test_an_amount_python_would_read_refuses_the_whole_file(good_file, tmp_path, kind):
    # given a good file whose last order (orders[2], ORD-9003) has that amount
    change, message = NOT_AMOUNTS[kind]
    good_file["orders"][2].update(change)

    # when it is imported with the command
    with pytest.raises(CommandError) as refused:
        call_command("import_orders", _write(tmp_path, good_file))

    # then the refusal names the record and the field, and nothing at all was written
    assert f"orders[2] (ORD-9003): {message}" in str(refused.value)
    assert _snapshot() == {name: [] for name in _snapshot()}


def test_a_payment_method_balance_is_read_by_the_money_parser_too(good_file):
    good_file["customers"][0]["payment_methods"][1]["balance"] = 25.0

    with pytest.raises(ImportRefused) as refused:
        orders_import(data=good_file)

    assert (
        "customers[0] (CUST-3001): payment_methods[1]: balance must be a decimal string like" in refused.value.message
    )
    assert not Customer.objects.exists()


@pytest.mark.parametrize(
    "spoil, message",
    [
        (lambda c: c.update(name="Ada\x00"), "customers[0] (CUST-3001): name contains a control character"),
        (lambda c: c.update(address={"city": "\x00"}), "customers[0] (CUST-3001): address contains a control"),
        (
            lambda c: c["payment_methods"][0].update(brand="vi\x00sa"),
            "customers[0] (CUST-3001): payment_methods[0]: brand contains a control character",
        ),
        # the label leaves out an id it could not print
        (lambda c: c.update(id="CUST\x00"), "customers[0]: id contains a control character"),
    ],
    ids=["name", "address", "payment-method-brand", "id"],
)
def test_a_control_character_in_a_customer_is_refused(good_file, tmp_path, spoil, message):
    # given a good file whose first customer has a NUL in one field
    spoil(good_file["customers"][0])

    # when it is imported with the command, then the refusal names the customer and the field
    with pytest.raises(CommandError) as refused:
        call_command("import_orders", _write(tmp_path, good_file))
    assert message in str(refused.value)
    assert not Customer.objects.exists() and not Order.objects.exists()


def test_tabs_newlines_and_carriage_returns_in_text_are_kept(good_file):
    # given a note with the three control characters the rule allows
    good_file["orders"][1]["note"] = "leave at the door\n\tring twice\r\n"

    # when the file is imported, then the note is stored as it was
    orders_import(data=good_file)
    assert Order.objects.get(external_id="ORD-9002").note == "leave at the door\n\tring twice\r\n"


def test_a_tenant_slug_with_a_nul_is_refused(good_file):
    # (on PostgreSQL looking the slug up was a DataError)
    good_file["tenant"] = "shop\x00"

    with pytest.raises(ImportRefused, match="tenant contains a control character"):
        orders_import(data=good_file)
    assert not Customer.objects.exists()


def test_whole_yen_amounts_load(good_file):
    # given a yen order whose amounts are written with zero cents
    good_file["orders"][2].update(
        currency="JPY", total="1200.00", items=[{"id": "X", "price": "1200"}], refunds=[{"amount": "200.00"}]
    )

    # when it is imported, then it loads (only places the yen does not have are refused)
    orders_import(data=good_file)
    order = Order.objects.get(external_id="ORD-9003")
    assert (order.currency, order.total, order_refund_position(order).refunded_total) == (
        "JPY",
        Decimal("1200.00"),
        Decimal("200.00"),
    )


def test_the_largest_quantity_the_column_holds_loads(good_file):
    good_file["orders"][2]["items"] = [{"id": "X", "price": "0.01", "quantity": 2**31 - 1}]

    orders_import(data=good_file)

    assert OrderItem.objects.get(order__external_id="ORD-9003").quantity == 2**31 - 1


def test_every_bad_row_is_reported_at_once(good_file):
    good_file["orders"][0]["total"] = "-1.00"
    good_file["orders"][1]["currency"] = "XYZ"
    good_file["customers"][1]["email"] = "not-an-email"

    with pytest.raises(ImportRefused) as refused:
        orders_import(data=good_file)

    assert len(refused.value.details["errors"]) == 3
    assert "customers[1] (CUST-3002): email 'not-an-email' is not an email address" in refused.value.message


def test_an_unknown_tenant_is_refused(good_file):
    good_file["tenant"] = "nobody"

    with pytest.raises(ImportRefused, match="tenant 'nobody' does not exist"):
        orders_import(data=good_file)
    assert not Customer.objects.exists()


def test_an_item_refunded_more_often_than_it_was_bought_is_refused(good_file):
    good_file["orders"][0]["refunds"] = [{"amount": "1.00", "items": ["ITEM-2"]} for _ in range(3)]

    with pytest.raises(ImportRefused, match=r"orders\[0\] \(ORD-9001\): refunds\[2\] refunds item ITEM-2"):
        orders_import(data=good_file)
    assert not Order.objects.exists()


def test_a_refund_the_ledger_refuses_rolls_back_the_whole_file(good_file):
    # given the file imported, and the rest of ORD-9001 refunded since, through the ledger
    orders_import(data=good_file)
    order = Order.objects.get(external_id="ORD-9001")
    ledger_refund_issue(order=order, amount="89.00", currency="USD", idempotency_key="approval:1")
    before = _snapshot()

    # when the shop's next file adds an order and another refund of ORD-9001
    good_file["orders"][0]["refunds"].append({"amount": "5.00"})
    good_file["orders"].append(
        {"id": "ORD-9004", "customer": "CUST-3002", "total": "1.00", "currency": "USD", "placed_at": "2026-11-20"}
    )
    with pytest.raises(ImportRefused) as refused:
        orders_import(data=good_file)

    # then the ledger's refusal names the row, and the new order was not written either
    assert (
        "orders[0] (ORD-9001): refunds[1]: Refund of 5.00 USD exceeds what is still refundable" in refused.value.message
    )
    assert _snapshot() == before


@pytest.mark.parametrize("content, message", [("{not json", "is not valid JSON"), (None, "Cannot read")])
def test_an_unreadable_file_is_refused(tmp_path, content, message):
    path = tmp_path / "orders.json"
    if content is not None:
        path.write_text(content)

    with pytest.raises(CommandError, match=message):
        call_command("import_orders", str(path))


def test_a_file_that_is_not_utf8_is_refused(good_file, tmp_path):
    # given a good file saved as Latin-1, with an accented name
    good_file["customers"][0]["name"] = "Ada Lovelacé"
    path = tmp_path / "orders.json"
    path.write_bytes(json.dumps(good_file, ensure_ascii=False).encode("latin-1"))

    # when it is imported, then it is a readable refusal (not a UnicodeDecodeError), and nothing is written
    with pytest.raises(CommandError, match="is not UTF-8 text"):
        call_command("import_orders", str(path))
    assert not Customer.objects.exists() and not Order.objects.exists()


def test_a_file_nested_too_deeply_is_refused(tenant, tmp_path):
    # given a JSON file nested 100,000 lists deep (beyond Python's recursion limit)
    path = tmp_path / "orders.json"
    path.write_text('{"tenant": "shop", "orders": ' + "[" * 100_000 + "]" * 100_000 + "}")

    # when it is imported, then it is a readable refusal (not a RecursionError), and nothing is written
    with pytest.raises(CommandError, match="is nested too deeply"):
        call_command("import_orders", str(path))
    assert not Customer.objects.exists() and not Order.objects.exists()


def test_a_number_too_long_to_convert_is_refused(good_file, tmp_path):
    # given a file whose total is a JSON integer of 5,000 digits (Python converts at most 4,300)
    path = tmp_path / "orders.json"
    path.write_text(json.dumps(good_file).replace('"99.00"', "9" * 5000, 1))

    # when it is imported, then it is a readable refusal (not a ValueError), and nothing is written
    with pytest.raises(CommandError, match="cannot be read as JSON: Exceeds the limit"):
        call_command("import_orders", str(path))
    assert not Customer.objects.exists() and not Order.objects.exists()


@pytest.mark.serial  # a wall-clock bound
def test_a_thousand_orders_import_quickly(tenant):
    # given a shop file of 1,000 orders of 100 customers, with 3 lines each and a refund on every tenth
    data = {
        "tenant": tenant.slug,
        "customers": [
            {"id": f"C{c}", "payment_methods": [{"id": f"card_{c}", "kind": "card", "last4": "1111"}]}
            for c in range(100)
        ],
        "orders": [
            {
                "id": f"#W{n}",
                "customer": f"C{n % 100}",
                "total": "30.00",
                "currency": "USD",
                "placed_at": "2026-11-01T00:00:00Z",
                "items": [{"id": f"I{k}", "name": "Thing", "price": "10.00"} for k in range(3)],
                "payment": {"payment_method_id": f"card_{n % 100}"},
                "refunds": [{"amount": "10.00", "items": ["I0"]}] if n % 10 == 0 else [],
            }
            for n in range(1000)
        ],
    }

    # when it is imported, twice
    started = time.monotonic()
    first = orders_import(data=data)
    elapsed = time.monotonic() - started
    again = orders_import(data=data)

    # then well under a minute, and the second run changed nothing
    assert elapsed < 20, elapsed
    assert (first.orders.created, first.refunds.created) == (1000, 100)
    assert OrderItem.objects.count() == 3000 and Payment.objects.count() == 1000
    assert (again.created, again.updated) == (0, 0)
