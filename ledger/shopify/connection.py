"""Connecting a tenant's store, and the API client of a stored connection."""

import logging

from django.db import transaction

from ..exceptions import InvalidInput
from ..models import ShopifyConnection, Tenant
from . import queries
from .client import ShopifyClient, Token

logger = logging.getLogger(__name__)

SHOP_DOMAIN_SUFFIX = ".myshopify.com"


def shop_domain_parse(value: str) -> str:
    domain = (value or "").strip().lower()
    name = domain.removesuffix(SHOP_DOMAIN_SUFFIX)
    if (
        not domain.endswith(SHOP_DOMAIN_SUFFIX)
        or not name
        or not all(c.isalnum() or c == "-" for c in name)
        or name.startswith("-")
    ):
        raise InvalidInput(f"--shop must be NAME.myshopify.com, got {value!r}.", code="bad_shop_domain")
    return domain


def shopify_client_for(connection: ShopifyConnection) -> ShopifyClient:
    """The API client of a stored connection: starts from its cached token and caches each new one
    (encrypted, like the secret)."""

    def store(token: Token) -> None:
        ShopifyConnection.objects.filter(pk=connection.pk).update(
            access_token=token.value, token_expires_at=token.expires_at
        )

    cached = (
        Token(value=connection.access_token, expires_at=connection.token_expires_at)
        if connection.access_token and connection.token_expires_at
        else None
    )
    return ShopifyClient(
        shop_domain=connection.shop_domain,
        client_id=connection.client_id,
        client_secret=connection.client_secret,
        token=cached,
        token_store=store,
    )


def shopify_connection_connect(*, tenant_slug: str, shop: str, client_id: str, client_secret: str) -> ShopifyConnection:
    """Check the credentials (a token, then `shop { name currencyCode }`) and only then store the
    connection (a tenant reconnecting replaces its credentials). Raises ShopifyRefused /
    ShopifyUnavailable / InvalidInput with nothing stored."""
    tenant = Tenant.objects.filter(slug=tenant_slug).first()
    if tenant is None:
        raise InvalidInput(f"No tenant {tenant_slug!r}.", code="unknown_tenant")
    domain = shop_domain_parse(shop)
    if not client_id.strip() or not client_secret.strip():
        raise InvalidInput("--client-id and --client-secret are required.", code="missing_credentials")
    taken = ShopifyConnection.objects.filter(shop_domain=domain).exclude(tenant=tenant).exists()
    if taken:
        raise InvalidInput(f"{domain} is already connected to another tenant.", code="shop_taken")
    client = ShopifyClient(shop_domain=domain, client_id=client_id.strip(), client_secret=client_secret.strip())
    client.token()
    shop_info = client.graphql(queries.SHOP).get("shop") or {}
    token = client.current_token
    with transaction.atomic():
        connection, _ = ShopifyConnection.objects.update_or_create(
            tenant=tenant,
            defaults={
                "shop_domain": domain,
                "shop_name": (shop_info.get("name") or "")[:255],
                "currency": shop_info.get("currencyCode") or "",
                "client_id": client_id.strip(),
                "client_secret": client_secret.strip(),
                "access_token": token.value if token else "",
                "token_expires_at": token.expires_at if token else None,
            },
        )
    logger.info("shopify: tenant %s connected to %s", tenant.slug, domain)
    return connection
