"""Every τ-bench training and dev refund case passes with the offline provider."""

import pytest

from evals.models import EvalRun

pytestmark = pytest.mark.django_db


def test_every_tau_bench_refund_case_passes_offline():
    from evals.services import eval_run_execute

    run = eval_run_execute(suite="tau_retail", provider="offline", trigger=EvalRun.Trigger.TEST)
    failed = {r.case.name: r.failures for r in run.results.filter(passed=False).select_related("case")}
    assert failed == {}
    assert run.total > 400 and run.passed
    assert run.metrics["false_allow"] == 0 and run.metrics["money_moved_by_agent"] == 0
    executed = run.results.filter(observed__execution__status="executed").count()
    assert executed == sum(1 for r in run.results.all() if r.case.expected.get("approval_amount"))
