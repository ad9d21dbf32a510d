"""The reply's delivery on the real parts: PostgreSQL, Redis, a Celery worker subprocess and a
real SMTP server (aiosmtpd). One email per ticket and outcome whatever repeats: a double click,
a redelivered task, the sweep after a lost publish; a failing mail server is retried with backoff
and then shows as failed; a late failure prompts a correction that is sent once."""

import time
from unittest import mock

import pytest
from django.utils import timezone

from ledger.models import RefundEntry, RefundStatus
from ledger.services import ledger_refund_record_outcome, ledger_refund_record_paid
from refundagent.models import Ticket, TicketReply
from refundagent.sweep import outbox_sweep
from refundagent.tasks import ticket_reply_deliver_task
from refundagent.tests.payments_support import approve, ticket_awaiting_approval
from tests.helpers import wait_for

pytestmark = [pytest.mark.worker, pytest.mark.django_db(transaction=True)]


@pytest.fixture
def shop(policy, make_order, make_user, settings):
    settings.PAYMENT_GATEWAY = "manual"
    return {
        "order": make_order("100.00", external_id="ORD-W", payment_ref="pi_worker12345"),
        "support": make_user("support", "support"),
        "finance": make_user("finance", "finance"),
    }


@pytest.fixture
def worker(celery_worker_process, smtp_server):
    """A worker that sends to the test's SMTP server, retrying fast (1 s, then 2 s), three attempts."""
    env = {**smtp_server.env, "EMAIL_MAX_ATTEMPTS": "3", "EMAIL_RETRY_SECONDS": "1", "EMAIL_RETRY_MAX_SECONDS": "2"}
    return celery_worker_process.start(extra_env=env)


@pytest.fixture
def refunded(shop, worker):
    """A ticket whose refund finance approved (the worker executed it) and paid by hand."""
    ticket, request = ticket_awaiting_approval(order=shop["order"], filer=shop["support"], amount="30.00", key="w-1")
    approve(request, shop["finance"])
    entry = wait_for(lambda: RefundEntry.objects.filter(idempotency_key="w-1").first())
    assert entry is not None and entry.status == RefundStatus.PENDING
    ledger_refund_record_paid(entry_id=entry.pk, tenant=entry.tenant, reference="TRF-W1", user=shop["finance"])
    assert wait_for(lambda: Ticket.objects.get(pk=ticket.pk).status == Ticket.Status.REFUNDED)
    return ticket, request, entry


def click(client, ticket):
    return client.post(f"/api/tickets/{ticket.pk}/reply", "{}", content_type="application/json")


def sent(ticket, count=1):
    return wait_for(lambda: TicketReply.objects.filter(ticket=ticket, status="sent").count() >= count)


def test_a_double_click_and_a_redelivered_task_send_one_email(refunded, api_client, shop, smtp_server):
    ticket, _, _ = refunded
    client = api_client(shop["support"])

    assert [click(client, ticket).status_code, click(client, ticket).status_code] == [202, 200]
    assert sent(ticket)
    reply = TicketReply.objects.get(ticket=ticket)
    ticket_reply_deliver_task.delay(reply.pk)  # the broker delivers the task again
    time.sleep(3)

    assert len(smtp_server.messages) == 1
    assert smtp_server.messages[0]["message"]["Message-ID"] == reply.message_id


def test_the_sweep_delivers_a_reply_whose_publish_was_lost(refunded, api_client, shop, smtp_server, settings):
    ticket, _, _ = refunded
    # given a Send whose hand-off to the broker was lost
    with mock.patch.object(ticket_reply_deliver_task, "delay", side_effect=ConnectionError("broker down")):
        assert click(api_client(shop["support"]), ticket).status_code == 202
    time.sleep(2)
    assert smtp_server.messages == [] and TicketReply.objects.get().status == "queued"
    # when the sweep runs after the grace period (twice: an overlapping sweep)
    TicketReply.objects.update(created_at=timezone.now() - timezone.timedelta(minutes=5))
    assert outbox_sweep()["ticket_replies"] == 1
    assert sent(ticket)
    outbox_sweep()
    time.sleep(3)
    # then one email
    assert len(smtp_server.messages) == 1


def test_a_failing_smtp_server_is_retried_with_backoff_and_then_the_failure_shows(
    refunded, api_client, shop, smtp_server
):
    ticket, _, _ = refunded
    smtp_server.refuse(None)

    assert click(api_client(shop["support"]), ticket).status_code == 202

    assert wait_for(lambda: TicketReply.objects.get().status == "failed", timeout=60)
    reply = TicketReply.objects.get()
    assert (reply.attempts, smtp_server.refused, smtp_server.messages) == (3, 3, [])
    [shown] = api_client(shop["support"]).get(f"/api/tickets/{ticket.pk}").json()["replies"]
    assert shown["status"] == "failed" and "451" in shown["error"]


def test_a_late_failure_prompts_a_correction_that_is_sent_once(refunded, api_client, shop, smtp_server):
    ticket, request, entry = refunded
    client = api_client(shop["support"])
    assert click(client, ticket).status_code == 202
    assert sent(ticket)
    # when the refund fails after it was announced
    ledger_refund_record_outcome(entry_id=entry.pk, status=RefundStatus.FAILED, reason="bank returned it")
    assert wait_for(lambda: Ticket.objects.get(pk=ticket.pk).status != Ticket.Status.REFUNDED)
    due = client.get(f"/api/tickets/{ticket.pk}").json()["reply_due"]
    assert due["correction"] is True and due["told"] == "refunded"
    # then the correction goes once, whatever the clicks
    assert [click(client, ticket).status_code, click(client, ticket).status_code] == [202, 200]
    assert sent(ticket, 2)
    time.sleep(2)
    first, correction = smtp_server.messages
    assert first["message"]["Message-ID"] != correction["message"]["Message-ID"]
    assert "we have refunded" not in correction["message"].get_payload().lower()
