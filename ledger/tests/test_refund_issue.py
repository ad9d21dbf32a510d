"""What `ledger_refund_issue` writes, refuses and replays: the entry, its first event, its items,
a gift card's balance, and each refusal's code and wording.

Every scenario runs twice: inside the test's transaction, and in autocommit, where each write is
its own transaction and the deferred cap triggers of migrations 0002/0004 check it at commit
(the database's backstop agrees with the service's checks)."""

from decimal import Decimal

import pytest
from django.db import DataError, connection, transaction
from django.test.utils import CaptureQueriesContext

from ledger.exceptions import IdempotencyConflict, InvalidInput, RefundRefused
from ledger.models import Customer, Order, PaymentMethod, RefundEntry, RefundEntryEvent, RefundEntryItem
from ledger.selectors import order_refund_position
from ledger.services import ledger_refund_correct, ledger_refund_issue, ledger_refund_record_outcome

MODES = [
    pytest.param("in_atomic", marks=pytest.mark.django_db),
    pytest.param("autocommit", marks=pytest.mark.django_db(transaction=True)),
]


def issue(order, amount, key, **kwargs):
    kwargs.setdefault("currency", order.currency)
    return ledger_refund_issue(order=order, amount=amount, idempotency_key=key, **kwargs)


def refused(order, amount, key, error=RefundRefused, **kwargs):
    """The refusal of this refund (it must be refused with `error`), after checking it wrote nothing."""
    entries, events = RefundEntry.objects.count(), RefundEntryEvent.objects.count()
    with pytest.raises(error) as refusal:
        issue(order, amount, key, **kwargs)
    assert (RefundEntry.objects.count(), RefundEntryEvent.objects.count()) == (entries, events)
    return refusal.value


def position(order) -> tuple:
    """(refunded, refundable, [(line_no, units refunded)], entries) of `order`."""
    now = order_refund_position(order)
    lines = [(line.line_no, line.refunded_quantity) for line in now.lines]
    return str(now.refunded_total), str(now.refundable), lines, RefundEntry.objects.filter(order=order).count()


def items(entry) -> list[tuple]:
    """(line_no, units, amount) of each line the entry refunds, in the order they were written."""
    rows = RefundEntryItem.objects.filter(entry=entry).select_related("order_item").order_by("id")
    return [(row.order_item.line_no, row.quantity, str(row.amount)) for row in rows]


def in_mode(mode: str) -> None:
    assert connection.in_atomic_block is (mode == "in_atomic")


@pytest.mark.parametrize("mode", MODES)
def test_a_refund_is_the_row_stored_a_replay_returns_it_and_other_arguments_conflict(mode, make_order):
    # given an order
    order = make_order("100.00")
    in_mode(mode)

    # when a refund is written
    first = issue(order, "30.00", "k1", approval_ref="7", reason="Damaged.")

    # then the entry returned is the row stored, field by field
    stored = RefundEntry.objects.get(pk=first.pk)
    fields = [f.attname for f in RefundEntry._meta.concrete_fields]
    assert {name: getattr(first, name) for name in fields} == {name: getattr(stored, name) for name in fields}
    assert (stored.tenant_id, stored.order_id, stored.amount, stored.approval_ref, stored.reason) == (
        order.tenant_id,
        order.pk,
        Decimal("30.00"),
        "7",
        "Damaged.",
    )
    assert len(stored.request_hash) == 64 and stored.created_at is not None and stored.status_changed_at is not None

    # and the same key with the same arguments returns it again, read back, writing nothing
    again = issue(order, "30.00", "k1", approval_ref="7", reason="Damaged.")
    assert again.pk == first.pk and again is not first

    # and the key with other arguments is a conflict naming the entry, even where the arguments
    # would be refused (a replay or a conflict comes before any refusal)
    for other in (
        {"amount": "31.00", "approval_ref": "7"},
        {"amount": "30.00", "approval_ref": "8"},
        {"amount": "0.00"},
    ):
        conflict = refused(order, other.pop("amount"), "k1", error=IdempotencyConflict, **other)
        assert (conflict.code, conflict.status_code, conflict.details) == (
            "idempotency_conflict",
            409,
            {"refund_id": first.pk},
        )
        assert (
            conflict.message == f"Idempotency key k1 was already used for refund #{first.pk} with different arguments."
        )
    assert position(order) == ("30.00", "70.00", [], 1)


