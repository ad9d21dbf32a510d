"""The agent's records in the admin: readable, read-only, tenant-scoped, trace exportable."""

import pytest

from refundagent.agent.loop import agent_run_ticket
from refundagent.agent.providers.offline import OfflineProvider
from refundagent.models import AgentRun, Ticket, TraceEvent
from refundagent.services import ticket_create
from tests.helpers import signed_in


@pytest.fixture
def tickets(user):
    acme = ticket_create(user=user("acme-support"), order="ORD-5001", customer="CUST-1001", message="x")
    agent_run_ticket(ticket_id=acme.pk, provider=OfflineProvider())
    globex = ticket_create(user=user("globex-support"), order="ORD-7001", customer="CUST-2001", message="y")
    agent_run_ticket(ticket_id=globex.pk, provider=OfflineProvider())
    return acme, globex


def test_finance_reads_its_tenants_tickets_and_traces_only(user, tickets):
    acme, globex = tickets
    client = signed_in(user("acme-finance"))

    listing = client.get("/admin/refundagent/ticket/")
    assert listing.status_code == 200
    assert f"/admin/refundagent/ticket/{acme.pk}/change/" in listing.content.decode()
    assert f"/admin/refundagent/ticket/{globex.pk}/change/" not in listing.content.decode()
    page = client.get(f"/admin/refundagent/ticket/{acme.pk}/change/")
    assert page.status_code == 200 and b"refunds.create_draft" in page.content
    assert client.get(f"/admin/refundagent/ticket/{globex.pk}/change/").status_code == 302  # not found: redirected
    events = client.get("/admin/refundagent/traceevent/").content.decode()
    assert str(acme.trace_id) in events and str(globex.trace_id) not in events


def test_the_trace_exports_as_json(user, tickets):
    acme, globex = tickets
    client = signed_in(user("acme-finance"))

    response = client.get(f"/admin/refundagent/ticket/{acme.pk}/trace.json")

    assert response.status_code == 200
    body = response.json()
    assert body["trace_id"] == str(acme.trace_id)
    assert len(body["events"]) == TraceEvent.objects.filter(ticket=acme).count()
    assert client.get(f"/admin/refundagent/ticket/{globex.pk}/trace.json").status_code == 404


def test_the_export_action_returns_the_selected_traces(user, tickets):
    acme, _ = tickets
    client = signed_in(user("acme-finance"))

    response = client.post("/admin/refundagent/ticket/", {"action": "export_traces", "_selected_action": [acme.pk]})

    assert response.status_code == 200
    assert [t["ticket"] for t in response.json()["traces"]] == [acme.pk]


def test_agent_output_cannot_be_edited_in_the_admin(user, tickets):
    acme, _ = tickets
    client = signed_in(user("ops"))  # a superuser
    run = AgentRun.objects.get(ticket=acme)

    page = client.get(f"/admin/refundagent/agentrun/{run.pk}/change/")
    assert page.status_code == 200 and b"transcript" in page.content
    client.post(f"/admin/refundagent/ticket/{acme.pk}/change/", {"status": "refunded"})
    acme.refresh_from_db()
    assert acme.status == Ticket.Status.APPROVAL_REQUIRED
    assert client.get("/admin/refundagent/ticket/add/").status_code == 403


@pytest.mark.parametrize(
    "url,action",
    [("/admin/refundagent/ticket/", "export_traces"), ("/admin/refundagent/escalatedticket/", "take")],
)
def test_an_action_on_a_selected_id_that_is_not_a_number_is_a_400_and_does_nothing(user, tickets, url, action):
    # given an escalated acme ticket nobody owns, and finance in the admin
    acme, _ = tickets
    Ticket.objects.filter(pk=acme.pk).update(status=Ticket.Status.ESCALATED, owner=None)
    client = signed_in(user("acme-finance"))
    client.raise_request_exception = False
    events = TraceEvent.objects.count()

    # when an action is posted with a selected id that is not a number, beside the real one
    response = client.post(url, {"action": action, "index": "0", "_selected_action": ["abc", acme.pk]})

    # then 400 and nothing done: no export, the ticket not taken (before: 500 "Field 'id' expected a number")
    assert response.status_code == 400
    acme.refresh_from_db()
    assert acme.owner is None and TraceEvent.objects.count() == events


@pytest.mark.parametrize(
    "url,query",
    [
        ("/admin/refundagent/ticket/", "created_at__year=0"),
        ("/admin/refundagent/traceevent/", "at__iso_year=99999999999999999999"),
        ("/admin/refundagent/refunddraft/", "created_at__iso_year=0"),
    ],
)
def test_a_lookup_that_cannot_run_is_the_admins_bad_filter_redirect(user, tickets, url, query):
    client = signed_in(user("acme-finance"))
    client.raise_request_exception = False

    response = client.get(f"{url}?{query}")

    # before: 500 (ValueError: year 0 is out of range; ISO calendar component out of range)
    assert (response.status_code, response["Location"]) == (302, f"{url}?e=1")
