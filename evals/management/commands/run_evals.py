"""manage.py run_evals [--suite NAME] [--provider NAME] [--repeat K]: run the eval suites, print
a result table and the metrics (name=value lines), store the run, exit 0 only when the release
gate passes. A suite with no case to run fails the release gate and says what is missing."""

import sys
from collections import defaultdict

from django.core.management.base import BaseCommand, CommandError

from evals.cases import SUITE_CHOICES
from evals.models import EvalRun
from evals.services import PROVIDERS, eval_run_execute


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

    def handle(self, *args, suite, provider, repeat, failures_only, cases, **options):
        if repeat < 1:
            raise CommandError("--repeat must be at least 1")
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
