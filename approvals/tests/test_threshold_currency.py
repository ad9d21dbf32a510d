"""The dual-control threshold is money: an amount in its currency. A refund in another currency is
converted at a rate the policy version recorded, or else needs the approvals above the threshold
(docs/payments.md, "Dual control across currencies")."""

import importlib
from decimal import Decimal

import pytest
from django.apps import apps
from django.core.exceptions import ValidationError
from django.db import IntegrityError, transaction
from django.utils import timezone

from approvals.models import ApprovalRequest, RefundPolicy
from ledger.models import RefundEntry
from tests.factories import policy_publish


@pytest.fixture
def policy(tenant):
    """A shop whose threshold is 75000 JPY (about 500 USD), with no recorded rates yet."""
    return policy_publish(tenant=tenant, threshold="75000", threshold_currency="JPY", now=timezone.now())


def _approve(client, request):
    return client.post(
        f"/api/approvals/{request.pk}/decision",
        {"decision": "approve", "args_hash": request.args_hash},
        content_type="application/json",
    )


def test_a_refund_in_another_currency_without_a_rate_needs_two_approvers(
    policy, people, make_order, approval_request_make, client_as, django_capture_on_commit_callbacks
):
    # given a 5000.00 USD order: a bare-number comparison calls it below 75000 (JPY)
    order = make_order("5000.00", external_id="ORD-USD", currency="USD")
    request = approval_request_make(order=order, filer=people["support"])
    # then it needs two approvers: the first approval leaves it pending and moves no money
    assert request.required_approvals == 2
    with django_capture_on_commit_callbacks(execute=True):
        first = _approve(client_as("finance"), request)
    assert first.status_code == 200, first.content
    assert first.json()["status"] == "pending"
    assert not RefundEntry.objects.filter(order=order).exists()
    # and the second, distinct approver executes it
    with django_capture_on_commit_callbacks(execute=True):
        second = _approve(client_as("finance2"), request)
    assert second.status_code == 200, second.content
    assert ApprovalRequest.objects.get(pk=request.pk).status == "executed"


def test_a_recorded_rate_converts_the_refund_to_the_thresholds_currency(
    tenant, people, make_order, approval_request_make
):
    # given the threshold 75000 JPY with a recorded rate of 150 JPY to the US dollar
    RefundPolicy.objects.filter(tenant=tenant).update(threshold_rates={"USD": "150"})
    small = make_order("100.00", external_id="ORD-SMALL", currency="USD")  # 15000 JPY
    large = make_order("600.00", external_id="ORD-LARGE", currency="USD")  # 90000 JPY
    assert approval_request_make(order=small, filer=people["support"]).required_approvals == 1
    assert approval_request_make(order=large, filer=people["support"]).required_approvals == 2


def test_the_thresholds_own_currency_compares_as_before(people, make_order, approval_request_make):
    below = make_order("50000", external_id="ORD-JPY-1", currency="JPY")
    above = make_order("80000", external_id="ORD-JPY-2", currency="JPY")
    assert approval_request_make(order=below, filer=people["support"]).required_approvals == 1
    assert approval_request_make(order=above, filer=people["support"]).required_approvals == 2


def test_a_threshold_without_a_currency_is_refused(policy):
    draft = RefundPolicy(
        tenant=policy.tenant,
        version="v-next",
        two_approver_threshold=Decimal("500.00"),
        threshold_rates={"EUR": "abc"},
        text="next",
    )
    with pytest.raises(ValidationError) as refused:
        draft.full_clean()
    assert set(refused.value.message_dict) >= {"two_approver_threshold_currency", "threshold_rates"}
    draft.two_approver_threshold_currency, draft.threshold_rates = "JPY", {"EUR": "162.5"}
    draft.two_approver_threshold = Decimal("500.50")  # JPY has no minor unit
    with pytest.raises(ValidationError) as refused:
        draft.full_clean()
    assert "two_approver_threshold" in refused.value.message_dict
    # and the database refuses a threshold without a currency whatever the writer
    draft.two_approver_threshold_currency = ""
    with pytest.raises(IntegrityError), transaction.atomic():
        draft.save()


def test_the_migration_gives_an_existing_threshold_its_shops_currency(tenant, make_order):
    # given an existing policy whose threshold has no currency yet (as before the migration)
    make_order("10.00", external_id="ORD-EUR-1", currency="EUR")
    make_order("20.00", external_id="ORD-EUR-2", currency="EUR")
    make_order("30.00", external_id="ORD-USD-1", currency="USD")
    with transaction.atomic():
        from django.db import connection

        with connection.cursor() as cursor:
            cursor.execute("SET CONSTRAINTS ALL DEFERRED")
            cursor.execute("ALTER TABLE approvals_refundpolicy DROP CONSTRAINT policy_threshold_has_currency")
        policy_publish(tenant=tenant, threshold="500.00", threshold_currency="", now=timezone.now())
        # when the migration's data step runs
        migration = importlib.import_module("approvals.migrations.0015_threshold_currency")
        migration.threshold_currencies_set(apps, None)
        # then the threshold is in the currency most of the shop's orders are in
        assert RefundPolicy.objects.get(tenant=tenant).two_approver_threshold_currency == "EUR"
        transaction.set_rollback(True)


def test_the_policy_admin_form_refuses_a_threshold_without_its_currency(policy, people):
    from django.contrib import admin
    from django.test import RequestFactory

    model_admin = admin.site._registry[RefundPolicy]
    request = RequestFactory().get("/")
    request.user = people["ops"]
    form_class = model_admin.get_form(request, None)
    data = {
        "tenant": policy.tenant_id,
        "version": "refund-policy-v5",
        "window_days": "30",
        "full_refund_statuses": '["delivered"]',
        "item_refund_statuses": '["delivered"]',
        "full_refund_destinations": '["original"]',
        "item_refund_destinations": '["original"]',
        "two_approver_threshold": "500.00",
        "two_approver_threshold_currency": "",
        "threshold_rates": "{}",
        "approvals_above_threshold": "2",
        "waivable_rules": '["window"]',
        "text": "v5",
    }
    form = form_class(data=data)
    assert not form.is_valid()
    assert "two_approver_threshold_currency" in form.errors
    assert not RefundPolicy.objects.filter(version="refund-policy-v5").exists()
    form = form_class(data={**data, "two_approver_threshold_currency": "USD", "threshold_rates": '{"EUR": "1.08"}'})
    assert form.is_valid(), form.errors
