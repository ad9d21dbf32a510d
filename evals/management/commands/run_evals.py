"""manage.py run_evals [--suite NAME] [--provider NAME] [--repeat K] [--replay-tenant SLUG ...]: run
the eval suites, print a result table and the metrics (name=value lines), store the run, exit 0
only when the release gate passes. A suite with no case to run fails the release gate and says
what is missing. With --replay-tenant, the release gate also replays that tenant's recorded
tickets with the provider in shadow (docs/replay.md) and needs an agreement of at least
settings.EVAL_REPLAY_AGREEMENT_MIN."""

import sys
from collections import defaultdict
from decimal import Decimal

from django.conf import settings
from django.core.management.base import BaseCommand, CommandError

from evals.cases import SUITE_CHOICES
from evals.models import EvalRun
from evals.services import PROVIDERS, eval_run_execute
from ledger.exceptions import DomainError
from ledger.models import Tenant
from refundagent.agent.shadow import PROVIDERS as REPLAY_PROVIDERS
from refundagent.agent.shadow import model_replay_create, model_replay_run, model_replay_summary


class ProgressBar:
    """A one-line progress bar, drawn only when the stream is a terminal (CI logs stay clean)."""

    def __init__(self, stream, width: int = 30):
        self.stream = stream
        self.width = width
        self.enabled = hasattr(stream, "isatty") and stream.isatty()
        self.failed = 0

    def __call__(self, done: int, total: int, name: str, passed: bool) -> None:
        self.failed += not passed
        if not self.enabled:
            return
        filled = int(self.width * done / total) if total else self.width
        bar = "#" * filled + "-" * (self.width - filled)
        self.stream.write(f"\r[{bar}] {done}/{total} failed={self.failed} {name[:40]:<40}")
        if done == total:
            self.stream.write("\r" + " " * (self.width + 70) + "\r")
        self.stream.flush()


class Command(BaseCommand):
    help = "Run the eval suites and the release gate; exits non-zero when the release gate fails."

    def add_arguments(self, parser):
        parser.add_argument("--suite", default="all", choices=SUITE_CHOICES)
        parser.add_argument("--provider", default="offline", choices=PROVIDERS)
        parser.add_argument("--repeat", type=int, default=1, help="Runs per case; pass^k is reported for k ≤ K.")
        parser.add_argument("--failures-only", action="store_true", help="Print only the failed cases in the table.")
        parser.add_argument("--case", action="append", dest="cases", help="Only this case (repeatable).")
        parser.add_argument(
            "--replay-tenant",
            help="Also replay this tenant's recorded tickets in shadow: the gate needs an agreement of at least "
            "EVAL_REPLAY_AGREEMENT_MIN.",
        )
        parser.add_argument("--replay-provider", choices=REPLAY_PROVIDERS, help="Default: --provider.")
        parser.add_argument("--replay-days", type=int, default=30)
        parser.add_argument("--replay-limit", type=int, default=None)

    def handle(self, *args, suite, provider, repeat, failures_only, cases, **options):
        if repeat < 1:
            raise CommandError("--repeat must be at least 1")
        replay_tenant = None
        if options.get("replay_tenant"):
            replay_tenant = Tenant.objects.filter(slug=options["replay_tenant"]).first()
            if replay_tenant is None:
                raise CommandError(f"No tenant {options['replay_tenant']!r}.")
        progress = ProgressBar(sys.stderr)
        run = eval_run_execute(
            suite=suite,
            provider=provider,
            repeat=repeat,
            trigger=EvalRun.Trigger.COMMAND,
            progress=progress,
            names=cases,
        )
        self._table(run, failures_only)
        for name, value in run.metrics.items():
            self.stdout.write(f"{name}={value}")
        self.stdout.write(f"duration_s={run.duration_ms / 1000:.1f}")
        self.stdout.write(
            f"run={run.pk} suite={run.suite} provider={run.provider} model={run.model or '-'} "
            f"code_version={run.code_version or '-'}"
        )
        if replay_tenant is not None:
            self._replay_gate(run, replay_tenant, options.get("replay_provider") or provider, options)
        if not run.passed:
            # The "gate:" prefix and the metric lines are the output CI and users already read.
            whys = []
            for failure in run.gate_failures:
                self.stderr.write(
                    f"gate: {failure['metric']}={failure['value']} (needs {failure['threshold']})"
                    + (f" -- {failure['why']}" if failure.get("why") else "")
                )
                whys += [failure["why"]] if failure.get("why") else []
            raise CommandError(f"release gate FAILED (eval run #{run.pk})" + "".join(f"; {w}" for w in whys))
        self.stdout.write(self.style.SUCCESS(f"gate=passed (eval run #{run.pk})"))

    def _replay_gate(self, run, tenant, provider, options):
        """The replay suite: the release gate fails when the shadow agrees with what happened on
        fewer of the tenant's recorded tickets than settings.EVAL_REPLAY_AGREEMENT_MIN."""
        try:
            replay = model_replay_create(
                tenant=tenant, provider=provider, days=options["replay_days"], limit=options["replay_limit"]
            )
        except DomainError as error:
            raise CommandError(error.message) from None
        replay = model_replay_run(replay_id=replay.pk)
        needed = Decimal(str(settings.EVAL_REPLAY_AGREEMENT_MIN))
        agreement = replay.result.get("agreement")
        self.stdout.write(model_replay_summary(replay))
        self.stdout.write(f"replay_agreement={'-' if agreement is None else agreement} (model replay #{replay.pk})")
        if agreement is None or Decimal(str(agreement)) < needed:
            self.stderr.write(f"gate: replay_agreement={agreement} (needs >= {needed})")
            raise CommandError(
                f"release gate FAILED: the replay of {tenant.slug}'s recorded tickets agrees on "
                f"{replay.result.get('agreed', 0)} of {replay.result.get('tickets', 0)} (model replay #{replay.pk})"
            )

    def _table(self, run, failures_only):
        attempts = defaultdict(list)
        for result in run.results.select_related("case").order_by("case__suite", "case__name", "attempt"):
            attempts[(result.case.suite, result.case.name)].append(result)
        rows = []
        for (suite, name), results in attempts.items():
            passed = sum(r.passed for r in results)
            if failures_only and passed == len(results):
                continue
            last = results[-1].observed
            approvals = last.get("approvals") or []
            ticket = last.get("ticket") or {}
            first_failure = next((r.failures[0] for r in results if r.failures), "")
            rows.append(
                (
                    passed == len(results),
                    suite,
                    name,
                    f"{passed}/{len(results)}",
                    ticket.get("stop_reason") or last.get("ticket_error") or "-",
                    ",".join(a["amount"] for a in approvals) or "-",
                    first_failure[:90],
                )
            )
        if not rows:
            return
        header = ("suite", "case", "passed", "stop", "approval", "why it failed")
        ok = [r[0] for r in rows]
        rows = [r[1:] for r in rows]
        widths = [max(len(str(r[i])) for r in [header, *rows]) for i in range(5)]
        line = "  ".join(h.ljust(w) for h, w in zip(header[:5], widths, strict=True)) + "  " + header[5]
        self.stdout.write(line)
        self.stdout.write("-" * min(len(line) + 40, 160))
        for passed, row in zip(ok, rows, strict=True):
            text = "  ".join(str(v).ljust(w) for v, w in zip(row[:5], widths, strict=True)) + "  " + row[5]
            self.stdout.write(text if passed else self.style.ERROR(text))
