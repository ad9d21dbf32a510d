"""manage.py publish_policy --tenant SLUG --name VERSION [--without-replay REASON]: make a draft
current. Refuses (exit 1, nothing changed) when no replay of exactly that draft exists, unless a
written reason is given; the reason is kept with the publication."""

from django.core.management.base import BaseCommand, CommandError

from approvals.models import RefundPolicy
from approvals.services.policies import policy_draft_publish
from ledger.exceptions import DomainError

from ._policy_args import tenant_by_slug


class Command(BaseCommand):
    help = "Publish a draft policy after its replay (or, with a written reason, without one)."

    def add_arguments(self, parser):
        parser.add_argument("--tenant", required=True)
        parser.add_argument("--name", required=True, help="The draft's version.")
        parser.add_argument("--without-replay", dest="reason", default="", metavar="REASON")

    def handle(self, *args, tenant, name, reason, **options):
        tenant = tenant_by_slug(tenant)
        policy = RefundPolicy.objects.for_tenant(tenant).filter(version=name).first()
        if policy is None:
            raise CommandError(f"{tenant.slug} has no policy {name}.")
        try:
            publication = policy_draft_publish(tenant=tenant, policy=policy, without_replay_reason=reason)
        except DomainError as error:
            raise CommandError(error.message) from None
        how = (
            f"after replay #{publication.replay_id}"
            if publication.replay_id
            else f"without a replay: {publication.without_replay_reason}"
        )
        self.stdout.write(f"{policy.version} is now the current policy of {tenant.slug} ({how}).")
