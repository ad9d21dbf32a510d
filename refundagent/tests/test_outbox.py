"""The outbox: a hand-off is committed with the step that makes it, a failed publish never fails
the request, and the periodic sweep re-enqueues what was not picked up within the grace."""

import logging
from datetime import timedelta
from unittest import mock

import pytest
from django.utils import timezone
from django_celery_beat.models import PeriodicTask
from kombu.exceptions import OperationalError as BrokerDown

from approvals.models import ApprovalRequest
from approvals.outbox import approval_executions_sweep
from approvals.tasks import approval_execute_task
from ledger.models import RefundEntry
from refundagent.models import AgentRun, Ticket
from refundagent.sweep import agent_runs_lease_expired_sweep, outbox_sweep, outbox_sweep_task, tickets_queued_sweep
from refundagent.tasks import agent_run_ticket_task
from refundagent.tests.payments_support import ticket_awaiting_approval
from tests.factories import manual_payout_record

pytestmark = pytest.mark.django_db


def broker_down(*args, **kwargs):
    raise BrokerDown("Error 111 connecting to 127.0.0.1:6400. Connection refused.")


def later(seconds: int):
    """Every sweep module's clock moved `seconds` ahead."""
    moved = timezone.now() + timedelta(seconds=seconds)
    return mock.patch("django.utils.timezone.now", return_value=moved)


@pytest.fixture
def shop(policy, make_order, make_user):
    return {
        "order": make_order("100.00", external_id="ORD-OUT"),
        "support": make_user("support", "support"),
        "finance": make_user("finance", "finance"),
    }


def test_an_approval_answers_200_when_the_broker_is_down_and_the_sweep_executes_it_once(
    shop, api_client, django_capture_on_commit_callbacks, caplog, settings
):
    settings.SWEEP_GRACE_SECONDS = 60
    ticket, request = ticket_awaiting_approval(order=shop["order"], filer=shop["support"], amount="40.00", key="k-1")
    # given the broker is unreachable when finance approves
    with (
        mock.patch.object(approval_execute_task, "delay", side_effect=broker_down),
        django_capture_on_commit_callbacks(execute=True),
        caplog.at_level(logging.ERROR),
    ):
        response = api_client(shop["finance"]).post(
            f"/api/approvals/{request.pk}/decision",
            {"decision": "approve", "args_hash": request.args_hash},
            content_type="application/json",
        )
    # then the decision is recorded and answered 200; the failed publish is logged and kept on the row
    assert response.status_code == 200, response.content
    request.refresh_from_db()
    assert request.status == ApprovalRequest.Status.APPROVED and request.dispatched_at is None
    assert "Connection refused" in request.dispatch_error and request.dispatch_attempts == 1
    assert "the sweep will re-send it" in caplog.text
    assert not RefundEntry.objects.filter(order=shop["order"]).exists()

    # when the broker is back: within the grace the sweep leaves it alone
    assert approval_executions_sweep(older_than=timedelta(seconds=60)) == 0
    # and the first sweep after the grace executes it
    with later(61):
        assert outbox_sweep()["approval_executions"] == 1
    # then exactly once, and (once finance records the payout made by hand: the manual gateway)
    # verified, and the ticket refunded; further sweeps find nothing to do
    request = manual_payout_record(request)
    assert request.status == ApprovalRequest.Status.EXECUTED and request.dispatch_error == ""
    assert RefundEntry.objects.filter(idempotency_key=request.idempotency_key).count() == 1
    ticket.refresh_from_db()
    assert ticket.status == Ticket.Status.REFUNDED
    with later(600):
        assert outbox_sweep()["approval_executions"] == 0
    assert RefundEntry.objects.filter(order=shop["order"]).count() == 1


