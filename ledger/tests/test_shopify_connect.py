"""Connecting a store: credentials checked before anything is stored, the secret encrypted at
rest and never shown; the token reused and refreshed; rotation of the encryption keys."""

import logging
from datetime import timedelta

import pytest
from django.contrib.auth import get_user_model
from django.core.management import call_command
from django.core.management.base import CommandError
from django.db import connection as db
from django.test import Client
from django.utils import timezone

from ledger.models import ShopifyConnection, Tenant
from ledger.shopify import queries
from ledger.shopify.connection import shopify_client_for

from .shopify_helpers import SECRET, connect


def raw_columns(pk):
    with db.cursor() as cursor:
        cursor.execute("SELECT client_secret, access_token FROM ledger_shopifyconnection WHERE id = %s", [pk])
        return cursor.fetchone()


def test_connect_takes_a_token_reads_the_shop_and_stores_the_secret_encrypted(fake_shopify, tenant, capsys, caplog):
    # given a store whose app has these credentials
    fake_shopify.add_shop("acme.myshopify.com", "client-1", SECRET, name="Acme Outdoor")
    caplog.set_level(logging.DEBUG)

    # when the tenant connects it
    call_command(
        "shopify_connect", tenant=tenant.slug, shop="acme.myshopify.com", client_id="client-1", client_secret=SECRET
    )

    # then the shop's name is printed, and the secret is stored encrypted, readable by the product only
    out = capsys.readouterr()
    assert out.out.strip().splitlines()[-1] == "Acme Outdoor"
    stored = ShopifyConnection.objects.get(tenant=tenant)
    assert stored.client_secret == SECRET and stored.currency == "USD" and stored.access_token
    secret_column, token_column = raw_columns(stored.pk)
    assert SECRET not in secret_column and stored.access_token not in token_column
    assert fake_shopify.tokens_issued == 1
    # and the secret is in no output and no log line
    assert SECRET not in out.out + out.err and SECRET not in caplog.text
    assert SECRET not in repr(stored) and SECRET not in str(stored)


@pytest.mark.parametrize(
    "shop,client_id,secret,reason",
    [
        ("acme.myshopify.com", "client-1", "wrong-secret", "refused the credentials"),
        ("acme.myshopify.com", "other-client", SECRET, "refused the credentials"),
        ("acme.example.com", "client-1", SECRET, "NAME.myshopify.com"),
        ("acme.myshopify.com", "client-1", " ", "required"),
    ],
)
def test_refused_credentials_exit_1_with_the_reason_and_store_nothing(
    fake_shopify, tenant, capsys, shop, client_id, secret, reason
):
    # given a store
    fake_shopify.add_shop("acme.myshopify.com", "client-1", SECRET)

    # when it is connected with bad credentials or a bad shop name
    with pytest.raises(CommandError) as refused:
        call_command("shopify_connect", tenant=tenant.slug, shop=shop, client_id=client_id, client_secret=secret)

    # then the reason is given, nothing is stored, and no secret is echoed
    assert reason in str(refused.value) and "nothing stored" in str(refused.value)
    assert not ShopifyConnection.objects.exists()
    assert SECRET not in str(refused.value) and (secret.strip() == "" or secret not in str(refused.value))


def test_connect_refuses_an_unknown_tenant_and_a_store_of_another_tenant(fake_shopify, tenant):
    fake_shopify.add_shop("acme.myshopify.com", "client-1", SECRET)
    with pytest.raises(CommandError, match="No tenant"):
        call_command(
            "shopify_connect", tenant="nope", shop="acme.myshopify.com", client_id="client-1", client_secret=SECRET
        )
    connect(fake_shopify, tenant)
    other = Tenant.objects.create(slug="other", name="Other")
    with pytest.raises(CommandError, match="another tenant"):
        call_command(
            "shopify_connect", tenant=other.slug, shop="acme.myshopify.com", client_id="client-1", client_secret=SECRET
        )
    assert ShopifyConnection.objects.get().tenant == tenant


