"""Every date a person sees in the admin is in the one format with the time zone
(refundagent.labels.DATETIME_FORMAT, handed to Django by the format module of
settings.FORMAT_MODULE_PATH): the stock change form's readonly fields, the inlines and the
changelist columns print exactly what `labels.when` prints, never Django's locale format.
Every test builds its own shop."""

from datetime import UTC, datetime
from decimal import Decimal

import pytest
from django.urls import reverse
from django.utils import timezone

from approvals.gate import Proposal, policy_gate_evaluate
from approvals.models import ApprovalRequest, ApprovalVote
from approvals.services.requests import approval_request_create
from refundagent.labels import when
from refundagent.models import AgentRun, RefundDraft, Ticket, TraceEvent

pytestmark = pytest.mark.django_db

MOMENT = datetime(2024, 3, 5, 14, 7, tzinfo=UTC)
SHOWN = "2024-03-05 14:07 UTC"
# What Django's en locale would print for MOMENT (DATETIME_FORMAT "N j, Y, P", dates "N j, Y").
LOCALE = ("March 5, 2024", "Mar. 5, 2024", "2:07 p.m.")


@pytest.fixture
def dated(make_user, customer, make_order, policy):
    """A ticket with a run, a draft, a trace event and a decided approval request with a vote,
    every timestamp set to MOMENT; and finance, who reads them in the admin."""
    support, finance = make_user("support", "support"), make_user("finance", "finance")
    order = make_order("150.00", days_old=3)
    ticket = Ticket.objects.create(
        tenant=order.tenant, order=order, customer=customer, message="x", currency="USD", created_by=support
    )
    run = AgentRun.objects.create(ticket=ticket, provider="offline", status=AgentRun.Status.STOPPED)
    proposal = Proposal(recommendation="refund", amount=Decimal("150.00"), policy_version=policy.version)
    verdict = policy_gate_evaluate(order=order, policy=policy, proposal=proposal, now=timezone.now())
    draft = RefundDraft.objects.create(
        run=run, ticket=ticket, recommendation="refund", amount=Decimal("150.00"), currency="USD", gate_verdict={}
    )
    event = TraceEvent.objects.create(ticket=ticket, run=run, trace_id=ticket.trace_id, seq=1, span="run")
    request, _ = approval_request_create(
        order=order,
        policy=policy,
        verdict=verdict,
        idempotency_key=f"test:{ticket.pk}",
        requested_by=support,
        ticket_ref=ticket.pk,
        trace_id=str(ticket.trace_id),
    )
    vote = ApprovalVote.objects.create(request=request, approver=finance, decision="deny", args_hash=request.args_hash)
    Ticket.objects.filter(pk=ticket.pk).update(created_at=MOMENT, updated_at=MOMENT)
    AgentRun.objects.filter(pk=run.pk).update(started_at=MOMENT, finished_at=MOMENT, created_at=MOMENT)
    RefundDraft.objects.filter(pk=draft.pk).update(created_at=MOMENT)
    TraceEvent.objects.filter(pk=event.pk).update(at=MOMENT)
    ApprovalRequest.objects.filter(pk=request.pk).update(
        status="denied", decided_by=finance, decided_at=MOMENT, updated_at=MOMENT
    )
    ApprovalVote.objects.filter(pk=vote.pk).update(created_at=MOMENT)
    return {"ticket": ticket, "run": run, "request": request, "finance": finance}


def admin_page(client, user, url) -> str:
    client.force_login(user)
    response = client.get(url)
    assert response.status_code == 200, url
    return response.content.decode()


def assert_one_format(html: str, count: int = 1):
    assert html.count(SHOWN) >= count, html[:2000]
    for locale in LOCALE:
        assert locale not in html


def test_labels_and_django_print_the_same_string():
    # given the one format, then `when` prints it with the zone
    assert when(MOMENT) == SHOWN


def test_the_ticket_change_page_shows_readonly_dates_and_inlines_in_the_one_format(dated, client):
    # when finance opens the ticket's stock change page (readonly created/updated, the draft and trace inlines)
    html = admin_page(client, dated["finance"], reverse("admin:refundagent_ticket_change", args=[dated["ticket"].pk]))
    # then every date is the one format with the zone: created, updated, the draft's creation, the event's time
    assert_one_format(html, count=4)


def test_the_operator_sees_the_runs_dates_in_the_one_format(dated, make_user, client):
    # given an operator, who reads agent runs
    operator = make_user("operator", "operator", is_staff=True)
    # when they open the ticket (with its run inline) and the run's own page
    ticket_html = admin_page(client, operator, reverse("admin:refundagent_ticket_change", args=[dated["ticket"].pk]))
    run_html = admin_page(client, operator, reverse("admin:refundagent_agentrun_change", args=[dated["run"].pk]))
    # then the run's start and finish are in the one format too (two more on the ticket; three on the run)
    assert_one_format(ticket_html, count=6)
    assert_one_format(run_html, count=3)


def test_changelist_columns_show_dates_in_the_one_format(dated, client):
    # when finance opens the changelists whose columns are stock datetime fields
    for url in (
        reverse("admin:refundagent_traceevent_changelist"),
        reverse("admin:refundagent_refunddraft_changelist"),
        reverse("admin:approvals_approvalvote_changelist"),
    ):
        html = admin_page(client, dated["finance"], url)
        # then the column shows the one format with the zone
        assert_one_format(html)
    # and the ticket list's own "created" column says the same
    assert_one_format(admin_page(client, dated["finance"], reverse("admin:refundagent_ticket_changelist")))


def test_the_approval_requests_decision_record_shows_the_one_format(dated, client):
    # when finance opens a decided request (the stock form keeps the decision record: decided at, updated at)
    html = admin_page(
        client, dated["finance"], reverse("admin:approvals_approvalrequest_change", args=[dated["request"].pk])
    )
    # then its dates are in the one format
    assert_one_format(html, count=2)


def test_the_format_follows_the_current_time_zone(dated, client):
    # given a person working in Berlin's time zone
    with timezone.override("Europe/Berlin"):
        html = admin_page(
            client, dated["finance"], reverse("admin:refundagent_ticket_change", args=[dated["ticket"].pk])
        )
    # then the dates are shown in that zone, named
    assert "2024-03-05 15:07 CET" in html and SHOWN not in html
