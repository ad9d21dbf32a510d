"""`ledger_refund_issue` has two implementations: the PostgreSQL function of migration 0007
(`_issue_in_database`, one statement) and the ORM (`_issue_with_orm`, SQLite's). On PostgreSQL
every scenario here runs through both and must give the same results, refusals (type, code,
message, details), rows, events, items and balances; inside an outer atomic block and in
autocommit (where the function's statement is its own transaction)."""

import threading
import time
from contextlib import contextmanager
from decimal import Decimal
from unittest import mock

import pytest
from django.db import DataError, connection, transaction
from django.test.utils import CaptureQueriesContext

from ledger import services
from ledger.exceptions import DomainError, IdempotencyConflict, InvalidInput, RefundRefused
from ledger.models import (
    Customer,
    Order,
    PaymentMethod,
    RefundEntry,
    RefundEntryEvent,
    RefundEntryItem,
)
from ledger.selectors import order_refund_position
from ledger.services import ledger_refund_correct, ledger_refund_issue, ledger_refund_record_outcome


PATHS = ("orm", "database")
MODES = [
    pytest.param("in_atomic", marks=pytest.mark.django_db),
    pytest.param("autocommit", marks=pytest.mark.django_db(transaction=True)),
]


@contextmanager
def forced(path: str):
    """ledger_refund_issue through one implementation (set once per test: threads share it)."""
    if path == "orm":
        with mock.patch.object(services, "_issue_in_database", services._issue_with_orm):
            yield
    else:
        yield


@contextmanager
def implementation(path: str, *, function: bool = True):
    """`forced(path)`, checking that the database function ran exactly when it should."""
    with CaptureQueriesContext(connection) as queries, forced(path):
        yield
    if queries.captured_queries:
        called = any("ledger_refund_issue(" in query["sql"] for query in queries.captured_queries)
        assert called == (path == "database" and function)


class Run:
    """One scenario through one implementation: what every call returned or raised, normalised
    so that two runs compare (entry ids as #1, #2...; keys without the run's prefix; orders by
    their position)."""

    def __init__(self, path: str, mode: str, make_order, customer):
        self.path, self.mode, self._make_order, self.customer = path, mode, make_order, customer
        self.function = True  # whether the database path may take these inputs (see test_text_...)
        self.trace: list = []
        self._labels: dict[int, str] = {}
        self._orders: list[Order] = []

    def order(self, total="100.00", **kwargs) -> Order:
        order = self._make_order(total, **kwargs)
        self._orders.append(order)
        return order

    def gift_card(self, balance="10.00") -> PaymentMethod:
        return PaymentMethod.objects.create(
            customer=self.customer,
            external_id=f"gc-{self.path}-{PaymentMethod.objects.count()}",
            kind=PaymentMethod.Kind.GIFT_CARD,
            balance=None if balance is None else Decimal(balance),
        )

    def key(self, key: str) -> str:
        return f"{self.path}:{key}"

    def issue(self, order, amount, key, **kwargs):
        """Issue a refund; record the entry or the domain refusal; return the entry or None."""
        in_atomic = kwargs.pop("_in_atomic", False)
        if self.mode == "autocommit" and not in_atomic:
            assert not connection.in_atomic_block
        kwargs.setdefault("currency", order.currency)
        try:
            with implementation(self.path, function=self.function):
                entry = ledger_refund_issue(order=order, amount=amount, idempotency_key=self.key(key), **kwargs)
        except DomainError as exc:
            self.trace.append(self.refusal(exc))
            return None
        self.trace.append(("entry", self.entry(entry)))
        return entry

    def refusal(self, exc: Exception) -> tuple:
        details = dict(getattr(exc, "details", {}))
        if "refund_id" in details:
            details["refund_id"] = self._label(details["refund_id"])
        return (
            "refused",
            type(exc).__name__,
            getattr(exc, "code", None),
            self.text(getattr(exc, "message", str(exc))),
            details,
            getattr(exc, "status_code", None),
        )

    def text(self, message: str) -> str:
        for pk, label in self._labels.items():
            message = message.replace(f"#{pk} ", f"{label} ")
        for n, order in enumerate(self._orders):
            message = message.replace(order.external_id, f"<order {n}>")
        return message.replace(f"{self.path}:", "")

    def _label(self, pk: int) -> str:
        return self._labels.setdefault(pk, f"#{len(self._labels) + 1}")

    def entry(self, entry: RefundEntry) -> dict:
        cached = sorted(entry._state.fields_cache)  # before anything below reads a relation
        stored = RefundEntry.objects.get(pk=entry.pk)
        returned = {f.attname: getattr(entry, f.attname) for f in RefundEntry._meta.concrete_fields}
        # the object returned is the row stored, field by field
        assert returned == {f.attname: getattr(stored, f.attname) for f in RefundEntry._meta.concrete_fields}
        assert (entry._state.adding, entry._state.db) == (False, "default")
        assert len(entry.request_hash) == 64
        return {
            "id": self._label(entry.pk),
            "order": self._orders.index(next(o for o in self._orders if o.pk == entry.order_id)),
            "tenant": entry.tenant_id == entry.order.tenant_id,
            "amount": (type(entry.amount).__name__, str(entry.amount)),
            "currency": entry.currency,
            "destination": None
            if entry.destination_id is None
            else PaymentMethod.objects.get(pk=entry.destination_id).kind,
            "destination_kind": entry.destination_kind,
            "idempotency_key": entry.idempotency_key.removeprefix(f"{self.path}:"),
            "source": str(entry.source),
            "approval_ref": entry.approval_ref,
            "reason": entry.reason,
            "created_by": entry.created_by_id is not None,
            "timestamps": (entry.created_at is not None, entry.status_changed_at is not None),
            "status": entry.status,
            "gateway": entry.gateway,
            "provider_ref": entry.provider_ref,
            "needs_review": entry.needs_review,
            "cached": cached,
            "events": list(
                RefundEntryEvent.objects.filter(entry=entry)
                .order_by("id")
                .values_list("from_status", "to_status", "source", "provider_ref", "reason", "event_ref")
            ),
            "items": [
                (item.order_item.line_no, item.quantity, str(item.amount))
                for item in RefundEntryItem.objects.filter(entry=entry).select_related("order_item").order_by("id")
            ],
        }

    def position(self, order) -> None:
        position = order_refund_position(order)
        self.trace.append(
            (
                "position",
                str(position.refunded_total),
                str(position.refundable),
                [(line.line_no, line.refunded_quantity) for line in position.lines],
                RefundEntry.objects.filter(order=order).count(),
            )
        )

    def note(self, *facts) -> None:
        self.trace.append(("note", *facts))


