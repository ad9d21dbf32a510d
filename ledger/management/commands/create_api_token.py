from django.contrib.auth import get_user_model
from django.core.management.base import BaseCommand, CommandError

from ledger.tenancy import api_token_create


class Command(BaseCommand):
    help = "Create an API token for USERNAME and print it, alone on the last line. It is shown only this once."

    def add_arguments(self, parser):
        parser.add_argument("username")

    def handle(self, *args, username, **options):
        User = get_user_model()
        try:
            user = User.objects.get(**{User.USERNAME_FIELD: username})
        except User.DoesNotExist:
            raise CommandError(f"No user named {username!r}.") from None
        if not user.is_active:
            raise CommandError(f"User {username!r} is inactive.")
        self.stdout.write(self.style.NOTICE(f"API token for {username} (store it now; only its hash is kept):"))
        self.stdout.write(api_token_create(user=user))
