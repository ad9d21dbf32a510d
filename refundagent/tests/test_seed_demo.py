"""`manage.py seed_demo`: the demo data of docs/api.md, the same however often it runs."""

from datetime import timedelta
from decimal import Decimal

import pytest
from django.apps import apps
from django.contrib.auth import authenticate, get_user_model
from django.contrib.auth.models import Group
from django.core.management import CommandError, call_command
from django.test import RequestFactory
from django.utils import timezone

from approvals.models import RefundPolicy
from ledger.models import Order, Tenant
from ledger.selectors import order_refund_position
from ledger.tenancy import user_roles

pytestmark = pytest.mark.django_db


def _snapshot() -> dict:
    """Every row of every table the seed touches, values and all."""
    models = [
        *apps.get_app_config("ledger").get_models(),
        *apps.get_app_config("approvals").get_models(),
        get_user_model(),
        Group,
        Group.permissions.through,
        get_user_model().groups.through,
    ]
    return {model._meta.label: list(model._default_manager.order_by("pk").values_list()) for model in models}


def test_seed_demo_twice_gives_the_same_data():
    # given the demo seeded once
    call_command("seed_demo")
    first = _snapshot()

    # when it is seeded again
    call_command("seed_demo")

    # then every row is the same: same counts, same values
    second = _snapshot()
    assert {k: len(v) for k, v in second.items()} == {k: len(v) for k, v in first.items()}
    assert second == first
    assert len(first["ledger.Order"]) >= 8 and len(first["ledger.RefundEntry"]) >= 2


def test_seed_demo_refuses_a_demo_username_taken_by_another_tenants_user(make_user):
    # given a shop whose support person happens to be called acme-finance
    make_user("acme-finance", "support")
    before = _snapshot()

    # when the demo is seeded
    with pytest.raises(CommandError, match="User acme-finance already exists in tenant shop, not acme"):
        call_command("seed_demo")

    # then that user is not made finance (nor moved to acme), and nothing at all was written
    shop_user = get_user_model().objects.get(username="acme-finance")
    assert (shop_user.membership.tenant.slug, user_roles(shop_user)) == ("shop", {"support"})
    assert _snapshot() == before


EXPECTED_USERS = {
    "acme-support": ("acme", {"support"}),
    "acme-finance": ("acme", {"finance"}),
    "acme-finance2": ("acme", {"finance"}),
    "acme-lead": ("acme", {"support", "finance"}),
    "globex-support": ("globex", {"support"}),
    "globex-finance": ("globex", {"finance"}),
}


@pytest.mark.parametrize("username", EXPECTED_USERS)
def test_demo_users_have_the_tenant_roles_and_password_of_api_md(settings, username):
    settings.DEMO_PASSWORD = "s3cret-demo"
    call_command("seed_demo")

    # As the login views call it: with the request, which django-axes needs to count attempts.
    user = authenticate(RequestFactory().post("/login/"), username=username, password="s3cret-demo")

    assert user is not None
    tenant, roles = EXPECTED_USERS[username]
    assert (user.membership.tenant.slug, user_roles(user)) == (tenant, roles)


def test_demo_orders_and_policies_are_those_of_api_md():
    call_command("seed_demo")
    now = timezone.now()

    def order(external_id):
        return Order.objects.select_related("tenant", "customer").get(external_id=external_id)

    for external_id, tenant, customer, total, days in [
        ("ORD-5001", "acme", "CUST-1001", "120.00", 12),
        ("ORD-5002", "acme", "CUST-1001", "80.00", 45),
        ("ORD-7001", "globex", "CUST-2001", "60.00", 3),
    ]:
        o = order(external_id)
        assert (o.tenant.slug, o.customer.external_id, o.total, o.currency) == (tenant, customer, Decimal(total), "USD")
        assert abs((now - o.placed_at) - timedelta(days=days)) < timedelta(minutes=5)
        assert order_refund_position(o).refunded_total == Decimal("0.00")
    assert set(Tenant.objects.values_list("slug", flat=True)) >= {"acme", "globex"}
    for slug in ("acme", "globex"):
        current = RefundPolicy.objects.for_tenant(Tenant.objects.get(slug=slug)).filter(status="published")
        assert list(current.values_list("version", "window_days")) == [("refund-policy-v4", 30)]
        assert current.get().two_approver_threshold == Decimal("500.00")
