from django.core.management.base import BaseCommand, CommandError

from ledger.exceptions import DomainError
from refundagent.demo import demo_seed


class Command(BaseCommand):
    help = "Create the demo tenants, users, orders and policies of docs/api.md (safe to run twice)."

    def handle(self, *args, **options):
        try:
            tenants = demo_seed()
        except DomainError as exc:  # e.g. a demo username taken by another tenant's user
            raise CommandError(exc.message) from exc
        self.stdout.write(self.style.SUCCESS(f"Demo data ready: tenants {', '.join(tenants)}."))
