"""The case sets: the τ-bench cases follow from the files; the release-gate suite names every case."""

from collections import Counter
from decimal import Decimal

import pytest

from evals.cases.release_gate import release_gate_cases
from evals.cases.tau import tau_cases


def test_one_tau_case_per_refund_action_of_every_train_and_dev_task(tau_data):
    prices = tau_data.item_prices
    expected = Counter()
    for split, tasks in tau_data.tasks.items():
        for task in tasks:
            for action in task["actions"]:
                kwargs = action["kwargs"]
                if action["name"] == "cancel_pending_order":
                    expected[split] += 1
                elif action["name"] == "return_delivered_order_items":
                    expected[split] += 1
                elif action["name"] == "exchange_delivered_order_items":
                    order = tau_data.orders[kwargs["order_id"]]
                    old = sum(
                        Decimal(str(next(i["price"] for i in order["items"] if i["item_id"] == x)))
                        for x in kwargs["item_ids"]
                    )
                    if sum(prices[x] for x in kwargs["new_item_ids"]) < old:
                        expected[split] += 1
    cases = tau_cases(tau_data)
    assert Counter(c["tags"][1] for c in cases) == expected
    assert expected["train"] > 300 and expected["dev"] > 0
    assert len({c["name"] for c in cases}) == len(cases)


def test_tau_expectations_are_the_benchmark_tools_refunds(tau_data):
    cases = {c["name"]: c for c in tau_cases(tau_data)}
    for case in cases.values():
        bench = case["expected"]["benchmark"]
        order = tau_data.orders[bench["kwargs"]["order_id"]]
        if bench["action"] == "cancel_pending_order":
            assert order["status"] == "pending"
            assert Decimal(case["expected"]["approval_amount"]) == Decimal(str(order["payment_history"][0]["amount"]))
            assert case["ticket_input"]["items"] == []
        elif bench["action"] == "return_delivered_order_items":
            price = {i["item_id"]: Decimal(str(i["price"])) for i in order["items"]}
            assert Decimal(case["expected"]["approval_amount"]) == sum(price[i] for i in bench["kwargs"]["item_ids"])
            assert case["ticket_input"]["items"] == bench["kwargs"]["item_ids"]  # repeated ids kept
        if case["expected"]["approval_amount"] is not None:
            assert case["expected"]["payment_method_id"] in {
                bench["kwargs"].get("payment_method_id"),
                order["payment_history"][0]["payment_method_id"],
            }
        # Each case carries its order first, then the customer's other orders (among which an
        # anthropic run, filed without the order, must find it), and only that customer.
        users_orders = {oid for oid, o in tau_data.orders.items() if o["user_id"] == order["user_id"]}
        assert case["fixture"]["orders"][0]["id"] == order["order_id"]
        assert {o["id"] for o in case["fixture"]["orders"]} == users_orders
        assert [c["id"] for c in case["fixture"]["customers"]] == [order["user_id"]]


def test_release_gate_suite_has_every_design_case_and_adversarial_ones():
    names = {c["name"] for c in release_gate_cases()}
    for name in [
        "in_window_over_request_capped",
        "out_of_window_escalated",
        "policy_citation_present",
        "agent_cannot_issue_refund",
        "cross_tenant_ticket_refused",
        "cross_tenant_lookup_denied",
        "missing_policy_escalated",
        "retired_policy_escalated",
        "draft_promising_payment_fails_gate",
        "no_money_moved_by_agent",
        "safe_stop_on_loop",
        "injection_fake_system_message",
        "injection_fake_policy_text",
        "injection_in_order_note",
        "injection_non_english",
        "fully_refunded_order",
        "partial_prior_refund",
        "currency_mismatch",
        "kill_switch_create_draft_off",
        "scripted_forbidden_tools",
        "scripted_oversized_amount",
        "scripted_missing_citation",
    ]:
        assert name in names
    for case in release_gate_cases():
        assert "blocking" in case["tags"] or "adversarial" in case["tags"]
        assert case["fixture"]["orders"], case["name"]


@pytest.mark.django_db
def test_cases_sync_into_rows_once():
    from evals.models import EvalCase
    from evals.services import evals_cases_sync

    first = evals_cases_sync()
    assert first["created"] == first["total"] == EvalCase.objects.count()
    EvalCase.objects.filter(name="out_of_window_escalated").update(enabled=False)
    again = evals_cases_sync()
    assert again["created"] == again["updated"] == 0
    assert not EvalCase.objects.get(name="out_of_window_escalated").enabled  # an operator's switch stays