@pytest.fixture
def both(make_order, customer):
    """both(scenario, mode): run scenario(run) once per implementation; the traces must match."""

    def run_both(scenario, mode: str) -> list:
        traces = {}
        for path in PATHS:
            run = Run(path, mode, make_order, customer)
            scenario(run)
            traces[path] = run.trace
        assert traces["database"] == traces["orm"]
        return traces["database"]

    return run_both


# --- the scenarios -------------------------------------------------------------------------------


@pytest.mark.parametrize("mode", MODES)
def test_a_plain_refund_a_replay_and_a_conflict(both, mode):
    def scenario(run):
        order = run.order("100.00")
        first = run.issue(order, "30.00", "k1", approval_ref="7", reason="Damaged.")
        again = run.issue(order, "30.00", "k1", approval_ref="7", reason="Damaged.")
        assert again.pk == first.pk and again is not first
        run.issue(order, "31.00", "k1", approval_ref="7")  # the same key, other arguments
        run.issue(order, "30.00", "k1", approval_ref="8")
        run.issue(order, "0.00", "k1", approval_ref="7")  # a replay comes before any refusal
        run.position(order)

    trace = both(scenario, mode)
    assert trace[0][1]["cached"] == ["created_by", "destination", "order"]
    assert trace[1][1]["cached"] == []  # a replay is read back, as the ORM reads it
    assert [t[1:3] for t in trace[2:5]] == [("IdempotencyConflict", "idempotency_conflict")] * 3
    assert trace[2][4] == {"refund_id": "#1"} and trace[2][5] == 409
    assert trace[-1] == ("position", "30.00", "70.00", [], 1)


