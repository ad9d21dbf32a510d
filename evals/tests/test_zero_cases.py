"""A run with no cases proved nothing: it is a failed gate with a 0 pass rate, never 100 %."""

import pytest

from evals.graders import metrics_compute
from evals.models import EvalRun
from evals.services import eval_run_execute


def test_no_results_make_a_zero_pass_rate():
    assert metrics_compute([])["pass_rate"] == 0.0


@pytest.mark.django_db
def test_a_run_with_no_cases_is_recorded_as_a_failed_gate():
    # given a selection that matches no case; when it runs
    run = eval_run_execute(suite="release_gate", trigger=EvalRun.Trigger.TEST, names=["no-such-case"])
    # then the run is recorded with 0 cases, a 0 pass rate and a failed gate that says why
    assert run.total == 0 and run.passed is False
    assert run.metrics["pass_rate"] == 0.0
    assert {"metric": "cases", "value": 0, "threshold": "> 0"} in run.gate_failures
