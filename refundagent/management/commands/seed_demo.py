from django.core.management.base import BaseCommand

from refundagent.demo import demo_seed


class Command(BaseCommand):
    help = "Create the demo tenants, users, orders and policies of API.md (safe to run twice)."

    def handle(self, *args, **options):
        tenants = demo_seed()
        self.stdout.write(self.style.SUCCESS(f"Demo data ready: tenants {', '.join(tenants)}."))
