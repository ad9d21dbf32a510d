"""manage.py policy_draft --tenant SLUG --name NEW [--from VERSION] [--set FIELD=VALUE ...]: a draft
policy copied from VERSION (default: the current one) with fields changed; prints the draft's
version. Bad input: exit 1, nothing written."""

from django.core.management.base import BaseCommand, CommandError

from approvals.services.policies import DRAFT_FIELDS, refund_policy_draft, refund_policy_field_parse
from ledger.exceptions import DomainError

from ._policy_args import tenant_by_slug


class Command(BaseCommand):
    help = "Draft a policy version (not current until published) copied from another with fields changed."

    def add_arguments(self, parser):
        parser.add_argument("--tenant", required=True)
        parser.add_argument("--name", required=True, help="The draft's version, e.g. refund-policy-v5.")
        parser.add_argument("--from", dest="source", help="The version to copy (default: the current one).")
        parser.add_argument(
            "--set",
            dest="changes",
            action="append",
            default=[],
            metavar="FIELD=VALUE",
            help=f"A rule to change (repeatable): {', '.join(DRAFT_FIELDS)}. Lists are comma-separated.",
        )

    def handle(self, *args, tenant, name, source, changes, **options):
        tenant = tenant_by_slug(tenant)
        try:
            parsed = {}
            for change in changes:
                field, sep, raw = change.partition("=")
                if not sep:
                    raise CommandError(f"--set {change!r}: expected FIELD=VALUE.")
                parsed[field.strip()] = refund_policy_field_parse(field=field.strip(), raw=raw)
            draft = refund_policy_draft(tenant=tenant, name=name, source_version=source, changes=parsed)
        except DomainError as error:
            raise CommandError(error.message) from None
        self.stdout.write(draft.version)