def test_shopify_down_at_connect_exits_1_and_stores_nothing(fake_shopify, tenant):
    fake_shopify.add_shop("acme.myshopify.com", "client-1", SECRET)
    fake_shopify.fail_next(1, status=503, on="token")
    with pytest.raises(CommandError, match="nothing stored"):
        call_command(
            "shopify_connect", tenant=tenant.slug, shop="acme.myshopify.com", client_id="client-1", client_secret=SECRET
        )
    assert not ShopifyConnection.objects.exists()


def test_the_token_is_reused_then_taken_again_before_expiry_and_once_on_a_401(fake_shopify, tenant):
    # given a connected store (one token taken)
    stored = connect(fake_shopify, tenant)
    client = shopify_client_for(stored)

    # when two queries run: the cached token serves both
    client.graphql(queries.SHOP)
    client.graphql(queries.SHOP)
    assert fake_shopify.tokens_issued == 1

    # when Shopify forgets the token: one 401, one new token, the query answered
    fake_shopify.expire_tokens()
    assert client.graphql(queries.SHOP)["shop"]["name"]
    assert fake_shopify.tokens_issued == 2
    # and the new token is cached (encrypted) on the connection
    stored.refresh_from_db()
    assert stored.access_token == client.current_token.value

    # when the cached token is about to expire, a new one is taken before the query
    ShopifyConnection.objects.filter(pk=stored.pk).update(token_expires_at=timezone.now() + timedelta(minutes=1))
    stored.refresh_from_db()
    shopify_client_for(stored).graphql(queries.SHOP)
    assert fake_shopify.tokens_issued == 3


def test_the_admin_shows_whether_the_secret_is_set_never_the_secret(fake_shopify, tenant):
    # given a connected store and a superuser
    stored = connect(fake_shopify, tenant)
    admin = get_user_model().objects.create_superuser("root", "root@example.com", "pw")
    client = Client()
    client.force_login(admin)

    # when the connection's admin pages are opened
    listing = client.get("/admin/ledger/shopifyconnection/")
    page = client.get(f"/admin/ledger/shopifyconnection/{stored.pk}/change/")

    # then they say "set", and neither the secret nor the token nor its ciphertext is there
    assert listing.status_code == 200 and page.status_code == 200
    body = listing.content.decode() + page.content.decode()
    assert "acme.myshopify.com" in body and 'field-secret">set<' in body
    for hidden in (SECRET, stored.access_token, *raw_columns(stored.pk)):
        assert hidden not in body


def test_rotate_credentials_re_encrypts_under_the_new_salt_what_the_old_one_wrote(
    fake_shopify, tenant, settings, capsys
):
    # given a secret encrypted under an old salt
    field = ShopifyConnection._meta.get_field("client_secret")
    token_field = ShopifyConnection._meta.get_field("access_token")

    def use_salts(salts):
        settings.SALT_KEY = salts
        for f in (field, token_field):
            f.__dict__.pop("keys", None)
            f.__dict__.pop("f", None)

    original = list(settings.SALT_KEY)
    use_salts(["old-salt"])
    stored = connect(fake_shopify, tenant)
    old_ciphertext = raw_columns(stored.pk)[0]

    try:
        # when a new salt is put in front, the old one still decrypts
        use_salts(["new-salt", "old-salt"])
        assert ShopifyConnection.objects.get(pk=stored.pk).client_secret == SECRET
        call_command("rotate_credentials")
        assert "ledger.ShopifyConnection: 1 row(s)" in capsys.readouterr().out
        # then the value is rewritten, and reads under the new salt alone
        assert raw_columns(stored.pk)[0] != old_ciphertext
        use_salts(["new-salt"])
        rotated = ShopifyConnection.objects.get(pk=stored.pk)
        assert rotated.client_secret == SECRET and rotated.access_token == stored.access_token
        # and under the old salt alone it no longer decrypts
        use_salts(["old-salt"])
        assert ShopifyConnection.objects.get(pk=stored.pk).client_secret != SECRET
    finally:
        use_salts(original)
