from datetime import UTC, datetime

from django.core.management.base import BaseCommand, CommandError

from ledger.exceptions import DomainError, PaymentProviderUnavailable
from ledger.models import ShopifyConnection
from ledger.shopify.bulk import BackfillResult
from ledger.shopify.sync import shopify_sync


class Command(BaseCommand):
    help = (
        "Read the tenant's Shopify orders in pages (updated since --since, default: the last sync, "
        "else every order; --full: every order, through a bulk operation) into the ledger; a killed "
        "run resumes where it stopped, twice changes nothing."
    )

    def add_arguments(self, parser):
        parser.add_argument("--tenant", required=True, help="the tenant's slug")
        parser.add_argument("--since", help="YYYY-MM-DD (UTC); default: the last complete sync, else everything")
        parser.add_argument(
            "--full",
            action="store_true",
            help="read every order through a Shopify bulk operation (a large store's first import)",
        )

    def handle(self, *args, tenant, since=None, full=False, **options):
        when = None
        if since is not None:
            try:
                when = datetime.strptime(since, "%Y-%m-%d").replace(tzinfo=UTC)
            except ValueError:
                raise CommandError(f"--since must be a date YYYY-MM-DD, got {since!r}.") from None
        connection = ShopifyConnection.objects.filter(tenant__slug=tenant).first()
        if connection is None:
            raise CommandError(f"Tenant {tenant!r} has no Shopify connection (manage.py shopify_connect).")
        if full and when is not None:
            raise CommandError("--full reads every order: give --full or --since, not both.")
        try:
            result = shopify_sync(connection_id=connection.pk, since=when, full=full)
        except (DomainError, PaymentProviderUnavailable) as exc:
            raise CommandError(
                f"shopify_sync stopped: {getattr(exc, 'message', exc)} (orders stored so far are kept; run again to resume)"
            ) from None
        for warning in result.warnings:
            self.stderr.write(self.style.WARNING(warning))
        if isinstance(result, BackfillResult):
            self.stdout.write(
                f"bulk_operation={result.operation_id} lines={result.lines} batches={result.pages} "
                f"polls={result.polls} reread={result.reread} external_refunds={result.external_refunds} "
                f"payments_added={result.payments_added} skipped={result.skipped}"
                + (" resumed" if result.resumed else "")
            )
        else:
            self.stdout.write(
                f"pages={result.pages} waits={result.waits} external_refunds={result.external_refunds} "
                f"payments_added={result.payments_added} skipped={result.skipped}"
                + (" resumed" if result.resumed else "")
            )
        self.stdout.write(f"shopify_sync orders={result.orders} created={result.created} updated={result.updated}")
