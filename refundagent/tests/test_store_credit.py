"""Store credit is a ledger fact: a gift card the ledger credited holds its opening balance plus
the ledger's own movements; a re-import that disagrees is a conflict, refused and reported, never
applied; reconciliation compares every credited card with the ledger (docs/payments.md)."""

import json
import threading
import time
from decimal import Decimal

import pytest
from django.core.management import CommandError, call_command
from django.db import transaction

from approvals.models import ApprovalRequest
from approvals.services.decisions import approval_request_decide
from ledger.models import Order, PaymentMethod, ReconciliationFinding, RefundEntry, Tenant
from ledger.reconciliation import payments_reconcile
from ledger.selectors import gift_card_balance
from ledger.services import ledger_refund_correct, ledger_refund_issue
from refundagent.agent.loop import agent_run_ticket
from refundagent.agent.providers.offline import OfflineProvider
from refundagent.models import Ticket

GIFT_CARD = "gift_card_cust-1001"


def _store_credit(*, order, gift_card, amount, currency, idempotency_key):
    """An approved refund leg paid as store credit: the ledger's one write, to the gift card."""
    return ledger_refund_issue(
        order=order,
        amount=amount,
        currency=currency,
        idempotency_key=idempotency_key,
        destination=gift_card,
        destination_kind="gift_card",
    )


def _gift_card():
    return PaymentMethod.objects.get(customer__tenant__slug="acme", external_id=GIFT_CARD)


def _shop_file(tmp_path, balance, *, card_brand="visa", extra_customer=False):
    """acme's shop file naming CUST-1001 again with its gift card at `balance` (the shop's own)."""
    customers = [
        {
            "id": "CUST-1001",
            "name": "Jane Doe",
            "email": "jane.doe@example.com",
            "payment_methods": [
                {"id": "card_4242", "kind": "card", "brand": card_brand, "last4": "4242"},
                {"id": GIFT_CARD, "kind": "gift_card", "balance": balance},
            ],
        }
    ]
    if extra_customer:
        customers.append({"id": "CUST-3001", "name": "Ada Lovelace", "email": "ada@example.com"})
    path = tmp_path / "shop.json"
    path.write_text(json.dumps({"tenant": "acme", "customers": customers, "orders": []}))
    return str(path)


@pytest.fixture
def socks_refunded_to_gift_card(demo, user, django_capture_on_commit_callbacks):
    """ORD-5005's socks (25.00) refunded to CUST-1001's gift card (25.00) through the product:
    filed, drafted by the offline planner, approved by finance, paid as store credit."""
    from refundagent.services import ticket_create

    with django_capture_on_commit_callbacks(execute=False):
        ticket = ticket_create(
            user=user("acme-support"),
            order="ORD-5005",
            customer="CUST-1001",
            message="Please refund the socks to my gift card.",
            items=["ITEM-6"],
            refund_to=GIFT_CARD,
        )
    agent_run_ticket(ticket_id=ticket.pk, provider=OfflineProvider())
    request = ApprovalRequest.objects.get(ticket_ref=ticket.pk)
    with django_capture_on_commit_callbacks(execute=True):
        approval_request_decide(
            request_id=request.pk, user=user("acme-finance"), decision="approve", args_hash=request.args_hash
        )
    ticket.refresh_from_db()
    assert ticket.status == "refunded", ticket.stop_detail
    assert _gift_card().balance == Decimal("50.00")
    return ticket


# --- the ledger service a split-tender payout calls ------------------------------------------------


def test_store_credit_issue_credits_the_gift_card_exactly_once(demo):
    order = Order.objects.get(tenant__slug="acme", external_id="ORD-5005")
    card = _gift_card()
    first = _store_credit(order=order, gift_card=card, amount="25.00", currency="USD", idempotency_key="leg:1:gift")
    again = _store_credit(order=order, gift_card=card, amount="25.00", currency="USD", idempotency_key="leg:1:gift")
    assert again.pk == first.pk
    assert (first.gateway, first.status, first.destination_id) == ("store_credit", "succeeded", card.pk)
    card.refresh_from_db()
    assert card.balance == Decimal("50.00") == gift_card_balance(method=card)
    assert card.opening_balance == Decimal("25.00")


def test_a_correction_of_store_credit_moves_the_kept_balance_with_it(demo):
    order = Order.objects.get(tenant__slug="acme", external_id="ORD-5005")
    entry = _store_credit(
        order=order, gift_card=_gift_card(), amount="25.00", currency="USD", idempotency_key="leg:2:gift"
    )
    ledger_refund_correct(entry=entry, new_amount="10.00", reason="Only one sock was returned.")
    card = _gift_card()
    assert card.balance == Decimal("35.00") == gift_card_balance(method=card)


# --- a re-import ----------------------------------------------------------------------------------


