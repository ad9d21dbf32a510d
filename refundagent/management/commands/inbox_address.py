"""manage.py inbox_address --tenant SLUG ADDRESS: the tenant's support address (docs/inbox.md)."""

from django.core.management.base import BaseCommand, CommandError

from ledger.exceptions import DomainError
from ledger.models import Tenant
from refundagent.inbox.services import inbox_address_set


class Command(BaseCommand):
    help = "Set a tenant's support address: mail to it becomes the tenant's tickets."

    def add_arguments(self, parser):
        parser.add_argument("--tenant", required=True, help="the tenant's slug")
        parser.add_argument("address", help="e.g. support@acme.example.com")

    def handle(self, *args, **options):
        tenant = Tenant.objects.filter(slug=options["tenant"]).first()
        if tenant is None:
            raise CommandError(f"No tenant {options['tenant']!r}.")
        try:
            row = inbox_address_set(tenant=tenant, address=options["address"])
        except DomainError as exc:
            raise CommandError(exc.message) from None
        self.stdout.write(f"inbox address tenant={tenant.slug} address={row.address}")
