"""Reads of the evals app."""

from .models import EvalResult, EvalRun


def eval_runs_recent(*, suite: str | None = None, limit: int = 30) -> list[EvalRun]:
    """The last finished runs, oldest first (for a trend)."""
    runs = EvalRun.objects.filter(finished_at__isnull=False)
    if suite:
        runs = runs.filter(suite=suite)
    return list(runs.order_by("-started_at", "-id")[:limit])[::-1]


def eval_run_failures(run: EvalRun) -> list[EvalResult]:
    return list(
        run.results.filter(passed=False).select_related("case").order_by("case__suite", "case__name", "attempt")
    )