@pytest.mark.parametrize("mode", MODES)
def test_the_cap_counts_effective_amounts_and_only_entries_that_count(mode, make_order, settings):
    settings.PAYMENT_GATEWAY = "stripe"
    order = make_order("100.00")
    in_mode(mode)

    # given 70.00 corrected to 50.00, and 20.00 pending at the provider (it counts)
    lowered = issue(order, "70.00", "k1", source="import")
    ledger_refund_correct(entry=lowered, new_amount="50.00", reason="restocking fee")
    failed = issue(order, "20.00", "k2")
    assert refused(order, "30.01", "k3").details == {"refundable": "30.00"}

    # when the pending refund fails and another is canceled, they stop counting
    ledger_refund_record_outcome(entry_id=failed.pk, status="failed", reason="card_declined")
    canceled = issue(order, "25.00", "k4")
    ledger_refund_record_outcome(entry_id=canceled.pk, status="canceled")

    # then 50.00 is left, and refused above it with the order's numbers
    above = refused(order, "50.01", "k5")
    assert (above.code, above.details) == ("refund_exceeds_refundable", {"refundable": "50.00"})
    assert above.message == (
        f"Refund of 50.01 USD exceeds what is still refundable on {order.external_id} (50.00 of 100.00)."
    )
    issue(order, "50.00", "k6", source="import")
    assert refused(order, "0.01", "k7").details == {"refundable": "0.00"}
    assert position(order) == ("100.00", "0.00", [], 4)


@pytest.mark.parametrize("mode", MODES)
def test_what_is_refused_before_the_cap_and_its_wording(mode, make_order, tenant):
    order = make_order("100.00")
    stranger = Customer.objects.create(tenant=tenant, external_id="CUST-STRANGER")
    theirs = PaymentMethod.objects.create(customer=stranger, external_id="card_9", kind="card", last4="0000")
    in_mode(mode)

    cases = [
        (("0.00", "k1"), {}, "refund_not_positive", "A refund must be positive, got 0.00."),
        (
            ("10.00", "k3"),
            {"currency": "EUR"},
            "currency_mismatch",
            "Refund currency EUR differs from order currency USD.",
        ),
        (
            ("1.00", "k4"),
            {"destination": theirs},
            "foreign_destination",
            "The refund destination belongs to another customer.",
        ),
        (
            ("100.01", "k5"),
            {},
            "refund_exceeds_refundable",
            f"Refund of 100.01 USD exceeds what is still refundable on {order.external_id} (100.00 of 100.00).",
        ),
        # representable in JPY, but not the order's currency
        (
            ("500", "k6"),
            {"currency": "JPY"},
            "currency_mismatch",
            "Refund currency JPY differs from order currency USD.",
        ),
    ]
    for (amount, key), kwargs, code, message in cases:
        refusal = refused(order, amount, key, **kwargs)
        assert (refusal.code, refusal.message, refusal.status_code) == (code, message, 422)
    # a negative amount is not an amount at all (ledger.money), refused before the ledger's rules
    negative = refused(order, "-5.00", "k2", error=InvalidInput)
    assert (negative.code, negative.message) == ("bad_amount", "amount must not be negative (-5.00)")
    # Decimal() reads other scripts' digits; an amount does not
    assert refused(order, "１２０", "k7", error=InvalidInput).code == "bad_amount"
    assert position(order) == ("0.00", "100.00", [], 0)