@pytest.mark.parametrize("mode", MODES)
def test_the_cap_counts_effective_amounts_and_only_entries_that_count(both, mode, settings):
    settings.PAYMENT_GATEWAY = "stripe"

    def scenario(run):
        order = run.order("100.00")
        lowered = run.issue(order, "70.00", "k1", source="import")
        ledger_refund_correct(entry=lowered, new_amount="50.00", reason="restocking fee")
        failed = run.issue(order, "20.00", "k2")  # pending at the provider: counts
        run.issue(order, "30.01", "k3")
        ledger_refund_record_outcome(entry_id=failed.pk, status="failed", reason="card_declined")
        canceled = run.issue(order, "25.00", "k4")
        ledger_refund_record_outcome(entry_id=canceled.pk, status="canceled")
        run.issue(order, "50.01", "k5")  # 50.00 left: 70.00 corrected to 50.00, failed and canceled don't count
        run.issue(order, "50.00", "k6", source="import")
        run.issue(order, "0.01", "k7")  # nothing left
        run.position(order)

    trace = both(scenario, mode)
    refused = [t for t in trace if t[0] == "refused"]
    assert [(t[2], t[4]) for t in refused] == [
        ("refund_exceeds_refundable", {"refundable": "30.00"}),
        ("refund_exceeds_refundable", {"refundable": "50.00"}),
        ("refund_exceeds_refundable", {"refundable": "0.00"}),
    ]
    assert refused[1][3] == "Refund of 50.01 USD exceeds what is still refundable on <order 0> (50.00 of 100.00)."
    assert trace[-1] == ("position", "100.00", "0.00", [], 4)


@pytest.mark.parametrize("mode", MODES)
def test_what_is_refused_before_the_cap(both, mode, tenant):
    def scenario(run):
        order = run.order("100.00")
        run.issue(order, "0.00", "k1")
        run.issue(order, "-5.00", "k2")
        run.issue(order, "10.00", "k3", currency="EUR")
        stranger = Customer.objects.create(tenant=tenant, external_id=f"CUST-{run.path}")
        theirs = PaymentMethod.objects.create(customer=stranger, external_id="card_9", kind="card", last4="0000")
        run.issue(order, "1.00", "k4", destination=theirs)
        run.issue(order, "100.01", "k5")
        run.issue(order, "１２０", "k6")  # Decimal() takes other scripts' digits; money() does not
        run.issue(order, "500", "k7", currency="JPY")  # representable in JPY, not the order's currency
        run.position(order)

    trace = both(scenario, mode)
    assert [t[2] for t in trace if t[0] == "refused"] == [
        "refund_not_positive",
        "refund_not_positive",
        "currency_mismatch",
        "foreign_destination",
        "refund_exceeds_refundable",
        "bad_amount",
        "currency_mismatch",
    ]
    assert trace[2][3] == "Refund currency EUR differs from order currency USD."
    assert trace[-1] == ("position", "0.00", "100.00", [], 0)


@pytest.mark.parametrize("mode", MODES)
def test_item_refunds_match_units_like_items_match(both, mode):
    items = [("BOTTLE", "47.84", 1), ("SOCKS", "11.08", 1), ("MUG", "25.00", 2), ("SOCKS", "11.08", 1)]

    def scenario(run):
        order = run.order("150.00", items=items)
        run.issue(order, "47.85", "k1", item_ids=["BOTTLE"])  # above the item's price
        run.issue(order, "1.00", "k2", item_ids=["NOPE"])  # on no line
        run.issue(order, "11.08", "k3", item_ids=["SOCKS"])  # line 2
        run.issue(
            order, "50.00", "k4", item_ids=["SOCKS", "MUG", "SOCKS", "MUG"]
        )  # line 4 once, MUG twice, one SOCKS left over
        run.issue(order, "47.16", "k5", item_ids=["MUG", "SOCKS", "MUG"])  # MUG x2 (line 3), SOCKS (line 4)
        run.issue(order, "47.84", "k6", item_ids=["BOTTLE", "BOTTLE"])  # the second BOTTLE has no unit left
        run.issue(order, "47.84", "k7", item_ids=["BOTTLE"])
        run.issue(order, "1.00", "k8", item_ids=["MUG"])  # all refunded now
        run.position(order)

    trace = both(scenario, mode)
    refused = {t[2] for t in trace if t[0] == "refused"}
    assert refused == {"refund_exceeds_items", "item_not_refundable"}
    assert trace[0][3] == "Refund of 47.85 USD exceeds the price of the items (47.84)."
    assert trace[1][3] == "Items NOPE are not on <order 0> or were already refunded."
    assert trace[3][3] == "Items SOCKS are not on <order 0> or were already refunded."
    assert trace[4][1]["items"] == [(3, 2, "50.00"), (4, 1, "11.08")]  # in the order first matched
    assert trace[5][3] == "Items BOTTLE are not on <order 0> or were already refunded."
    assert trace[-1] == ("position", "106.08", "43.92", [(1, 1), (2, 1), (3, 2), (4, 1)], 3)


