"""manage.py reconcile_payments: findings for every difference between the provider and the ledger."""

from datetime import timedelta
from decimal import Decimal
from io import StringIO
from unittest import mock

import pytest
from django.core.management import CommandError, call_command
from django.utils import timezone

from ledger.models import ReconciliationFinding, ReconciliationRun, RefundEntry
from ledger.payouts import ledger_refund_payout
from ledger.reconciliation import reconciliation_findings_resolve
from ledger.services import ledger_refund_issue

SINCE = (timezone.now() - timedelta(days=2)).strftime("%Y-%m-%d")


def reconcile(*args):
    out, err = StringIO(), StringIO()
    try:
        call_command("reconcile_payments", *args, stdout=out, stderr=err)
        code = 0
    except SystemExit as exc:
        code = exc.code
    return code, out.getvalue()


def paid(order, amount="30.00", key="k-1"):
    entry = ledger_refund_issue(
        order=order, amount=amount, currency=order.currency, idempotency_key=key, source="approval", approval_ref=key
    )
    return ledger_refund_payout(entry_id=entry.pk)


def an_hour_later():
    return mock.patch("ledger.reconciliation.timezone.now", return_value=timezone.now() + timedelta(hours=1))


def test_with_the_manual_gateway_there_is_nothing_to_compare(make_order, settings):
    settings.PAYMENT_GATEWAY = "manual"
    ledger_refund_issue(order=make_order("100.00"), amount="10.00", currency="USD", idempotency_key="m-1")
    code, out = reconcile()
    assert code == 0 and "nothing to compare" in out.replace("no provider record to compare", "nothing to compare")
    assert not ReconciliationFinding.objects.exists()


def test_a_clean_run_exits_0(fake_stripe, make_order):
    # given two refunds paid through Stripe, and one to a gift card (no provider record)
    paid(make_order("100.00", payment_ref="pi_c1"), key="k-1")
    paid(make_order("100.00", payment_ref="pi_c2"), "100.00", key="k-2")
    with an_hour_later():
        code, out = reconcile("--since", SINCE)
    assert code == 0, out
    run = ReconciliationRun.objects.get()
    assert (run.provider_refunds, run.ledger_entries, run.findings_count) == (2, 2, 0)
    assert "agrees" in out


def test_a_refund_missing_in_the_ledger_is_found_and_recorded_as_external(fake_stripe, make_order):
    order = make_order("100.00", payment_ref="pi_m1")
    refund = fake_stripe.add_refund(payment_intent="pi_m1", amount=1234)
    code, out = reconcile("--since", SINCE)
    assert code == 1
    finding = ReconciliationFinding.objects.get()
    assert finding.kind == "missing_in_ledger" and refund["id"] in out
    assert RefundEntry.objects.get(order=order).status == "external"


def test_a_refund_missing_at_the_provider_is_found(fake_stripe, make_order):
    entry = paid(make_order("100.00", payment_ref="pi_m2"))
    fake_stripe.refunds.clear()  # the provider has no such refund
    with an_hour_later():
        code, out = reconcile("--since", SINCE)
    assert code == 1
    assert list(ReconciliationFinding.objects.values_list("kind", "entry")) == [("missing_at_provider", entry.pk)]


def test_an_amount_that_differs_is_found(fake_stripe, make_order):
    entry = paid(make_order("100.00", payment_ref="pi_m3"))
    fake_stripe.refunds[entry.provider_ref]["amount"] = 2999
    with an_hour_later():
        code, out = reconcile("--since", SINCE)
    assert code == 1
    finding = ReconciliationFinding.objects.get()
    assert (finding.kind, finding.ledger_amount, finding.provider_amount) == (
        "amount_differs",
        Decimal("30.00"),
        Decimal("29.99"),
    )


def test_a_status_that_differs_is_found(fake_stripe, make_order):
    # given the ledger says succeeded and the provider says pending (a move the ledger never makes back)
    entry = paid(make_order("100.00", payment_ref="pi_m4"))
    fake_stripe.refunds[entry.provider_ref]["status"] = "pending"
    with an_hour_later():
        code, out = reconcile("--since", SINCE)
    assert code == 1
    finding = ReconciliationFinding.objects.get()
    assert (finding.kind, finding.ledger_status, finding.provider_status) == ("status_differs", "succeeded", "pending")
    entry.refresh_from_db()
    assert entry.status == "succeeded"


def test_a_pending_entry_is_completed_by_reconciliation_and_then_agrees(fake_stripe, make_order):
    # given the provider shows as succeeded a refund the ledger still has pending
    fake_stripe.refund_status = "pending"
    entry = paid(make_order("100.00", payment_ref="pi_m5"))
    assert entry.status == "pending"
    fake_stripe.refunds[entry.provider_ref]["status"] = "succeeded"
    with an_hour_later():
        code, out = reconcile("--since", SINCE)
    entry.refresh_from_db()
    assert code == 0 and entry.status == "succeeded"
    assert entry.events.last().source == "reconciliation"


def test_resolved_findings_let_the_command_exit_0_and_are_not_found_again(fake_stripe, make_order, user, demo):
    fake_stripe.add_refund(payment_intent="pi_m6", amount=500)
    make_order("100.00", payment_ref="pi_m6")
    assert reconcile("--since", SINCE)[0] == 1
    reconciliation_findings_resolve(
        queryset=ReconciliationFinding.objects.all(),
        user=user("acme-finance"),
        note="Refunded by hand on the phone; fine.",
    )
    assert reconcile("--since", SINCE)[0] == 0
    assert ReconciliationFinding.objects.count() == 1


def test_the_tenant_option_limits_the_run_to_that_shop(fake_stripe, make_order, demo):
    fake_stripe.add_refund(payment_intent="pi_m7", amount=700)
    make_order("100.00", payment_ref="pi_m7")  # the "shop" tenant's order
    assert reconcile("--tenant", "globex", "--since", SINCE)[0] == 0
    assert reconcile("--tenant", "shop", "--since", SINCE)[0] == 1


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--since", "2026-13-45"], "YYYY-MM-DD"),
        (["--since", "yesterday"], "YYYY-MM-DD"),
        (["--tenant", "nobody"], "No tenant"),
    ],
)
def test_bad_options_are_refused_and_nothing_is_written(fake_stripe, args, message, db):
    with pytest.raises(CommandError, match=message):
        call_command("reconcile_payments", *args, stdout=StringIO())
    assert not ReconciliationRun.objects.exists() and fake_stripe.calls == []
