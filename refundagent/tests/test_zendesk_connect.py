"""zendesk_connect: credentials checked with a real call to the fake Zendesk, stored encrypted,
never printed, logged, shown in the admin or answered by the API."""

import logging
from io import StringIO

import pytest
from django.core.management import call_command
from django.core.management.base import CommandError
from django.db import connection as db

from refundagent.zendesk.models import ZendeskConnection

from .zendesk_support import AGENT_EMAIL, API_TOKEN, WEBHOOK_SECRET


def _connect(for_tenant, **overrides):
    options = dict(
        tenant=for_tenant.slug, subdomain="shop", email=AGENT_EMAIL, api_token=API_TOKEN, webhook_secret=WEBHOOK_SECRET
    )
    options.update(overrides)
    out = StringIO()
    call_command("zendesk_connect", stdout=out, stderr=out, **options)
    return out.getvalue()


def test_connect_checks_the_credentials_and_stores_them_encrypted(tenant, fake_zendesk, caplog):
    # Given an agent whose token Zendesk accepts
    agent = fake_zendesk.add_agent(AGENT_EMAIL, API_TOKEN)
    caplog.set_level(logging.DEBUG)

    # When the tenant connects
    output = _connect(tenant, account_id=42)

    # Then users/me was called with basic auth, the connection is stored, the secrets nowhere in sight
    assert [c["path"] for c in fake_zendesk.calls] == ["/api/v2/users/me.json"]
    stored = ZendeskConnection.objects.get(tenant=tenant)
    assert (stored.subdomain, stored.agent_user_id, stored.account_id) == ("shop", agent["id"], 42)
    assert stored.api_token == API_TOKEN and stored.webhook_secret == WEBHOOK_SECRET
    assert "zendesk connected tenant=shop subdomain=shop" in output
    for secret in (API_TOKEN, WEBHOOK_SECRET):
        assert secret not in output
        assert secret not in caplog.text
        assert secret not in repr(stored) and secret not in str(stored)
    # At rest the columns hold ciphertext, not the token.
    with db.cursor() as cursor:
        cursor.execute("SELECT api_token, webhook_secret FROM zendesk_zendeskconnection WHERE id = %s", [stored.pk])
        raw_token, raw_secret = cursor.fetchone()
    assert API_TOKEN not in raw_token and WEBHOOK_SECRET not in raw_secret


@pytest.mark.parametrize(
    "overrides",
    [
        {"api_token": "wrong-token"},
        {"email": "someone-else@shop.example"},
    ],
)
def test_refused_credentials_exit_1_with_the_reason_and_store_nothing(tenant, fake_zendesk, overrides):
    fake_zendesk.add_agent(AGENT_EMAIL, API_TOKEN)

    with pytest.raises(CommandError) as refused:
        _connect(tenant, **overrides)

    assert "Zendesk refused GET /api/v2/users/me.json: 401" in str(refused.value)
    assert "wrong-token" not in str(refused.value)
    assert not ZendeskConnection.objects.exists()


def test_an_end_user_token_is_refused(tenant, fake_zendesk):
    fake_zendesk.add_agent(AGENT_EMAIL, API_TOKEN, role="end-user")

    with pytest.raises(CommandError, match="did not accept the credentials as an agent's"):
        _connect(tenant)
    assert not ZendeskConnection.objects.exists()


def test_zendesk_down_refuses_and_stores_nothing(tenant, fake_zendesk):
    fake_zendesk.add_agent(AGENT_EMAIL, API_TOKEN)
    fake_zendesk.down = True

    with pytest.raises(CommandError, match="could not be reached"):
        _connect(tenant)
    assert not ZendeskConnection.objects.exists()


@pytest.mark.parametrize(
    "overrides, message",
    [
        ({"subdomain": "not a domain"}, "is not a Zendesk subdomain"),
        ({"email": "nobody"}, "is not an email address"),
        ({"api_token": " "}, "API token is empty"),
        ({"webhook_secret": ""}, "signing secret is empty"),
        ({"tenant": "nope"}, "No tenant"),
    ],
)
def test_bad_input_exits_1_before_any_call(tenant, fake_zendesk, overrides, message):
    with pytest.raises(CommandError, match=message):
        _connect(tenant, **overrides)
    assert fake_zendesk.calls == []
    assert not ZendeskConnection.objects.exists()


def test_a_subdomain_of_another_tenant_is_refused(tenant, zendesk_connection, fake_zendesk):
    from ledger.models import Tenant

    other = Tenant.objects.create(slug="other", name="Other")
    with pytest.raises(CommandError, match="connected to another tenant"):
        _connect(other)
    assert ZendeskConnection.objects.get().tenant == tenant


def test_connecting_again_replaces_the_credentials(tenant, zendesk_connection, fake_zendesk):
    fake_zendesk.add_agent(AGENT_EMAIL, "new-token-123")

    _connect(tenant, api_token="new-token-123")

    assert ZendeskConnection.objects.get().api_token == "new-token-123"


def test_the_admin_shows_set_never_the_secrets(tenant, zendesk_connection, admin_client):
    page = admin_client.get(f"/admin/zendesk/zendeskconnection/{zendesk_connection.pk}/change/")
    listing = admin_client.get("/admin/zendesk/zendeskconnection/")

    assert page.status_code == 200 and listing.status_code == 200
    for response in (page, listing):
        html = response.content.decode()
        assert "set" in html and "shop" in html
        assert API_TOKEN not in html and WEBHOOK_SECRET not in html