@pytest.mark.parametrize("mode", MODES)
def test_a_failed_item_refund_gives_its_units_back(both, mode, settings):
    settings.PAYMENT_GATEWAY = "stripe"

    def scenario(run):
        order = run.order("100.00", items=[("ITEM-1", "60.00", 1), ("ITEM-2", "40.00", 1)])
        failed = run.issue(order, "60.00", "k1", item_ids=["ITEM-1"])
        run.issue(order, "40.00", "k2", item_ids=["ITEM-1"])  # within the cap; the unit is taken
        ledger_refund_record_outcome(entry_id=failed.pk, status="failed", reason="card_declined")
        run.issue(order, "60.00", "k3", item_ids=["ITEM-1"])
        run.position(order)

    trace = both(scenario, mode)
    assert [t[0] if t[0] != "refused" else t[2] for t in trace] == [
        "entry",
        "item_not_refundable",
        "entry",
        "position",
    ]


@pytest.mark.parametrize("mode", MODES)
def test_store_credit_grows_the_gift_card_except_on_import(both, mode, settings):
    settings.PAYMENT_GATEWAY = "stripe"

    def scenario(run):
        order = run.order("100.00")
        gift, empty = run.gift_card("10.00"), run.gift_card(None)
        run.issue(order, "25.00", "k1", destination=gift, destination_kind="gift_card")
        run.issue(order, "25.00", "k1", destination=gift, destination_kind="gift_card")  # a replay grows nothing
        run.issue(order, "5.00", "k2", destination=empty, destination_kind="gift_card")
        run.issue(order, "7.00", "k3", destination=gift, destination_kind="gift_card", source="import")
        run.issue(order, "3.00", "k4", destination=gift, destination_kind="original")  # not store credit
        run.issue(order, "99.00", "k5", destination=gift, destination_kind="gift_card")  # refused: unchanged
        gift.refresh_from_db()
        empty.refresh_from_db()
        run.note("balances", str(gift.balance), str(empty.balance))
        run.position(order)

    trace = both(scenario, mode)
    assert [(t[1]["gateway"], t[1]["status"]) for t in trace if t[0] == "entry"] == [
        ("store_credit", "succeeded"),
        ("store_credit", "succeeded"),
        ("store_credit", "succeeded"),
        ("store_credit", "succeeded"),
        ("stripe", "pending"),
    ]
    assert ("note", "balances", "35.00", "5.00") in trace


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("gateway", ["stripe", "manual"])
def test_the_first_status_follows_the_gateway_setting(both, mode, settings, gateway, django_user_model):
    settings.PAYMENT_GATEWAY = gateway
    finance = django_user_model.objects.create(username="fin")

    def scenario(run):
        order = run.order("100.00")
        run.issue(order, "10.00", "k1", approval_ref="12", created_by=finance)
        run.issue(order, "10.00", "k2", source="import")
        run.issue(order, "10.00", "k3", source=RefundEntry.Source.MANUAL, reason="operator")

    trace = both(scenario, mode)
    first = trace[0][1]
    assert (first["gateway"], first["status"], first["created_by"]) == (
        ("stripe", "pending", True) if gateway == "stripe" else ("manual", "succeeded", True)
    )
    assert first["events"] == [("", first["status"], "issue", "", "", "")]
    assert [(t[1]["gateway"], t[1]["status"]) for t in trace[1:]] == [("manual", "succeeded")] * 2


@pytest.mark.parametrize("mode", MODES)
def test_a_refusal_inside_an_outer_transaction_leaves_it_usable(both, mode):
    def scenario(run):
        order = run.order("100.00")
        with transaction.atomic():
            run.issue(order, "100.01", "k1", _in_atomic=True)
            run.issue(order, "1.00", "k2", currency="EUR", _in_atomic=True)
            run.issue(order, "40.00", "k3", _in_atomic=True)
            run.issue(order, "40.00", "k3", _in_atomic=True)
        run.position(order)

    trace = both(scenario, mode)
    assert [t[0] for t in trace] == ["refused", "refused", "entry", "entry", "position"]
    assert trace[-1] == ("position", "40.00", "60.00", [], 1)


