"""Shared builders for the Shopify connector tests (against the fake over HTTP)."""

from datetime import UTC, datetime

from ledger.models import ShopifyConnection
from ledger.shopify.connection import shopify_connection_connect

SECRET = "shpss_s3cr3t-client-secret-value"
# A lower bound for `shopify_sync`: the paged read, where a first sync without one is the bulk backfill.
PAGED = datetime(2020, 1, 1, tzinfo=UTC)


def connect(
    fake, tenant, domain="acme.myshopify.com", *, client_id="client-1", secret=SECRET, **shop
) -> ShopifyConnection:
    """A store in the fake and the tenant connected to it."""
    if domain not in fake.shops:
        fake.add_shop(domain, client_id, secret, **shop)
    return shopify_connection_connect(tenant_slug=tenant.slug, shop=domain, client_id=client_id, client_secret=secret)
