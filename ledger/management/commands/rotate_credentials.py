from django.core.management.base import BaseCommand

from ledger.credentials import credentials_rotate


class Command(BaseCommand):
    help = (
        "Re-encrypt every credential at rest (each encrypted field of every model) with the first "
        "key of SECRET_KEY x SALT_KEY; run after putting a new key or salt in front (docs/configuration.md)."
    )

    def handle(self, *args, **options):
        counts = credentials_rotate()
        for label, rows in counts.items():
            self.stdout.write(f"{label}: {rows} row(s) re-encrypted")
        self.stdout.write(f"rotate_credentials models={len(counts)} rows={sum(counts.values())}")