@pytest.mark.parametrize("mode", MODES)
def test_an_order_that_does_not_exist(both, mode, tenant, customer):
    def scenario(run):
        ghost = Order(pk=987_654_321, tenant=tenant, customer=customer, external_id="GHOST", currency="USD")
        try:
            with implementation(run.path):
                ledger_refund_issue(order=ghost, amount="1.00", currency="USD", idempotency_key=run.key("k"))
        except Order.DoesNotExist as exc:
            run.note(type(exc).__name__, str(exc))

    assert both(scenario, mode) == [("note", "DoesNotExist", "Order matching query does not exist.")]


# --- inputs the database cannot take -------------------------------------------------------------


@pytest.mark.parametrize("mode", MODES)
def test_text_postgresql_cannot_store_fails_as_it_always_has(both, mode):
    """NUL bytes and text longer than its column: a DataError after the refusals (the ORM way,
    which the database path hands them to); an item id with a NUL byte is simply not on the
    order. Nothing is written; an outer transaction stays usable."""

    def scenario(run):
        run.function = False  # every call below goes the ORM way on the database path too
        order = run.order("100.00", items=[("A", "10.00", 1)])
        calls = [
            {"reason": "Good\x00will"},
            {"approval_ref": "7\x00"},
            {"key": "k\x00"},
            {"key": "k" * 201},
            {"reason": "lone \ud800 surrogate"},
            {"reason": "Good\x00will", "amount": "100.01"},  # the refusal comes first
            {"item_ids": ["A\x00"]},
            {"destination_kind": "x" * 21},
        ]
        for n, call in enumerate(calls):
            call = {"amount": "1.00", "key": f"n{n}", **call}
            with transaction.atomic():
                try:
                    run.issue(order, call.pop("amount"), call.pop("key"), _in_atomic=True, **call)
                except DataError as exc:
                    run.note("DataError", str(exc).splitlines()[0])
                except UnicodeEncodeError as exc:
                    run.note("UnicodeEncodeError", exc.reason)
                with connection.cursor() as cursor:  # still usable
                    cursor.execute("SELECT 1")
        run.position(order)

    trace = both(scenario, mode)
    assert trace[0] == ("note", "DataError", "PostgreSQL text fields cannot contain NUL (0x00) bytes")
    assert trace[3] == ("note", "DataError", "value too long for type character varying(200)")
    assert trace[5][2] == "refund_exceeds_refundable"
    assert trace[6][2] == "item_not_refundable"
    assert trace[-1] == ("position", "0.00", "100.00", [(1, 0)], 0)


@pytest.mark.parametrize("amount", [Decimal("1e30"), "1e30", Decimal("-1e40"), 10.0, "NaN", "1.005", "ten"])
def test_amounts_that_are_not_money_are_refused_before_any_query(make_order, amount):
    order = make_order("100.00")

    with CaptureQueriesContext(connection) as queries, pytest.raises(InvalidInput) as refused:
        ledger_refund_issue(order=order, amount=amount, currency="USD", idempotency_key="k")

    assert refused.value.code in ("bad_amount", "float_amount")
    assert refused.value.status_code == 422
    assert queries.captured_queries == []


# --- one statement --------------------------------------------------------------------------------


@pytest.mark.django_db(transaction=True)
def test_outside_a_transaction_a_refund_is_one_statement_and_a_refusal_writes_nothing(make_order):
    order = make_order("100.00", items=[("ITEM-1", "60.00", 1), ("ITEM-2", "40.00", 1)])
    assert not connection.in_atomic_block

    def one(**kwargs):
        with CaptureQueriesContext(connection) as queries:
            try:
                return ledger_refund_issue(order=order, currency="USD", **kwargs)
            except DomainError as exc:
                return exc
            finally:
                [query] = queries.captured_queries  # no BEGIN, no COMMIT: one statement, its own transaction
                assert "ledger_refund_issue(" in query["sql"]

    entry = one(amount="60.00", idempotency_key="k1", item_ids=["ITEM-1"])
    assert isinstance(entry, RefundEntry) and entry.amount == Decimal("60.00")
    assert isinstance(one(amount="60.00", idempotency_key="k1", item_ids=["ITEM-1"]), RefundEntry)  # replay
    assert isinstance(one(amount="1.00", idempotency_key="k1"), IdempotencyConflict)
    counts = (RefundEntry.objects.count(), RefundEntryEvent.objects.count(), RefundEntryItem.objects.count())
    for refused in (
        one(amount="40.01", idempotency_key="k2"),
        one(amount="10.00", idempotency_key="k3", item_ids=["ITEM-1"]),
        one(amount="40.01", idempotency_key="k4", item_ids=["ITEM-2"]),
    ):
        assert isinstance(refused, RefundRefused)
    assert (RefundEntry.objects.count(), RefundEntryEvent.objects.count(), RefundEntryItem.objects.count()) == counts
    # and the refund is committed
    assert order_refund_position(order).refunded_total == Decimal("60.00")


