"""Tenancy: tenants, who belongs to which, and API tokens. Every row of every app hangs off a
tenant; `TenantQuerySet.for_tenant` is where scoping happens. The roles (groups) and the
services on tokens and roles are in ledger/tenancy.py."""

from django.conf import settings
from django.db import models


class Tenant(models.Model):
    slug = models.SlugField(unique=True)
    name = models.CharField(max_length=200)
    stripe_account = models.CharField(
        max_length=100,
        blank=True,
        help_text="Stripe connected account (acct_…) of this shop; blank: the platform's own.",
    )
    created_at = models.DateTimeField(auto_now_add=True)

    def __str__(self):
        return self.slug


class Membership(models.Model):
    """Every user belongs to exactly one tenant; roles are groups (see ledger/tenancy.py)."""

    user = models.OneToOneField(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="membership")
    tenant = models.ForeignKey(Tenant, on_delete=models.PROTECT, related_name="memberships")

    def __str__(self):
        return f"{self.user} @ {self.tenant}"


class ApiToken(models.Model):
    """A Bearer token for the API. Only the SHA-256 of the token is stored."""

    user = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="api_tokens")
    key_hash = models.CharField(max_length=64, unique=True)
    prefix = models.CharField(max_length=12, help_text="First characters of the token, to tell tokens apart.")
    created_at = models.DateTimeField(auto_now_add=True)
    last_used_at = models.DateTimeField(null=True, blank=True)
    revoked_at = models.DateTimeField(null=True, blank=True)

    def __str__(self):
        return f"{self.prefix}… ({self.user})"


class TenantQuerySet(models.QuerySet):
    """The one place where tenant scoping happens: every selector starts from `for_tenant`."""

    tenant_path = "tenant"

    def for_tenant(self, tenant):
        return self.filter(**{self.tenant_path: tenant})


class IdempotencyKey(models.Model):
    """One `Idempotency-Key` of one user (Stripe's convention, docs/api.md). The unique constraint on
    (user, key) lets one request hold the key: the first insert wins, the others find its row.
    `status_code` is null while that first request runs; then the response is kept to replay.
    Keys expire (`expires_at`, IDEMPOTENCY_KEY_TTL_HOURS); an expired row is replaced."""

    user = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="idempotency_keys")
    key = models.CharField(max_length=255)
    request_hash = models.CharField(max_length=64, help_text="SHA-256 of method, path and canonical body.")
    status_code = models.PositiveSmallIntegerField(null=True, blank=True)
    response_body = models.BinaryField(default=b"")
    content_type = models.CharField(max_length=100, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)
    expires_at = models.DateTimeField(db_index=True)

    class Meta:
        constraints = [models.UniqueConstraint(fields=["user", "key"], name="idempotency_key_unique_per_user")]

    def __str__(self):
        return f"{self.key} ({self.user})"
