"""manage.py replay_model --tenant SLUG --provider NAME [--model M] [--days 30] [--limit N]: replay
recorded tickets with another model in shadow (agent.shadow): tools answer from the recorded
results, nothing is written to tickets, approvals or the ledger. Prints the differences, the
agreement and the cost; the last line is the summary."""

from django.core.management.base import BaseCommand, CommandError

from ledger.exceptions import DomainError
from ledger.models import Tenant
from refundagent.agent.shadow import (
    DEFAULT_DAYS,
    PROVIDERS,
    model_replay_create,
    model_replay_run,
    model_replay_summary,
)


class Command(BaseCommand):
    help = "Replay recorded tickets with another model or provider in shadow and compare the drafts."

    def add_arguments(self, parser):
        parser.add_argument("--tenant", required=True)
        parser.add_argument("--provider", required=True, choices=PROVIDERS)
        parser.add_argument("--model", default="")
        parser.add_argument("--days", type=int, default=DEFAULT_DAYS)
        parser.add_argument("--limit", type=int, default=None)

    def handle(self, *args, tenant, provider, model, days, limit, **options):
        found = Tenant.objects.filter(slug=tenant).first()
        if found is None:
            raise CommandError(f"No tenant {tenant!r}.")
        try:
            replay = model_replay_create(tenant=found, provider=provider, model=model, days=days, limit=limit)
            replay = model_replay_run(replay_id=replay.pk)
        except DomainError as error:
            raise CommandError(error.message) from None
        result = replay.result
        self.stdout.write(f"{'ticket':<8}{'order':<14}{'recorded':<34}{'shadow':<34}{'tokens':>8}  why")
        for row in result["differences"]:
            recorded, shadow = row["recorded"], row["shadow"]
            why = [
                name
                for name, differs in (("draft", not row["same_draft"]), ("gate", not row["same_outcome"]))
                if differs
            ]
            if row["promise_stopped"]:
                why.append("promise stopped")
            self.stdout.write(
                f"{row['ticket']:<8}{row['order'] or '-':<14}"
                f"{recorded['recommendation'] or '-'} {recorded['amount'] or ''} -> {recorded['outcome']:<14}"[
                    :34
                ].ljust(34)
                + f"{shadow['recommendation'] or '-'} {shadow['amount'] or ''} -> {shadow['outcome']}"[:34].ljust(34)
                + f"{row['tokens']:>8}  {', '.join(why)}"
            )
        self.stdout.write(
            f"tickets={result['tickets']} different_draft={result['different_draft']} "
            f"different_outcome={result['different_outcome']} promises_stopped={result['promises_stopped']}"
        )
        self.stdout.write(model_replay_summary(replay))
