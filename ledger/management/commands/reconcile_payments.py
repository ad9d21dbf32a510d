"""manage.py reconcile_payments [--tenant SLUG] [--since YYYY-MM-DD]

Compares the provider's refunds with the ledger, stores the differences as findings, prints the
unresolved ones as a table and exits 1 while any is unresolved (0 when the ledger agrees)."""

import sys
from datetime import UTC, datetime

from django.core.management.base import BaseCommand, CommandError

from ledger.exceptions import PaymentProviderUnavailable
from ledger.models import Tenant
from ledger.reconciliation import payments_reconcile
from ledger.selectors import reconciliation_findings_unresolved


class Command(BaseCommand):
    help = "Compare the payment provider's refunds with the ledger; exit 1 while unresolved findings exist."

    def add_arguments(self, parser):
        parser.add_argument("--tenant", metavar="SLUG", help="Only this shop (default: every shop).")
        parser.add_argument(
            "--since",
            metavar="YYYY-MM-DD",
            help="Refunds created since this day, UTC (default: RECONCILE_LOOKBACK_DAYS ago).",
        )

    def handle(self, *args, tenant=None, since=None, **options):
        # Everything is parsed before anything is written.
        shop = None
        if tenant:
            shop = Tenant.objects.filter(slug=tenant).first()
            if shop is None:
                raise CommandError(f"No tenant {tenant!r}.")
        since_at = None
        if since:
            try:
                since_at = datetime.strptime(since, "%Y-%m-%d").replace(tzinfo=UTC)
            except ValueError:
                raise CommandError(f"--since must be a date as YYYY-MM-DD, got {since!r}.") from None
        try:
            run = payments_reconcile(tenant=shop, since=since_at)
        except PaymentProviderUnavailable as exc:
            raise CommandError(f"The payment provider could not be listed: {exc}") from exc

        self.stdout.write(
            f"Reconciliation #{run.pk} ({run.gateway}) since {run.since:%Y-%m-%d %H:%M} UTC: "
            f"{run.provider_refunds} provider refund(s), {run.ledger_entries} ledger entr(y/ies)."
        )
        if run.note:
            self.stdout.write(run.note)
        findings = list(reconciliation_findings_unresolved(tenant=shop).select_related("tenant").order_by("id"))
        if not findings:
            self.stdout.write(self.style.SUCCESS("The ledger agrees with the provider: no unresolved finding."))
            return
        rows = [("id", "kind", "tenant", "entry", "provider ref", "ledger", "provider", "detail")]
        for f in findings:
            rows.append(
                (
                    str(f.pk),
                    f.kind,
                    f.tenant.slug if f.tenant_id else "?",
                    f"#{f.entry_id}" if f.entry_id else "-",
                    f.provider_ref or "-",
                    f"{f.ledger_amount if f.ledger_amount is not None else '-'} {f.ledger_status}".strip(),
                    f"{f.provider_amount if f.provider_amount is not None else '-'} {f.provider_status}".strip(),
                    f.detail[:70],
                )
            )
        widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
        for r in rows:
            self.stdout.write("  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)).rstrip())
        self.stderr.write(f"{len(findings)} unresolved finding(s).")
        sys.exit(1)
