"""Refund-abuse signals as rules of the versioned policy: the gate derives them from the ledger
(refunds per customer across orders and tickets, open tickets on one order, a destination the
customer never paid with), escalates with a reason a person can read, and puts the figures on
the verdict. Through the agent loop and the admin on PostgreSQL."""

from decimal import Decimal

import pytest
from django.core.exceptions import ValidationError
from django.utils import timezone

from approvals.models import ApprovalRequest, RefundPolicy
from ledger.models import PaymentMethod
from ledger.services import ledger_refund_issue
from refundagent.agent.loop import agent_run_ticket
from refundagent.agent.providers.scripted import ScriptedProvider
from refundagent.models import RefundDraft, Ticket
from refundagent.services import ticket_create
from tests.factories import policy_publish, refund_draft

RULES = {
    "window_days": 30,
    "max_refunds_per_customer": 2,
    "max_refund_amount_per_customer": "250.00",
    "max_open_tickets_per_order": 1,
    "unpaid_destination_kinds": ["card", "paypal", "gift_card"],
}


@pytest.fixture
def risky_policy(tenant):
    return policy_publish(tenant=tenant, now=timezone.now(), risk_rules=RULES)


@pytest.fixture
def support(make_user):
    return make_user("support-1", "support")


def file(support, order, **fields):
    return ticket_create(user=support, customer="CUST-1", order=order.external_id, message="Refund please.", **fields)


def decide(ticket, amount, **draft):
    agent_run_ticket(
        ticket_id=ticket.pk, provider=ScriptedProvider([refund_draft(ticket.order.external_id, amount, **draft)])
    )
    ticket.refresh_from_db()
    return ticket


def verdict(ticket) -> dict:
    return RefundDraft.objects.filter(ticket=ticket).latest("id").gate_verdict


def test_a_serial_refunder_across_three_orders_goes_to_a_person(risky_policy, make_order, support):
    # given a customer with three orders of 100.00, each asked back on its own ticket
    orders = [make_order("100.00") for _ in range(3)]

    first = decide(file(support, orders[0]), "100.00")
    second = decide(file(support, orders[1]), "100.00")
    third = decide(file(support, orders[2]), "100.00")

    # then the first two go to finance, and the third, the customer's third refund in 30 days
    # (300.00), goes to a person with the numbers
    assert (first.status, second.status) == (Ticket.Status.APPROVAL_REQUIRED, Ticket.Status.APPROVAL_REQUIRED)
    assert third.status == Ticket.Status.ESCALATED, third.stop_detail
    codes = verdict(third)["codes"]
    assert "risk_customer_refund_count" in codes and "risk_customer_refund_amount" in codes
    assert "had 2 refund(s) in the last 30 days" in third.stop_detail
    assert "300.00" in third.stop_detail
    risk = verdict(third)["risk"]
    assert risk["customer_refunds_in_window"] == 2
    assert risk["customer_refunded_in_window"] == "200.00"
    assert risk["with_this_refund"] == {"count": 3, "amount": "300.00"}
    assert risk["policy_version"] == risky_policy.version
    assert not ApprovalRequest.objects.filter(ticket_ref=third.pk).exists()
    # and the figures are on the verdict of an ordinary approval too
    assert verdict(first)["risk"]["customer_refunds_in_window"] == 0


def test_refunds_already_in_the_ledger_count(risky_policy, make_order, support, card):
    # given a refund of 200.00 already in the ledger, on another order of the customer
    refunded, asked = make_order("200.00"), make_order("100.00")
    ledger_refund_issue(
        order=refunded, amount=refunded.total, currency="USD", destination=card, idempotency_key="t:1", source="import"
    )

    ticket = decide(file(support, asked), "100.00")

    # then 200.00 + 100.00 passes the 250.00 the policy allows in 30 days: a person decides
    assert ticket.status == Ticket.Status.ESCALATED
    assert verdict(ticket)["codes"][-1] == "risk_customer_refund_amount"
    assert verdict(ticket)["risk"]["customer_refunded_in_window"] == "200.00"
    assert verdict(ticket)["risk"]["customer_refunds_in_window"] == 1


def test_two_tickets_on_one_order_at_once_both_go_to_a_person(risky_policy, make_order, support):
    # given two tickets filed on one order before either was decided
    order = make_order("100.00")
    first, second = file(support, order), file(support, order)

    first, second = decide(first, "100.00"), decide(second, "100.00")

    # then neither reaches finance: each saw the other open
    for ticket in (first, second):
        assert ticket.status == Ticket.Status.ESCALATED, ticket.stop_detail
        assert "risk_open_tickets_on_order" in verdict(ticket)["codes"]
        assert verdict(ticket)["risk"]["open_tickets_on_order"] == 2
        assert f"Order {order.external_id} has 2 open tickets" in ticket.stop_detail
    assert not ApprovalRequest.objects.filter(order=order).exists()


