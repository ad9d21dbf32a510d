"""A correction appends a revision; nothing in the ledger is overwritten or deleted."""

from decimal import Decimal

import pytest

from ledger.exceptions import InvalidInput, RefundRefused
from ledger.models import LedgerImmutable, RefundEntry, RefundEntryItem, RefundRevision
from ledger.selectors import order_ledger, order_refund_position
from ledger.services import ledger_refund_correct, ledger_refund_issue


@pytest.fixture
def entry(make_order):
    order = make_order("100.00", items=[("ITEM-1", "60.00", 1), ("ITEM-2", "40.00", 1)])
    return ledger_refund_issue(order=order, amount="60.00", currency="USD", idempotency_key="e1", item_ids=["ITEM-1"])


def test_a_correction_keeps_the_old_amount_in_a_revision(entry, django_user_model):
    # given a 60.00 refund
    finance = django_user_model.objects.create(username="fin")

    # when it is corrected twice
    first = ledger_refund_correct(entry=entry, new_amount="45.00", reason="restocking fee", corrected_by=finance)
    second = ledger_refund_correct(entry=entry, new_amount="50.00", reason="fee waived")

    # then each old amount is kept, the entry itself is untouched, and the effective amount moved
    assert (first.old_amount, first.new_amount, first.created_by) == (Decimal("60.00"), Decimal("45.00"), finance)
    assert (second.old_amount, second.new_amount) == (Decimal("45.00"), Decimal("50.00"))
    assert RefundEntry.objects.get(pk=entry.pk).amount == Decimal("60.00")
    [row] = order_ledger(entry.order)
    assert row.effective_amount == Decimal("50.00")
    position = order_refund_position(entry.order)
    assert (position.refunded_total, position.refundable) == (Decimal("50.00"), Decimal("50.00"))


def test_a_correction_cannot_take_the_order_above_its_total(entry):
    ledger_refund_issue(order=entry.order, amount="40.00", currency="USD", idempotency_key="e2")

    with pytest.raises(RefundRefused):
        ledger_refund_correct(entry=entry, new_amount="60.01", reason="typo")

    assert not RefundRevision.objects.exists()


@pytest.mark.parametrize("new_amount, reason", [("-1.00", "negative"), ("10.00", "   "), ("1.234", "three places")])
def test_a_bad_correction_is_refused_and_writes_nothing(entry, new_amount, reason):
    with pytest.raises(InvalidInput):
        ledger_refund_correct(entry=entry, new_amount=new_amount, reason=reason)

    assert not RefundRevision.objects.exists()


def test_entries_items_and_revisions_cannot_be_deleted_or_changed_through_the_orm(entry):
    # given an entry with an item and a revision
    revision = ledger_refund_correct(entry=entry, new_amount="50.00", reason="partial")
    item = RefundEntryItem.objects.get(entry=entry)

    # when the ORM's ordinary paths try to delete or overwrite them, then each is refused
    for row in (entry, item, revision):
        with pytest.raises(LedgerImmutable):
            row.delete()
        with pytest.raises(LedgerImmutable):
            row.save()
    for model in (RefundEntry, RefundEntryItem, RefundRevision):
        with pytest.raises(LedgerImmutable):
            model.objects.all().delete()
        with pytest.raises(LedgerImmutable):
            model.objects.filter(pk__gt=0).update(pk=0)
    # (the order and its lines are PROTECTed by the entries that point at them)
    with pytest.raises(Exception, match="protected"):
        entry.order.delete()

    # and everything is still there, as written
    assert RefundEntry.objects.get(pk=entry.pk).amount == Decimal("60.00")
    assert RefundEntryItem.objects.filter(pk=item.pk).exists()
    assert RefundRevision.objects.get(pk=revision.pk).new_amount == Decimal("50.00")


def test_refund_ids_come_from_the_database_and_are_never_reused(make_order):
    # given two refunds
    order = make_order("100.00")
    first = ledger_refund_issue(order=order, amount="1.00", currency="USD", idempotency_key="a")
    second = ledger_refund_issue(order=order, amount="1.00", currency="USD", idempotency_key="b")

    # when a refused refund happens in between
    with pytest.raises(RefundRefused):
        ledger_refund_issue(order=order, amount="999.00", currency="USD", idempotency_key="c")
    third = ledger_refund_issue(order=order, amount="1.00", currency="USD", idempotency_key="d")

    # then ids are assigned by the database, increasing, each used once
    assert RefundEntry._meta.pk.get_internal_type() == "BigAutoField"
    assert first.pk < second.pk < third.pk
    assert len({first.pk, second.pk, third.pk}) == 3
