"""manage.py zendesk_connect --tenant SLUG --subdomain SUB --email E --api-token T --webhook-secret W"""

from django.core.management.base import BaseCommand, CommandError

from ledger.exceptions import DomainError
from refundagent.zendesk.services import zendesk_connect


class Command(BaseCommand):
    help = "Connect a tenant's Zendesk account (checks the credentials; the token and secret are never shown)."

    def add_arguments(self, parser):
        parser.add_argument("--tenant", required=True)
        parser.add_argument("--subdomain", required=True, help="SUB of SUB.zendesk.com")
        parser.add_argument("--email", required=True, help="the agent the API token belongs to")
        parser.add_argument("--api-token", required=True)
        parser.add_argument("--webhook-secret", required=True, help="the signing secret of the Zendesk webhook")
        parser.add_argument("--account-id", type=int, help="Zendesk's account id (needed for event webhooks)")

    def handle(self, *args, **options):
        try:
            connection = zendesk_connect(
                tenant_slug=options["tenant"],
                subdomain=options["subdomain"],
                email=options["email"],
                api_token=options["api_token"],
                webhook_secret=options["webhook_secret"],
                account_id=options["account_id"],
            )
        except DomainError as exc:
            raise CommandError(exc.message) from None
        self.stdout.write(
            f"zendesk connected tenant={connection.tenant.slug} subdomain={connection.subdomain} "
            f"agent={connection.agent_email} account_id={connection.account_id or '-'}"
        )