def test_a_reimport_that_disagrees_with_the_ledger_is_refused_as_a_conflict(
    socks_refunded_to_gift_card, tmp_path, capsys
):
    # given the 25.00 refund paid to the gift card (25.00 -> 50.00), when the shop re-imports the
    # customer with its own, older balance of 25.00 and a new brand for the card and a new customer
    with pytest.raises(CommandError) as refused:
        call_command("import_orders", _shop_file(tmp_path, "25.00", card_brand="mastercard", extra_customer=True))
    # then the command exits 1 naming the conflict, and the card keeps the ledger's balance
    assert "1 record(s) refused" in str(refused.value)
    err = capsys.readouterr().err
    assert "gift card gift_card_cust-1001" in err and "25.00 disagrees with the ledger's 50.00" in err
    card = _gift_card()
    assert (card.balance, card.opening_balance) == (Decimal("50.00"), Decimal("25.00"))
    assert gift_card_balance(method=card) == Decimal("50.00")
    # the rest of the file was imported (the card, another record, changed as the file says)
    assert PaymentMethod.objects.get(customer__tenant__slug="acme", external_id="card_4242").brand == "mastercard"
    assert Tenant.objects.get(slug="acme").customers.filter(external_id="CUST-3001").exists()
    # and the ledger entry and the ticket stay true
    ticket = Ticket.objects.get(pk=socks_refunded_to_gift_card.pk)
    assert ticket.status == "refunded"
    assert RefundEntry.objects.get(gateway="store_credit", source="approval").status == "succeeded"


def test_a_reimport_that_agrees_with_the_ledger_changes_nothing(socks_refunded_to_gift_card, tmp_path, capsys):
    call_command("import_orders", _shop_file(tmp_path, "50.00"))
    assert "conflict" not in capsys.readouterr().err
    card = _gift_card()
    assert (card.balance, card.opening_balance) == (Decimal("50.00"), Decimal("25.00"))


def test_a_card_the_ledger_never_moved_takes_the_shops_balance(demo, tmp_path):
    call_command("import_orders", _shop_file(tmp_path, "12.00"))
    card = _gift_card()
    assert (card.balance, card.opening_balance) == (Decimal("12.00"), Decimal("12.00"))
    # and a store credit after it counts from there
    order = Order.objects.get(tenant__slug="acme", external_id="ORD-5005")
    _store_credit(order=order, gift_card=card, amount="5.00", currency="USD", idempotency_key="k")
    card.refresh_from_db()
    assert card.balance == Decimal("17.00") == gift_card_balance(method=card)


@pytest.mark.django_db(transaction=True)
def test_a_reimport_racing_a_store_credit_payout_never_loses_the_credit(tmp_path):
    """The payout has credited the card (its transaction still open) when the import starts; the
    shop's file says 40.00 (the customer topped the card up in the shop). Before the fix the
    import overwrote the card with 40.00 once the payout committed: the 25.00 credit vanished."""
    from refundagent.demo import demo_seed

    demo_seed()
    order = Order.objects.get(tenant__slug="acme", external_id="ORD-5005")
    credited, outcome = threading.Event(), {}

    def payout():
        try:
            with transaction.atomic():
                _store_credit(
                    order=order, gift_card=_gift_card(), amount="25.00", currency="USD", idempotency_key="race:gift"
                )
                credited.set()
                time.sleep(1.0)  # the import starts while this transaction holds its locks
        finally:
            from django.db import connection

            connection.close()

    def reimport():
        credited.wait(10)
        try:
            call_command("import_orders", _shop_file(tmp_path, "40.00"))
            outcome["import"] = "applied"
        except CommandError as exc:
            outcome["import"] = str(exc)
        finally:
            from django.db import connection

            connection.close()

    threads = [threading.Thread(target=payout), threading.Thread(target=reimport)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(30)
    assert not any(thread.is_alive() for thread in threads)
    card = _gift_card()
    # the credit is there and the card is what the ledger derives; the import was refused
    assert card.balance == Decimal("50.00") == gift_card_balance(method=card)
    assert "refused" in outcome["import"]


# --- reconciliation -------------------------------------------------------------------------------


def test_reconciliation_finds_a_gift_card_changed_outside_the_ledger(socks_refunded_to_gift_card, capsys):
    # given a card whose kept balance someone set by hand, outside the ledger
    PaymentMethod.objects.filter(pk=_gift_card().pk).update(balance=Decimal("25.00"))
    # when reconciliation runs (the default, manual gateway has no provider to list)
    with pytest.raises(SystemExit) as exited:
        call_command("reconcile_payments", "--tenant", "acme")
    # then it reports the card and exits 1
    assert exited.value.code == 1
    finding = ReconciliationFinding.objects.get(kind="store_credit_differs")
    assert (finding.payment_method_id, finding.ledger_amount, finding.provider_amount) == (
        _gift_card().pk,
        Decimal("50.00"),
        Decimal("25.00"),
    )
    assert "store_credit_differs" in capsys.readouterr().out
    # and a second run reuses the finding
    payments_reconcile(tenant=Tenant.objects.get(slug="acme"))
    assert ReconciliationFinding.objects.filter(kind="store_credit_differs").count() == 1


def test_reconciliation_is_quiet_when_store_credit_agrees(socks_refunded_to_gift_card):
    run = payments_reconcile(tenant=Tenant.objects.get(slug="acme"))
    assert run.findings_count == 0
    assert not ReconciliationFinding.objects.filter(kind="store_credit_differs").exists()


def test_the_migration_opens_an_existing_card_at_its_balance_less_the_ledgers_credit(socks_refunded_to_gift_card):
    import importlib

    from django.apps import apps

    # given a credited card as it was before the migration: no opening balance recorded
    PaymentMethod.objects.filter(pk=_gift_card().pk).update(opening_balance=None)
    # when the migration's data step runs
    importlib.import_module("ledger.migrations.0010_store_credit_opening_balance").opening_balances_derive(apps, None)
    # then the card opens at 25.00 (50.00 less the 25.00 the ledger credited) and derives 50.00
    card = _gift_card()
    assert card.opening_balance == Decimal("25.00")
    assert gift_card_balance(method=card) == Decimal("50.00") == card.balance
