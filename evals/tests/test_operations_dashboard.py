"""The operator dashboard: who may see it, what it shows, and a query count that does not grow."""

import re
from datetime import timedelta
from decimal import Decimal
from unittest import mock

import pytest
from django.db import connection
from django.test import Client
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from approvals.models import ApprovalRequest, Capability
from approvals.services.execution import approval_execute
from evals.models import EvalRun
from ledger.models import Order, RefundEntry
from ledger.services import ledger_refund_issue
from refundagent.models import AgentRun, Ticket
from refundagent.tests.payments_support import approve, ticket_awaiting_approval
from tests.helpers import signed_in

URL = "/evals/operations/"


@pytest.fixture
def declined(demo, user, fake_stripe, django_capture_on_commit_callbacks):
    """declined(n): n approved refunds of 20.00 on acme's ORD-5001 that Stripe declines (each
    frees the amount again, so the next can be approved). Returns the last (ticket, request)."""
    order = Order.objects.get(tenant=demo["acme"], external_id="ORD-5001")
    made = []

    def make(n):
        for _ in range(n):
            fake_stripe.fail_next("402")
            ticket, request = ticket_awaiting_approval(
                order=order, filer=user("acme-support"), amount="20.00", key=f"ops-declined-{len(made)}"
            )
            with django_capture_on_commit_callbacks(execute=True):
                approve(request, user("acme-finance"))
            request.refresh_from_db()
            assert request.status == ApprovalRequest.Status.PAYMENT_FAILED
            made.append((ticket, request))
        return made[-1]

    return make


def _tickets(tenant, user, n):
    """n tickets of `tenant`, each with an agent run that cost something."""
    customer = tenant.customers.first()
    for i in range(n):
        ticket = Ticket.objects.create(
            tenant=tenant,
            customer=customer,
            message=f"Refund {i}.",
            created_by=user,
            status=Ticket.Status.ESCALATED if i % 2 else Ticket.Status.QUEUED,
        )
        AgentRun.objects.create(
            ticket=ticket,
            status=AgentRun.Status.STOPPED,
            input_tokens=1000,
            output_tokens=100,
            cost_usd=Decimal("0.004500"),
        )


def _queries(client) -> int:
    with CaptureQueriesContext(connection) as captured:
        assert client.get(URL).status_code == 200
    return len(captured)


def test_the_dashboard_costs_the_same_queries_for_2_and_40_tickets_and_1_and_8_failed_payouts(demo, user, declined):
    # given the operator's tenant with 2 tickets (and runs) and one refund Stripe declined
    ops = user("ops")
    _tickets(demo["acme"], user("acme-support"), 2)
    declined(1)
    client = signed_in(ops)
    client.get(URL)  # the session and the user, loaded once
    small = _queries(client)
    # when it has 40 tickets and 8 declined refunds (each with its ticket and approval)
    _tickets(demo["acme"], user("acme-support"), 38)
    declined(7)
    response = client.get(URL)
    assert len(response.context["payout_failures"]) == 8
    large = _queries(client)
    # then the page needs exactly as many queries
    assert small == large
    assert small <= 17, small  # 17: the failed customer emails' and the locked-out sign-ins' panels


def test_the_payout_failures_panel_lists_the_ledgers_refused_refunds_with_reason_and_links(demo, user, declined):
    # given a refund finance approved and Stripe declined, and one paid by hand today
    ticket, request = declined(1)
    order = Order.objects.get(tenant=demo["acme"], external_id="ORD-5001")
    ledger_refund_issue(
        order=order, amount="5.00", currency="USD", idempotency_key="ops-manual", source="manual", reason="goodwill"
    )
    # when the operator opens the page
    response = signed_in(user("ops")).get(URL)
    # then the failed payout is listed from the ledger: order, amount, gateway, status, Stripe's reason
    entry = RefundEntry.objects.get(approval_ref=str(request.pk))
    [failure] = response.context["payout_failures"]
    assert failure["pk"] == entry.pk and failure["status"] == "failed"
    assert (failure["order_ref"], failure["amount"], failure["currency"]) == ("ORD-5001", Decimal("20.00"), "USD")
    assert failure["gateway"] == "stripe" and "card_declined" in failure["failure_reason"]
    assert failure["when"] == entry.status_changed_at
    # and it links to the ticket and the approval it was executed for
    assert (failure["approval"]["pk"], failure["approval"]["ticket_ref"]) == (request.pk, ticket.pk)
    row = _row(response.content.decode(), f'data-entry="{entry.pk}"')
    assert f'href="/tickets/{ticket.pk}/"' in row
    assert f'href="/admin/approvals/approvalrequest/{request.pk}/change/"' in row
    assert "Your card was declined." in row and "ORD-5001" in row and "20.00 USD" in row
    # and a refused refund moved no money: "executed" counts only the one paid by hand
    assert [(r["count"], r["total"]) for r in response.context["refunds"]] == [(1, Decimal("5.00"))]
    # and no execution failed (the ledger write and its verification are a separate list)
    assert response.context["execution_failures"] == []


