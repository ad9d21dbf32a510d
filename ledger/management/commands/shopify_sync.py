from datetime import UTC, datetime

from django.core.management.base import BaseCommand, CommandError

from ledger.exceptions import DomainError, PaymentProviderUnavailable
from ledger.models import ShopifyConnection
from ledger.shopify.sync import shopify_sync


class Command(BaseCommand):
    help = (
        "Read the tenant's Shopify orders (updated since --since, default: the last sync) into the "
        "ledger; a killed run resumes where it stopped, twice changes nothing."
    )

    def add_arguments(self, parser):
        parser.add_argument("--tenant", required=True, help="the tenant's slug")
        parser.add_argument("--since", help="YYYY-MM-DD (UTC); default: the last complete sync, else everything")

    def handle(self, *args, tenant, since=None, **options):
        when = None
        if since is not None:
            try:
                when = datetime.strptime(since, "%Y-%m-%d").replace(tzinfo=UTC)
            except ValueError:
                raise CommandError(f"--since must be a date YYYY-MM-DD, got {since!r}.") from None
        connection = ShopifyConnection.objects.filter(tenant__slug=tenant).first()
        if connection is None:
            raise CommandError(f"Tenant {tenant!r} has no Shopify connection (manage.py shopify_connect).")
        try:
            result = shopify_sync(connection_id=connection.pk, since=when)
        except (DomainError, PaymentProviderUnavailable) as exc:
            raise CommandError(
                f"shopify_sync stopped: {getattr(exc, 'message', exc)} (pages stored so far are kept; run again to resume)"
            ) from None
        for warning in result.warnings:
            self.stderr.write(self.style.WARNING(warning))
        self.stdout.write(
            f"pages={result.pages} waits={result.waits} external_refunds={result.external_refunds} "
            f"payments_added={result.payments_added} skipped={result.skipped}" + (" resumed" if result.resumed else "")
        )
        self.stdout.write(f"shopify_sync orders={result.orders} created={result.created} updated={result.updated}")
