from django.core.management.base import BaseCommand, CommandError

from ledger.exceptions import DomainError, PaymentProviderUnavailable
from ledger.shopify.connection import shopify_connection_connect


class Command(BaseCommand):
    help = (
        "Connect a tenant to its Shopify store (an app of the merchant's own organisation, "
        "client-credentials grant): checks the credentials, then stores them encrypted."
    )

    def add_arguments(self, parser):
        parser.add_argument("--tenant", required=True, help="the tenant's slug")
        parser.add_argument("--shop", required=True, help="NAME.myshopify.com")
        parser.add_argument("--client-id", required=True)
        parser.add_argument("--client-secret", required=True, help="stored encrypted, never shown again")

    def handle(self, *args, tenant, shop, client_id, client_secret, **options):
        try:
            connection = shopify_connection_connect(
                tenant_slug=tenant, shop=shop, client_id=client_id, client_secret=client_secret
            )
        except (DomainError, PaymentProviderUnavailable) as exc:
            # The message is ours or Shopify's: never the secret.
            raise CommandError(f"Not connected, nothing stored: {getattr(exc, 'message', exc)}") from None
        self.stdout.write(f"Connected {connection.shop_domain} to tenant {tenant}: {connection.shop_name}")
        self.stdout.write(connection.shop_name)