@pytest.mark.parametrize("mode", MODES)
def test_item_refunds_take_units_line_by_line_as_items_match_does(mode, make_order):
    order = make_order(
        "150.00", items=[("BOTTLE", "47.84", 1), ("SOCKS", "11.08", 1), ("MUG", "25.00", 2), ("SOCKS", "11.08", 1)]
    )
    external_id = order.external_id
    in_mode(mode)

    above = refused(order, "47.85", "k1", item_ids=["BOTTLE"])
    assert (above.code, above.message) == (
        "refund_exceeds_items",
        "Refund of 47.85 USD exceeds the price of the items (47.84).",
    )
    nowhere = refused(order, "1.00", "k2", item_ids=["NOPE"])
    assert (nowhere.code, nowhere.message) == (
        "item_not_refundable",
        f"Items NOPE are not on {external_id} or were already refunded.",
    )
    assert items(issue(order, "11.08", "k3", item_ids=["SOCKS"])) == [(2, 1, "11.08")]
    # line 4's SOCKS once, MUG twice: one SOCKS is left over
    left_over = refused(order, "50.00", "k4", item_ids=["SOCKS", "MUG", "SOCKS", "MUG"])
    assert left_over.message == f"Items SOCKS are not on {external_id} or were already refunded."
    # MUG x2 from line 3 and SOCKS from line 4, written in the order first matched
    assert items(issue(order, "47.16", "k5", item_ids=["MUG", "SOCKS", "MUG"])) == [(3, 2, "50.00"), (4, 1, "11.08")]
    # the order has one BOTTLE: naming it twice is more units than the order has, not a refund
    twice = refused(order, "47.84", "k6", item_ids=["BOTTLE", "BOTTLE"])
    assert (twice.code, twice.message) == (
        "items_exceed_quantity",
        f"Items BOTTLE are named more times than {external_id} has units of them.",
    )
    issue(order, "47.84", "k7", item_ids=["BOTTLE"])
    assert refused(order, "1.00", "k8", item_ids=["MUG"]).code == "item_not_refundable"  # all refunded now
    assert position(order) == ("106.08", "43.92", [(1, 1), (2, 1), (3, 2), (4, 1)], 3)


@pytest.mark.parametrize("mode", MODES)
def test_a_failed_item_refund_gives_its_units_back(mode, make_order, settings):
    settings.PAYMENT_GATEWAY = "stripe"
    order = make_order("100.00", items=[("ITEM-1", "60.00", 1), ("ITEM-2", "40.00", 1)])
    in_mode(mode)

    # given an item refund pending at the provider: its unit is taken, within the cap or not
    failed = issue(order, "60.00", "k1", item_ids=["ITEM-1"])
    assert refused(order, "40.00", "k2", item_ids=["ITEM-1"]).code == "item_not_refundable"

    # when the provider refuses it, then the unit can be refunded again
    ledger_refund_record_outcome(entry_id=failed.pk, status="failed", reason="card_declined")
    assert items(issue(order, "60.00", "k3", item_ids=["ITEM-1"])) == [(1, 1, "60.00")]
    assert position(order) == ("60.00", "40.00", [(1, 1), (2, 0)], 2)


@pytest.mark.parametrize("mode", MODES)
def test_store_credit_grows_the_gift_card_once_and_never_for_an_import(mode, make_order, customer, settings):
    settings.PAYMENT_GATEWAY = "stripe"
    order = make_order("100.00")
    gift = PaymentMethod.objects.create(
        customer=customer, external_id="gc-1", kind="gift_card", balance=Decimal("10.00")
    )
    empty = PaymentMethod.objects.create(customer=customer, external_id="gc-2", kind="gift_card", balance=None)
    in_mode(mode)

    written = [
        issue(order, "25.00", "k1", destination=gift, destination_kind="gift_card"),
        issue(order, "25.00", "k1", destination=gift, destination_kind="gift_card"),  # a replay grows nothing
        issue(order, "5.00", "k2", destination=empty, destination_kind="gift_card"),  # no balance yet: from 0.00
        issue(order, "7.00", "k3", destination=gift, destination_kind="gift_card", source="import"),
        issue(order, "3.00", "k4", destination=gift, destination_kind="original"),  # not store credit
    ]
    refused(order, "99.00", "k5", destination=gift, destination_kind="gift_card")  # refused: nothing grows

    assert [(entry.gateway, entry.status) for entry in written] == [("store_credit", "succeeded")] * 4 + [
        ("stripe", "pending")
    ]
    gift.refresh_from_db()
    empty.refresh_from_db()
    assert (gift.balance, empty.balance) == (Decimal("35.00"), Decimal("5.00"))
    assert position(order) == ("40.00", "60.00", [], 4)


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("gateway", ["stripe", "manual"])
def test_the_first_status_follows_the_gateway_setting(mode, gateway, make_order, settings, django_user_model):
    settings.PAYMENT_GATEWAY = gateway
    finance = django_user_model.objects.create(username="fin")
    order = make_order("100.00")
    in_mode(mode)

    approved = issue(order, "10.00", "k1", approval_ref="12", created_by=finance)
    imported = issue(order, "10.00", "k2", source="import")
    by_operator = issue(order, "10.00", "k3", source=RefundEntry.Source.MANUAL, reason="operator")

    expected = ("stripe", "pending") if gateway == "stripe" else ("manual", "succeeded")
    assert (approved.gateway, approved.status, approved.created_by_id) == (*expected, finance.pk)
    assert list(
        approved.events.values_list("from_status", "to_status", "source", "provider_ref", "reason", "event_ref")
    ) == [("", approved.status, "issue", "", "", "")]
    assert [(entry.gateway, entry.status) for entry in (imported, by_operator)] == [("manual", "succeeded")] * 2