def test_inside_a_transaction_it_is_one_statement_too(make_order):
    order = make_order("100.00")

    with CaptureQueriesContext(connection) as queries:
        ledger_refund_issue(order=order, amount="10.00", currency="USD", idempotency_key="k1")
        with pytest.raises(RefundRefused):
            ledger_refund_issue(order=order, amount="90.01", currency="USD", idempotency_key="k2")

    assert len(queries.captured_queries) == 2  # no savepoints


@pytest.mark.django_db
def test_the_function_returns_the_entry_in_the_models_field_order():
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT proargnames, proargmodes FROM pg_proc WHERE proname = 'ledger_refund_issue'",
        )
        [(names, modes)] = cursor.fetchall()
    out = [name.removeprefix("o_") for name, mode in zip(names, modes, strict=True) if mode == "o"]
    fields = [f.attname for f in RefundEntry._meta.concrete_fields]
    assert out[services._ENTRY_AT :] == list(services._ENTRY_FIELDS) == fields
    assert len(out) == services._ENTRY_AT + len(fields)


# --- real concurrency ------------------------------------------------------------------------------


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize("path", PATHS)
def test_two_refunds_racing_past_the_total_one_wins(make_order, run_concurrently, path):
    # given orders of 100.00, and for each two workers wanting 60.00 and 50.00 at the same moment
    orders = [make_order("100.00") for _ in range(4)]

    def refund(order, amount, key):
        return ledger_refund_issue(order=order, amount=amount, currency="USD", idempotency_key=key)

    for n, order in enumerate(orders):
        with forced(path):
            results = run_concurrently(refund, [(order, "60.00", f"{n}-a"), (order, "50.00", f"{n}-b")])

        # then exactly one was written, the other refused on what was left after it
        won = [r for r in results if isinstance(r, RefundEntry)]
        lost = [r for r in results if isinstance(r, RefundRefused)]
        assert len(won) == 1 and len(lost) == 1, results
        assert lost[0].code == "refund_exceeds_refundable"
        assert lost[0].details == {"refundable": str(Decimal("100.00") - won[0].amount)}
        assert order_refund_position(order).refunded_total == won[0].amount
        assert list(RefundEntry.objects.filter(order=order).values_list("pk", flat=True)) == [won[0].pk]


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize("path", PATHS)
def test_a_key_raced_in_from_another_order_is_a_conflict_not_an_error(make_order, path):
    # given a refund under key K on one order, written but not yet committed
    first, second = make_order("100.00"), make_order("100.00")
    started, result = threading.Event(), {}

    def other_order():
        started.wait(10)
        begun = time.monotonic()
        try:
            result["value"] = ledger_refund_issue(order=second, amount="10.00", currency="USD", idempotency_key="K")
        except Exception as exc:  # noqa: BLE001 - the test inspects it
            result["value"] = exc
        finally:
            result["waited"] = time.monotonic() - begun
            connection.close()

    with forced(path):
        worker = threading.Thread(target=other_order)
        worker.start()
        with transaction.atomic():
            mine = ledger_refund_issue(order=first, amount="10.00", currency="USD", idempotency_key="K")
            # when another order's writer (not held up by this order's lock) uses K before the commit
            started.set()
            time.sleep(0.5)
        worker.join(30)

    # then it waited for this transaction on the key, and got a conflict naming the entry, no error
    assert result["waited"] >= 0.3
    assert isinstance(result["value"], IdempotencyConflict), result["value"]
    assert result["value"].details == {"refund_id": mine.pk}
    assert list(RefundEntry.objects.filter(idempotency_key="K").values_list("order_id", flat=True)) == [first.pk]
    assert not RefundEntry.objects.filter(order=second).exists()
