"""manage.py import_tau_bench [DIR]: the τ-bench retail shop as tenant tau-retail (docs/api.md); without DIR,
the copy vendored in evals/data/tau_bench_retail."""

from django.core.management.base import BaseCommand, CommandError

from evals.tau import tau_bench_import
from ledger.exceptions import DomainError


class Command(BaseCommand):
    help = "Import the τ-bench retail shop (users.json, orders.json) as tenant tau-retail. Safe to run twice."

    def add_arguments(self, parser):
        parser.add_argument(
            "directory",
            nargs="?",
            default=None,
            help="a τ-bench retail data directory (default: the copy in evals/data/tau_bench_retail)",
        )

    def handle(self, *args, directory, **options):
        try:
            tenant, policy, result = tau_bench_import(directory=directory)
        except (FileNotFoundError, ValueError, DomainError) as exc:
            raise CommandError(str(getattr(exc, "message", exc))) from exc
        self.stdout.write(f"tenant={tenant.slug} policy={policy.version}")
        self.stdout.write(str(result))
        self.stdout.write(self.style.SUCCESS("τ-bench retail imported (users tau-support, tau-finance, tau-finance2)"))