def test_a_failed_payout_of_another_tenant_or_older_than_the_window_is_not_listed(demo, user, declined):
    # given a refund Stripe declined today: acme's operator sees it, globex's staff does not
    declined(1)
    assert len(signed_in(user("ops")).get(URL).context["payout_failures"]) == 1
    assert signed_in(user("globex-finance")).get(URL).context["payout_failures"] == []
    # when another was declined 20 days ago (the window is 14 days)
    with mock.patch("django.utils.timezone.now", return_value=timezone.now() - timedelta(days=20)):
        declined(1)
    # then only today's is listed
    assert len(signed_in(user("ops")).get(URL).context["payout_failures"]) == 1
    assert RefundEntry.objects.filter(status="failed").count() == 2


def _row(body: str, marker: str) -> str:
    start = body.index(marker)
    return body[start : body.index("</tr>", start)]


def test_the_dashboard_shows_the_tenants_numbers_only(demo, user):
    # given acme's tickets, a refund written today and a switched-off capability; and a globex ticket
    _tickets(demo["acme"], user("acme-support"), 3)
    _tickets(demo["globex"], user("globex-support"), 5)
    order = Order.objects.get(tenant=demo["acme"], external_id="ORD-5001")
    ledger_refund_issue(
        order=order, amount="20.00", currency="USD", idempotency_key="ops-dashboard-1", source="manual", reason="test"
    )
    Capability.objects.filter(name="orders.lookup_order").update(enabled=False)
    # when the operator opens the page
    response = signed_in(user("ops")).get(URL)
    # then acme's numbers: 3 tickets today (2 queued, 1 escalated), the refund, the costs, the switch
    assert response.status_code == 200
    context = response.context
    assert context["tickets_today"] == 3
    assert dict(context["statuses"])["Queued"] == 2
    assert context["escalated"].count == 1
    # (the demo's imported refunds are history, not executed by the product)
    assert [(r["count"], r["total"]) for r in context["refunds"]] == [(1, Decimal("20.00"))]
    assert context["usage"][-1]["runs"] == 3 and context["usage"][-1]["tokens"] == 3300
    assert context["switched_off"] == ["orders.lookup_order"]
    body = response.content.decode()
    assert body.count("<svg") == 2 and "Kill switches" in body  # refunds and cost; no eval run yet
    assert "https://" not in body and "<script src" not in body  # server-rendered, nothing from a CDN
    assert 'href="/evals/operations/"' in body  # linked from the nav


def test_the_eval_trend_marks_the_runs_that_failed_the_gate_and_says_how_the_last_did(demo, user):
    # given two finished eval runs, the last failing the release gate
    for passed, rate in ((True, 0.96), (False, 0.81)):
        EvalRun.objects.create(
            suite="all",
            trigger="test",
            provider="offline",
            total=10,
            metrics={"pass_rate": rate, "false_allow": 0 if passed else 2},
            passed=passed,
            finished_at=timezone.now(),
        )
    # when the operator opens the page
    body = signed_in(user("ops")).get(URL).content.decode()
    # then the failed run's dot is red and the page says the last run failed the gate
    assert body.count('class="dot failed"') == 1 and body.count('class="dot"') == 1
    assert "release gate FAILED</title>" in body and "pass rate 81.0%" in body
    assert re.search(r"Last run <a [^>]+>#\d+</a> \(all, [^)]+\): release gate <span class=\"bad\">FAILED", body)


def test_people_who_are_not_staff_or_operators_are_refused(demo, user):
    # support is neither staff nor operator; finance works in the admin, so is staff
    assert signed_in(user("acme-support")).get(URL).status_code == 403
    assert signed_in(user("acme-finance")).get(URL).status_code == 200


def test_signed_out_goes_to_the_login(db):
    response = Client().get(URL)
    assert response.status_code == 302 and "/login" in response["Location"]


def test_an_operator_who_is_not_staff_may_see_it(demo, user):
    from django.contrib.auth.models import Group

    support = user("acme-support")
    support.groups.add(Group.objects.get(name="operator"))
    assert signed_in(support).get(URL).status_code == 200


def test_an_execution_the_ledger_refused_is_listed_apart_with_its_stage_and_reason(demo, user):
    # given an approved request whose stored args were tampered with: the execution refuses it
    order = Order.objects.get(tenant=demo["acme"], external_id="ORD-5001")
    ticket, request = ticket_awaiting_approval(order=order, filer=user("acme-support"), amount="20.00", key="ops-t")
    approve(request, user("acme-finance"))  # (the execution waits for commit: not run here)
    ApprovalRequest.objects.filter(pk=request.pk).update(args={**request.args, "amount": "1.00"})
    approval_execute(request_id=request.pk)
    # when the operator opens the page
    response = signed_in(user("ops")).get(URL)
    # then it is an execution failure, not a payout failure
    [failure] = response.context["execution_failures"]
    assert (failure["pk"], failure["ticket_ref"], failure["stage"]) == (request.pk, ticket.pk, "execute")
    assert "no longer match" in failure["reason"]
    assert response.context["payout_failures"] == []
    row = _row(response.content.decode(), f'data-approval="{request.pk}"')
    assert f'href="/tickets/{ticket.pk}/"' in row and "execute" in row
