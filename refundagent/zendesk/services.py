"""Connecting a tenant's Zendesk account (`zendesk_connect`)."""

import logging
import re

from django.core.exceptions import ValidationError
from django.core.validators import validate_email
from django.db import IntegrityError, transaction

from ledger.exceptions import InvalidInput
from ledger.models import Tenant

from .client import Credentials, zendesk_me
from .exceptions import ZendeskRefused, ZendeskUnavailable
from .models import ZendeskConnection

logger = logging.getLogger(__name__)
SUBDOMAIN = re.compile(r"^[a-z0-9](?:[a-z0-9-]{0,61}[a-z0-9])?$")


def zendesk_connect(
    *, tenant_slug: str, subdomain: str, email: str, api_token: str, webhook_secret: str, account_id: int | None = None
) -> ZendeskConnection:
    """Check the credentials with a real call (users/me: the token's agent), then store the
    tenant's connection (a second connect of the same tenant replaces its credentials). Refused
    credentials, an unreachable Zendesk or bad input raise and store nothing."""
    subdomain = (subdomain or "").strip().lower().removesuffix(".zendesk.com")
    if not SUBDOMAIN.match(subdomain):
        raise InvalidInput(f"{subdomain!r} is not a Zendesk subdomain (SUB of SUB.zendesk.com).", code="bad_subdomain")
    try:
        validate_email(email)
    except ValidationError:
        raise InvalidInput(f"{email!r} is not an email address.", code="bad_email") from None
    if not api_token or not api_token.strip() or len(api_token) > 200:
        raise InvalidInput("The API token is empty or too long.", code="bad_api_token")
    if not webhook_secret or not webhook_secret.strip() or len(webhook_secret) > 200:
        raise InvalidInput("The webhook signing secret is empty or too long.", code="bad_webhook_secret")
    if account_id is not None and account_id <= 0:
        raise InvalidInput("The account id must be a positive number.", code="bad_account_id")
    tenant = Tenant.objects.filter(slug=tenant_slug).first()
    if tenant is None:
        raise InvalidInput(f"No tenant {tenant_slug!r}.", code="unknown_tenant")
    taken = ZendeskConnection.objects.exclude(tenant=tenant).filter(subdomain=subdomain).exists()
    if taken:
        raise InvalidInput(f"{subdomain}.zendesk.com is connected to another tenant.", code="subdomain_taken")
    try:
        me = zendesk_me(Credentials(subdomain=subdomain, email=email, token=api_token.strip()))
    except ZendeskUnavailable as exc:
        raise ZendeskRefused(f"Zendesk could not be reached to check the credentials: {exc}") from None
    if not me.get("id") or me.get("role") not in ("agent", "admin"):
        # users/me answers an anonymous end user when the credentials are not an agent's.
        raise ZendeskRefused("Zendesk did not accept the credentials as an agent's (users/me).")
    try:
        with transaction.atomic():
            connection, _ = ZendeskConnection.objects.update_or_create(
                tenant=tenant,
                defaults=dict(
                    subdomain=subdomain,
                    account_id=account_id,
                    agent_email=email,
                    agent_user_id=me["id"],
                    api_token=api_token.strip(),
                    webhook_secret=webhook_secret.strip(),
                ),
            )
    except IntegrityError:
        raise InvalidInput("That subdomain or account id is connected to another tenant.", code="taken") from None
    logger.info("zendesk: tenant %s connected to %s.zendesk.com", tenant.slug, subdomain)
    return connection
