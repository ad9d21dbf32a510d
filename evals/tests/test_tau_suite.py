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


def _anthropic_like_script(case: dict) -> list:
    """What a good real model does on a customer-level ticket: list, look up the order it found,
    read the policy, draft naming that order and the items."""
    order_id = case["ticket_input"]["order"]
    draft = {
        "recommendation": "refund",
        "amount": case["expected"]["approval_amount"],
        "policy_version": case["expected"]["policy_version"],
        "order": order_id,
        "rationale": "The customer's delivered order and the items they described.",
        "customer_reply": f"Thank you for contacting us about order {order_id}. We have passed your request "
        "to our team for review and will get back to you.",
    }
    if case["ticket_input"]["items"]:
        draft["items"] = case["ticket_input"]["items"]
    return [
        {"tool": "orders_list_customer_orders", "input": {}},
        {"tool": "orders_lookup_order", "input": {"order_id": order_id}},
        {"tool": "refund_policy_retrieve", "input": {}},
        {"tool": "refunds_create_draft", "input": draft},
        {"text": "Done."},
    ]


def test_in_anthropic_mode_the_ticket_names_no_order_and_the_agent_must_find_it(tau_data):
    from evals.cases.tau import tau_cases
    from evals.runner import case_execute

    # given a τ-bench return whose customer has several orders, played by a scripted "real model"
    case = next(
        c
        for c in tau_cases(tau_data)
        if c["name"].endswith("_return") and c["expected"]["approval_amount"] and len(c["fixture"]["orders"]) > 1
    )
    case = {**case, "provider_script": _anthropic_like_script(case)}

    # when the runner runs it as it does with --provider anthropic
    outcome = case_execute(case, provider_name="anthropic")

    # then the ticket was filed without the order and the items, with only the instruction text,
    # and the benchmark's own outcome still holds on the order the agent found
    assert outcome.observed["ticket"]["filed_order"] is None
    assert outcome.observed["ticket"]["order"] == case["ticket_input"]["order"]
    assert outcome.passed, outcome.failures
    assert outcome.observed["execution"]["status"] == "executed"


def test_in_anthropic_mode_an_agent_that_picks_the_wrong_order_fails_the_case(tau_data):
    from evals.cases.tau import tau_cases
    from evals.runner import case_execute

    case = next(
        c
        for c in tau_cases(tau_data)
        if c["name"].endswith("_return") and c["expected"]["approval_amount"] and len(c["fixture"]["orders"]) > 1
    )
    other = next(o for o in case["fixture"]["orders"] if o["id"] != case["ticket_input"]["order"])
    script = _anthropic_like_script(case)
    script[3]["input"] = {**script[3]["input"], "order": other["id"]}
    script[3]["input"].pop("items", None)
    script[3]["input"].pop("amount", None)

    outcome = case_execute({**case, "provider_script": script}, provider_name="anthropic")

    assert not outcome.passed
    assert any("expected one approval request" in f for f in outcome.failures), outcome.failures
