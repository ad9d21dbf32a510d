from django.contrib.auth import get_user_model
from django.core.management.base import BaseCommand, CommandError

from approvals.second_factor import totp_device_create


class Command(BaseCommand):
    help = (
        "Create a confirmed TOTP device (the second factor approvers need, docs/configuration.md) for a "
        "user and print its otpauth:// URL, once, for their authenticator app."
    )

    def add_arguments(self, parser):
        parser.add_argument("username")
        parser.add_argument("--name", default="authenticator", help="The device's name (default: authenticator).")

    def handle(self, *args, username, name, **options):
        user = get_user_model().objects.filter(username=username).first()
        if user is None:
            raise CommandError(f"No user {username!r}; nothing was written.")
        if not name.strip() or len(name) > 64:
            raise CommandError("--name must be 1 to 64 characters; nothing was written.")
        device = totp_device_create(user=user, name=name.strip())
        self.stdout.write(f"TOTP device #{device.pk} for {username}. Add this URL to the authenticator app:")
        self.stdout.write(device.config_url)
