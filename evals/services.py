"""Writes of the evals app: syncing case definitions into EvalCase rows, and eval runs."""

import logging
import os
import subprocess
import time
from collections.abc import Callable

from django.conf import settings
from django.db import transaction
from django.utils import timezone

from ledger.tenancy import roles_sync
from refundagent.agent.providers.offline import OfflineProvider

from . import graders
from .cases import SUITES, Suite, SuiteEmptyError, suites_select
from .judge import judge_for_provider
from .models import EvalCase, EvalResult, EvalRun
from .runner import case_execute

logger = logging.getLogger(__name__)

PROVIDERS = ("offline", "anthropic")


def evals_cases_sync(*, cases: list[dict] | None = None, suites: list[Suite] | None = None) -> dict:
    """Write the case definitions (evals.cases) into EvalCase rows: new ones are created,
    changed ones updated, unchanged ones left alone. Cases are then data, visible in the admin;
    a case an operator disabled there stays disabled.

    Without `cases`, the cases of `suites` (every suite by default); a suite that has none is
    skipped and named under "empty" with what is missing, for the caller to fail loudly."""
    empty = {}
    if cases is None:
        cases = []
        for suite in SUITES.values() if suites is None else suites:
            try:
                cases += suite.cases()
            except SuiteEmptyError as exc:
                empty[suite.name] = str(exc)
    fields = ("suite", "tags", "description", "ticket_input", "fixture", "provider_script", "expected")
    existing = {c.name: c for c in EvalCase.objects.filter(name__in=[c["name"] for c in cases])}
    created = updated = 0
    with transaction.atomic():
        for case in cases:
            values = {f: case.get(f, [] if f == "tags" else "" if f == "description" else None) for f in fields}
            row = existing.get(case["name"])
            if row is None:
                EvalCase.objects.create(name=case["name"], **values)
                created += 1
            elif any(getattr(row, f) != values[f] for f in fields):
                EvalCase.objects.filter(pk=row.pk).update(updated_at=timezone.now(), **values)
                updated += 1
    return {"created": created, "updated": updated, "total": len(cases), "empty": empty}


def code_version() -> str:
    """The commit being evaluated: GIT_COMMIT/SOURCE_VERSION if the deploy sets one, else git."""
    for name in ("GIT_COMMIT", "SOURCE_VERSION"):
        if os.getenv(name):
            return os.environ[name][:64]
    try:
        out = subprocess.run(
            ["git", "rev-parse", "HEAD"], cwd=settings.BASE_DIR, capture_output=True, text=True, timeout=5, check=False
        )
    except (OSError, subprocess.SubprocessError):
        return ""
    return out.stdout.strip()[:64] if out.returncode == 0 else ""


def eval_cases_select(suite: str):
    return EvalCase.objects.filter(enabled=True, suite__in=[s.name for s in suites_select(suite)]).order_by(
        "suite", "name"
    )


def suites_without_cases(suites: list[Suite], cases: list[EvalCase], empty: dict[str, str]) -> list[dict]:
    """A release gate failure for each suite that has no case to run, saying what is missing."""
    present = {case.suite for case in cases}
    failures = []
    for suite in suites:
        if suite.name in present:
            continue
        why = empty.get(suite.name) or (
            f"suite {suite.name}: no cases: no enabled EvalCase rows (switched off in the admin, or never synced)"
        )
        failures.append({"metric": "cases", "value": 0, "threshold": "> 0", "suite": suite.name, "why": why})
    return failures


def eval_run_execute(
    *,
    suite: str = "all",
    provider: str = "offline",
    repeat: int = 1,
    trigger: str = EvalRun.Trigger.COMMAND,
    sync: bool = True,
    progress: Callable[[int, int, str, bool], None] | None = None,
    names: list[str] | None = None,
) -> EvalRun:
    """Run a suite (every enabled case, `repeat` times each), store the run, its results, the
    metrics and the release gate's verdict, which fails when a suite has no case to run. The
    release gate's failures are logged at ERROR."""
    suites = suites_select(suite)
    if repeat < 1:
        raise ValueError("repeat must be at least 1")
    empty = evals_cases_sync(suites=suites)["empty"] if sync else {}
    # The role groups are global configuration (migrate makes them), not tenant data: synced
    # once here, so each case's sandbox does not rebuild them (and roll them back) again.
    roles_sync()
    # A suite whose definitions cannot be built is not run from rows an earlier sync left behind.
    cases = [c for c in eval_cases_select(suite) if c.suite not in empty]
    if names is not None:
        cases = [c for c in cases if c.name in set(names)]
    judge = None
    model = ""
    if provider == "anthropic":
        judge, model = judge_for_provider()
    elif provider == "offline":
        model = OfflineProvider.model
    run = EvalRun.objects.create(
        suite=suite, trigger=trigger, provider=provider, model=model, code_version=code_version(), repeat=repeat
    )
    started = time.monotonic()
    rows = []
    done, todo = 0, len(cases) * repeat
    try:
        for case in cases:
            blocking = "blocking" in (case.tags or [])
            for attempt in range(1, repeat + 1):
                outcome = case_execute(case, provider_name=provider, judge=judge)
                model = model or outcome.observed.get("model", "")
                EvalResult.objects.create(
                    run=run,
                    case=case,
                    attempt=attempt,
                    passed=outcome.passed,
                    observed=outcome.observed,
                    failures=outcome.failures,
                    trace_id=outcome.trace_id,
                    trace=outcome.trace,
                    duration_ms=outcome.duration_ms,
                    false_allow=outcome.grade.get("false_allow", False),
                    missing_citation=outcome.grade.get("missing_citation", False),
                    money_moved_by_agent=outcome.grade.get("money_moved_by_agent", False),
                    draft_quality=outcome.grade.get("draft_quality"),
                )
                judge_ok = (outcome.observed.get("judge") or {}).get("ok")
                rows.append(
                    {
                        "case": case.name,
                        "passed": outcome.passed,
                        "blocking": blocking,
                        "judge_ok": judge_ok,
                        **outcome.grade,
                    }
                )
                done += 1
                if progress:
                    progress(done, todo, case.name, outcome.passed)
    except BaseException as exc:
        run.error = f"{type(exc).__name__}: {exc}"
        run.passed = False
        run.finished_at = timezone.now()
        run.duration_ms = int((time.monotonic() - started) * 1000)
        run.save()
        logger.error("eval run #%s (%s) did not finish: %s", run.pk, suite, run.error)
        raise
    metrics = graders.metrics_compute(rows, repeat=repeat)
    failures = graders.release_gate_evaluate(metrics)
    if names is None:
        failures += suites_without_cases(suites, cases, empty)
    if not rows and not any(f["metric"] == "cases" for f in failures):
        failures.append({"metric": "cases", "value": 0, "threshold": "> 0"})
    run.metrics = metrics
    run.gate_failures = failures
    run.total = len(rows)
    run.passed_count = metrics["passed"]
    run.failed_count = metrics["failed"]
    run.passed = not failures
    run.model = model
    run.finished_at = timezone.now()
    run.duration_ms = int((time.monotonic() - started) * 1000)
    run.save()
    if failures:
        logger.error(
            "eval run #%s (%s, %s, trigger %s): the release gate FAILED: %s",
            run.pk,
            suite,
            provider,
            trigger,
            "; ".join(f.get("why") or f"{f['metric']}={f['value']} (needs {f['threshold']})" for f in failures),
        )
    return run