@pytest.fixture
def gift_card(customer):
    return PaymentMethod.objects.create(
        customer=customer, external_id="gift_1", kind=PaymentMethod.Kind.GIFT_CARD, balance=Decimal("10.00")
    )


def test_a_refund_to_a_destination_the_customer_never_paid_with_goes_to_a_person(
    risky_policy, make_order, support, gift_card
):
    # given an item refund to a gift card (the policy allows it) the customer never paid with
    order = make_order("40.00", items=[("ITEM-1", "40.00", 1)])

    ticket = decide(file(support, order, items=["ITEM-1"], refund_to="gift_1"), "40.00")

    assert ticket.status == Ticket.Status.ESCALATED, ticket.stop_detail
    assert "risk_unpaid_destination" in verdict(ticket)["codes"]
    assert "gift_1, which customer CUST-1 never paid with" in ticket.stop_detail
    assert verdict(ticket)["risk"]["destination_paid_with"] is False


def test_a_destination_the_customer_paid_with_passes(risky_policy, make_order, support, gift_card):
    from ledger.models import Payment

    earlier = make_order("10.00", days_old=60)
    Payment.objects.filter(order=earlier).update(payment_method=gift_card, method="gift_card")
    order = make_order("40.00", items=[("ITEM-1", "40.00", 1)])

    ticket = decide(file(support, order, items=["ITEM-1"], refund_to="gift_1"), "40.00")

    assert ticket.status == Ticket.Status.APPROVAL_REQUIRED, ticket.stop_detail
    assert verdict(ticket)["risk"]["destination_paid_with"] is True


def test_the_escalation_queue_page_shows_the_numbers(risky_policy, make_order, support, make_user, client):
    order = make_order("100.00")
    first, second = file(support, order), file(support, order)
    decide(first, "100.00")
    decide(second, "100.00")
    lead = make_user("lead-1", "support", "finance")
    client.force_login(lead)

    page = client.get(f"/admin/refundagent/escalatedticket/{second.pk}/change/")

    assert page.status_code == 200
    html = page.content.decode()
    assert "Risk figures" in html
    assert "open_tickets_on_order" in html or "open tickets on order" in html.lower()
    assert "risk_open_tickets_on_order" in html


def test_the_demo_policy_ships_with_risk_rules(demo):
    policy = RefundPolicy.objects.current_for(demo["acme"])
    assert policy.risk_rules["max_open_tickets_per_order"] == 1
    assert policy.risk_rules["max_refunds_per_customer"] >= 1


@pytest.mark.parametrize(
    "rules",
    [
        {"max_refunds_per_customer": 0},
        {"max_refunds_per_customer": "3"},
        {"max_refund_amount_per_customer": "1e3"},
        {"unpaid_destination_kinds": ["bitcoin"]},
        {"velocity": 3},
        [],
    ],
    ids=repr,
)
def test_bad_risk_rules_are_refused_by_the_policy_form(tenant, rules):
    policy = RefundPolicy(
        tenant=tenant, version="v-bad", text="t", full_refund_statuses=["delivered"], risk_rules=rules
    )
    with pytest.raises(ValidationError) as refused:
        policy.full_clean()
    assert "risk_rules" in refused.value.message_dict


def test_a_new_version_copied_in_the_admin_keeps_the_risk_rules(risky_policy, make_user, client):
    client.force_login(make_user("root", is_superuser=True, is_staff=True))

    client.post(
        "/admin/approvals/refundpolicy/",
        {"action": "copy_to_draft", "_selected_action": [risky_policy.pk]},
    )

    draft = RefundPolicy.objects.get(version=f"{risky_policy.version}-next1")
    assert draft.risk_rules == RULES


@pytest.mark.django_db(transaction=True)
def test_two_tickets_on_one_order_decided_in_parallel_never_both_reach_finance(
    risky_policy, make_order, support, monkeypatch
):
    # given two tickets on one order, their agents running at the same time in two threads
    import threading

    from django.db import connection

    monkeypatch.setattr("refundagent.services.ticket_run_enqueue", lambda ticket_pk: None)
    order = make_order("100.00")
    tickets = [file(support, order), file(support, order)]
    start = threading.Barrier(2)

    def decide_in_thread(ticket):
        try:
            start.wait(timeout=10)
            turn = {**refund_draft(order.external_id, "100.00"), "sleep": 0.3}
            agent_run_ticket(ticket_id=ticket.pk, provider=ScriptedProvider([turn]))
        finally:
            connection.close()

    threads = [threading.Thread(target=decide_in_thread, args=(ticket,)) for ticket in tickets]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)

    # then no approval was asked for on the order: both went to a person with the rule named
    for ticket in tickets:
        ticket.refresh_from_db()
        assert ticket.status == Ticket.Status.ESCALATED, ticket.stop_detail
        assert "risk_open_tickets_on_order" in verdict(ticket)["codes"]
    assert not ApprovalRequest.objects.filter(order=order).exists()
