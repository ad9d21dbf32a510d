"""manage.py inbox_address: one address per tenant, checked, never another tenant's."""

import pytest
from django.core.management import CommandError, call_command

from ledger.models import Tenant
from refundagent.models import InboxAddress

pytestmark = pytest.mark.django_db


def test_sets_and_changes_the_tenants_address_lowercased(tenant, capsys):
    call_command("inbox_address", "--tenant", tenant.slug, "Support@Shop.Example.com")
    call_command("inbox_address", "--tenant", tenant.slug, "help@shop.example.com")

    assert list(InboxAddress.objects.values_list("tenant__slug", "address")) == [("shop", "help@shop.example.com")]
    assert "address=help@shop.example.com" in capsys.readouterr().out


@pytest.mark.parametrize("address", ["not-an-address", "", "a@b\r\nBcc: x@y.z", "support@"])
def test_an_invalid_address_exits_1_and_writes_nothing(tenant, address):
    with pytest.raises(CommandError):
        call_command("inbox_address", "--tenant", tenant.slug, address)

    assert not InboxAddress.objects.exists()


def test_another_tenants_address_exits_1_whatever_its_case(tenant):
    other = Tenant.objects.create(slug="other", name="Other")
    call_command("inbox_address", "--tenant", other.slug, "support@shop.example.com")

    with pytest.raises(CommandError, match="another tenant's"):
        call_command("inbox_address", "--tenant", tenant.slug, "SUPPORT@shop.example.com")

    assert list(InboxAddress.objects.values_list("tenant__slug", flat=True)) == ["other"]


def test_an_unknown_tenant_exits_1(db):
    with pytest.raises(CommandError, match="No tenant"):
        call_command("inbox_address", "--tenant", "nope", "support@x.example.com")
