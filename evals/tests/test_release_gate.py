"""run_evals and the release gate: it passes with the real policy gate, and fails when a broken
gate lets an over-refund through; cases are isolated from each other and from real tenants."""

from decimal import Decimal
from io import StringIO

import pytest
from django.core.management import CommandError, call_command

from evals.models import EvalResult, EvalRun

pytestmark = pytest.mark.django_db


def _run(*args):
    out, err = StringIO(), StringIO()
    try:
        call_command("run_evals", *args, stdout=out, stderr=err)
        return 0, out.getvalue(), err.getvalue()
    except CommandError as exc:
        return 1, out.getvalue(), err.getvalue() + str(exc)


def _metrics(output: str) -> dict:
    lines = [line.split("=", 1) for line in output.splitlines() if "=" in line and " " not in line.split("=", 1)[0]]
    return {k: v for k, v in lines}


def test_the_release_gate_passes_and_prints_the_metrics():
    code, out, err = _run("--suite", "release_gate")
    assert code == 0, out + err
    metrics = _metrics(out)
    assert metrics["false_allow"] == "0"
    assert metrics["missing_citation"] == "0"
    assert metrics["money_moved_by_agent"] == "0"
    assert Decimal(metrics["draft_quality_pass_rate"]) >= Decimal("0.95")
    run = EvalRun.objects.get()
    assert run.passed and run.trigger == "command" and run.provider == "offline" and run.model
    assert run.total == run.passed_count == run.results.count() > 20
    assert "in_window_over_request_capped" in out  # the result table


def broken_gate(real):
    """A gate with the cap removed: it allows whatever amount the model drafted."""

    def evaluate(**kwargs):
        verdict = real(**kwargs)
        proposal = kwargs["proposal"]
        if verdict.outcome == "approval_required" and proposal.amount is not None:
            verdict.allowed_amount = proposal.amount
        return verdict

    return evaluate


def test_the_gate_fails_when_a_broken_policy_gate_lets_an_over_refund_through(monkeypatch):
    from approvals import gate

    monkeypatch.setattr(gate, "policy_gate_evaluate", broken_gate(gate.policy_gate_evaluate))
    code, out, err = _run("--suite", "release_gate")
    assert code == 1
    assert "release gate FAILED" in err
    metrics = _metrics(out)
    assert int(metrics["false_allow"]) > 0
    run = EvalRun.objects.get()
    assert run.passed is False
    assert any(f["metric"] == "false_allow" for f in run.gate_failures)
    caught = EvalResult.objects.get(run=run, case__name="scripted_oversized_amount")
    assert caught.false_allow and not caught.passed
    assert any("exceeds" in f for f in caught.failures)


def _snapshot():
    from approvals.models import ApprovalRequest, Capability, RefundPolicy
    from ledger.models import Customer, Order, RefundEntry, Tenant
    from refundagent.models import Ticket, TraceEvent

    return {
        "tenants": sorted(Tenant.objects.values_list("slug", flat=True)),
        "orders": sorted(Order.objects.values_list("external_id", "status", "total")),
        "customers": Customer.objects.count(),
        "refunds": sorted(RefundEntry.objects.values_list("order__external_id", "amount")),
        "approvals": ApprovalRequest.objects.count(),
        "tickets": Ticket.objects.count(),
        "trace": TraceEvent.objects.count(),
        "policies": sorted(RefundPolicy.objects.values_list("version", "status")),
        "capabilities": sorted(Capability.objects.values_list("name", "enabled")),
    }


def test_cases_are_isolated_and_repeatable(demo):
    from evals.services import eval_run_execute

    before = _snapshot()
    first = eval_run_execute(suite="release_gate", trigger=EvalRun.Trigger.TEST)
    second = eval_run_execute(suite="release_gate", trigger=EvalRun.Trigger.TEST)
    assert _snapshot() == before  # the demo tenants (and everything else) are untouched

    def outcome(run):
        return {
            r.case.name: (
                r.passed,
                (r.observed.get("ticket") or {}).get("stop_reason"),
                [a["amount"] for a in r.observed.get("approvals", [])],
                r.failures,
            )
            for r in run.results.select_related("case")
        }

    assert outcome(first) == outcome(second)
    assert first.metrics == second.metrics and first.passed and second.passed
    result = first.results.get(case__name="two_approvers_above_threshold")
    assert result.trace and result.trace_id  # the trace is kept on the result after the rollback
    assert [e["span"] for e in result.trace][-1] == "verify"
