"""The operator dashboard: who may see it, what it shows, and a query count that does not grow."""

from decimal import Decimal

from django.db import connection
from django.test import Client
from django.test.utils import CaptureQueriesContext

from approvals.models import Capability
from ledger.models import Order
from ledger.services import ledger_refund_issue
from refundagent.models import AgentRun, Ticket

URL = "/evals/operations/"


def _signed_in(user):
    client = Client()
    client.force_login(user)
    return client


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


def test_the_dashboard_costs_the_same_queries_for_2_and_40_tickets(demo, user):
    # given the operator's tenant with 2 tickets (and runs)
    ops = user("ops")
    _tickets(demo["acme"], user("acme-support"), 2)
    client = _signed_in(ops)
    client.get(URL)  # the session and the user, loaded once
    small = _queries(client)
    # when it has 40
    _tickets(demo["acme"], user("acme-support"), 38)
    large = _queries(client)
    # then the page needs exactly as many queries
    assert small == large
    assert small <= 16


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
    response = _signed_in(user("ops")).get(URL)
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


def test_people_who_are_not_staff_or_operators_are_refused(demo, user):
    # support is neither staff nor operator; finance works in the admin, so is staff
    assert _signed_in(user("acme-support")).get(URL).status_code == 403
    assert _signed_in(user("acme-finance")).get(URL).status_code == 200


def test_signed_out_goes_to_the_login(db):
    response = Client().get(URL)
    assert response.status_code == 302 and "/login" in response["Location"]


def test_an_operator_who_is_not_staff_may_see_it(demo, user):
    from django.contrib.auth.models import Group

    support = user("acme-support")
    support.groups.add(Group.objects.get(name="operator"))
    assert _signed_in(support).get(URL).status_code == 200
