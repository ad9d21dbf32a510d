"""What the policy commands share: the tenant by slug, domain errors as a command error."""

from django.core.management.base import CommandError

from ledger.models import Tenant


def tenant_by_slug(slug: str) -> Tenant:
    tenant = Tenant.objects.filter(slug=slug).first()
    if tenant is None:
        raise CommandError(f"No tenant {slug!r}.")
    return tenant
