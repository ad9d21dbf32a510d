from django.core.management.base import BaseCommand

from ledger.tenancy import roles_sync


class Command(BaseCommand):
    help = (
        "Create or update the role groups (support, finance, operator) with the permissions each app "
        "declares for them. Idempotent; `migrate` runs the same sync."
    )

    def handle(self, *args, **options):
        for role, synced in roles_sync().items():
            if not synced.changed:
                self.stdout.write(f"{role}: unchanged ({synced.group.permissions.count()} permissions)")
                continue
            what = ["created"] if synced.created else []
            what += [f"+{perm}" for perm in synced.added] + [f"-{perm}" for perm in synced.removed]
            self.stdout.write(self.style.SUCCESS(f"{role}: {', '.join(what)}"))