def test_a_ticket_is_filed_201_when_the_broker_is_down_and_the_sweep_runs_it(
    api_client, django_capture_on_commit_callbacks, caplog
):
    # given the broker is unreachable when support files a ticket
    with (
        mock.patch.object(agent_run_ticket_task, "delay", side_effect=broker_down),
        django_capture_on_commit_callbacks(execute=True),
        caplog.at_level(logging.ERROR),
    ):
        response = api_client("acme-support").post(
            "/api/tickets",
            {
                "order": "ORD-5001",
                "customer": "CUST-1001",
                "message": "Broken, refund $200.",
                "requested_amount": "200.00",
            },
            content_type="application/json",
        )
    # then it is filed (201), queued, and the failure is logged
    assert response.status_code == 201, response.content
    ticket = Ticket.objects.get(pk=response.json()["id"])
    assert ticket.status == Ticket.Status.QUEUED and ticket.run_dispatched_at is None
    assert "the sweep will re-send it" in caplog.text
    # when the sweep runs within the grace, nothing; after it, the agent runs the ticket
    assert tickets_queued_sweep(older_than=timedelta(seconds=60)) == 0
    with later(61):
        assert tickets_queued_sweep(older_than=timedelta(seconds=60)) == 1
    ticket.refresh_from_db()
    assert ticket.status == Ticket.Status.APPROVAL_REQUIRED
    assert AgentRun.objects.filter(ticket=ticket).count() == 1


def test_a_published_ticket_is_not_enqueued_again_until_its_hand_off_is_older_than_the_grace(file_ticket):
    # given a ticket whose run was enqueued (and is still waiting in the queue)
    ticket = file_ticket(hold_agent=True)
    Ticket.objects.filter(pk=ticket.pk).update(run_dispatched_at=timezone.now() + timedelta(seconds=50))
    with mock.patch.object(agent_run_ticket_task, "delay") as delay:
        with later(61):
            assert tickets_queued_sweep(older_than=timedelta(seconds=60)) == 0
        with later(120):
            assert tickets_queued_sweep(older_than=timedelta(seconds=60)) == 1
    delay.assert_called_once_with(ticket.pk)


def test_a_run_whose_lease_expired_is_enqueued_again(file_ticket):
    # given a ticket whose worker died mid-run (its lease expired)
    ticket = file_ticket(hold_agent=True)
    Ticket.objects.filter(pk=ticket.pk).update(status=Ticket.Status.RUNNING)
    AgentRun.objects.create(
        ticket=ticket,
        status=AgentRun.Status.RUNNING,
        provider="offline",
        claimed_by="dead",
        lease_expires_at=timezone.now() - timedelta(seconds=1),
    )
    # when the sweep runs, the ticket is enqueued again and the new task takes the run over
    assert agent_runs_lease_expired_sweep() == 1
    ticket.refresh_from_db()
    assert ticket.status != Ticket.Status.RUNNING
    assert AgentRun.objects.get(ticket=ticket).claimed_by != "dead"


def test_a_live_lease_is_left_alone(file_ticket):
    ticket = file_ticket(hold_agent=True)
    Ticket.objects.filter(pk=ticket.pk).update(status=Ticket.Status.RUNNING)
    AgentRun.objects.create(
        ticket=ticket,
        status=AgentRun.Status.RUNNING,
        provider="offline",
        claimed_by="alive",
        lease_expires_at=timezone.now() + timedelta(seconds=60),
    )
    with mock.patch.object(agent_run_ticket_task, "delay") as delay:
        assert agent_runs_lease_expired_sweep() == 0
    delay.assert_not_called()


def test_the_sweep_runs_every_minute_on_beat_and_is_editable_in_the_admin(admin_client):
    task = PeriodicTask.objects.get(task="refundagent.sweep.outbox_sweep_task")
    assert task.enabled and (task.interval.every, task.interval.period) == (1, "minutes")
    assert outbox_sweep_task.name == task.task
    assert admin_client.get(f"/admin/django_celery_beat/periodictask/{task.pk}/change/").status_code == 200
