from django.core.management.base import BaseCommand

from ledger.idempotency import idempotency_keys_purge


class Command(BaseCommand):
    help = (
        "Delete expired Idempotency-Key rows (older than IDEMPOTENCY_KEY_TTL_HOURS). Optional: an "
        "expired key is replaced when it is used again; this only keeps the table small."
    )

    def handle(self, *args, **options):
        self.stdout.write(f"{idempotency_keys_purge()} expired idempotency keys deleted")
