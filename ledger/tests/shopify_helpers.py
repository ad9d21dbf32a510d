"""Shared builders for the Shopify connector tests (against the fake over HTTP)."""

from ledger.models import ShopifyConnection
from ledger.shopify.connection import shopify_connection_connect

SECRET = "shpss_s3cr3t-client-secret-value"


def connect(
    fake, tenant, domain="acme.myshopify.com", *, client_id="client-1", secret=SECRET, **shop
) -> ShopifyConnection:
    """A store in the fake and the tenant connected to it."""
    if domain not in fake.shops:
        fake.add_shop(domain, client_id, secret, **shop)
    return shopify_connection_connect(tenant_slug=tenant.slug, shop=domain, client_id=client_id, client_secret=secret)