@pytest.mark.parametrize("mode", MODES)
def test_a_refusal_inside_a_callers_transaction_leaves_it_usable(mode, make_order):
    order = make_order("100.00")

    with transaction.atomic():
        refused(order, "100.01", "k1")
        refused(order, "1.00", "k2", currency="EUR")
        first = issue(order, "40.00", "k3")
        assert issue(order, "40.00", "k3").pk == first.pk

    assert position(order) == ("40.00", "60.00", [], 1)


@pytest.mark.parametrize("mode", MODES)
def test_an_order_that_does_not_exist(mode, tenant, customer):
    ghost = Order(pk=987_654_321, tenant=tenant, customer=customer, external_id="GHOST", currency="USD")

    with pytest.raises(Order.DoesNotExist, match="Order matching query does not exist."):
        issue(ghost, "1.00", "k")

    assert not RefundEntry.objects.exists()


@pytest.mark.parametrize("mode", MODES)
def test_text_postgresql_cannot_store_fails_after_the_refusals_and_writes_nothing(mode, make_order):
    """NUL bytes and text longer than its column are a DataError (after the refusals); an item id
    with a NUL byte is simply not on the order. Nothing is written, and a caller's transaction
    stays usable."""
    order = make_order("100.00", items=[("A", "10.00", 1)])
    calls = [
        {"reason": "Good\x00will"},
        {"approval_ref": "7\x00"},
        {"key": "k\x00"},
        {"key": "k" * 201},
        {"reason": "lone \ud800 surrogate"},
        {"reason": "Good\x00will", "amount": "100.01"},
        {"item_ids": ["A\x00"]},
        {"destination_kind": "x" * 21},
    ]
    outcomes = []
    for n, call in enumerate(calls):
        call = {"amount": "1.00", "key": f"n{n}", **call}
        with transaction.atomic():
            try:
                issue(order, call.pop("amount"), call.pop("key"), **call)
                outcomes.append("written")
            except RefundRefused as exc:
                outcomes.append(exc.code)
            except DataError as exc:
                outcomes.append(str(exc).splitlines()[0])
            except UnicodeEncodeError as exc:
                outcomes.append(exc.reason)
            with connection.cursor() as cursor:  # still usable
                cursor.execute("SELECT 1")

    nul = "PostgreSQL text fields cannot contain NUL (0x00) bytes"
    assert outcomes == [
        nul,
        nul,
        nul,
        "value too long for type character varying(200)",
        "surrogates not allowed",
        "refund_exceeds_refundable",  # the refusal comes first
        "item_not_refundable",
        "value too long for type character varying(20)",
    ]
    assert position(order) == ("0.00", "100.00", [(1, 0)], 0)


@pytest.mark.parametrize("amount", [Decimal("1e30"), "1e30", Decimal("-1e40"), 10.0, "NaN", "1.005", "ten"])
def test_amounts_that_are_not_money_are_refused_before_any_query(make_order, amount):
    order = make_order("100.00")

    with CaptureQueriesContext(connection) as queries, pytest.raises(InvalidInput) as refusal:
        issue(order, amount, "k", currency="USD")

    assert refusal.value.code in ("bad_amount", "float_amount")
    assert refusal.value.status_code == 422
    assert queries.captured_queries == []
