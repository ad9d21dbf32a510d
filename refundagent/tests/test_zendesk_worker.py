"""Zendesk end to end on the real parts: PostgreSQL, Redis, a Celery worker subprocess and the
fake Zendesk over HTTP. A signed webhook is answered at once; the worker reads the requester,
files the ticket, runs the offline agent, and posts the outcome's note to the Zendesk ticket;
with Zendesk down the note waits and the sweep delivers it once Zendesk is back."""

import json
import time

import pytest

from ledger.models import Customer
from refundagent.models import Ticket
from refundagent.sweep import outbox_sweep
from refundagent.zendesk.models import ZendeskWrite

from .fake_zendesk import sign, ticket_created_event, zendesk_timestamp
from .zendesk_support import ACCOUNT_ID, WEBHOOK_SECRET

pytestmark = [pytest.mark.worker, pytest.mark.django_db(transaction=True)]


def wait_for(check, timeout=60.0):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = check()
        if value:
            return value
        time.sleep(0.3)
    return check()


@pytest.fixture
def worker(celery_worker_process, fake_zendesk):
    env = {
        "ZENDESK_API_BASE": fake_zendesk.url,
        "ZENDESK_RETRY_SECONDS": "1",
        "ZENDESK_RETRY_MAX_SECONDS": "2",
        "SITE_URL": "https://refunds.shop.example",
        "PAYMENT_GATEWAY": "manual",
    }
    return celery_worker_process.start(extra_env=env)


def deliver(client, payload):
    body = json.dumps(payload).encode()
    timestamp = zendesk_timestamp()
    return client.generic(
        "POST",
        "/webhooks/zendesk",
        body,
        content_type="application/json",
        HTTP_X_ZENDESK_WEBHOOK_SIGNATURE_TIMESTAMP=timestamp,
        HTTP_X_ZENDESK_WEBHOOK_SIGNATURE=sign(body, WEBHOOK_SECRET, timestamp),
    )


def test_a_zendesk_ticket_is_filed_by_the_worker_and_its_outcome_noted_once(
    client, zendesk_connection, fake_zendesk, policy, make_order, customer, worker
):
    # Given a customer Zendesk knows, with one order in the window, and a Zendesk ticket from her
    make_order("80.00", external_id="ORD-ZW", payment_ref="pi_zworker12345")
    requester = fake_zendesk.add_user(customer.email)
    zd = fake_zendesk.add_ticket(requester_id=requester["id"], description="My order arrived broken, refund please.")
    payload = ticket_created_event(
        account_id=ACCOUNT_ID,
        ticket_id=zd["id"],
        requester_id=requester["id"],
        subject="Broken",
        description=zd["description"],
    )

    # When Zendesk delivers the webhook twice
    first, again = deliver(client, payload), deliver(client, payload)

    # Then the worker files one ticket, the agent sends it to finance, and Zendesk gets one note
    assert first.status_code == 200 and again.status_code == 200
    ticket = wait_for(lambda: Ticket.objects.filter(source="zendesk", external_ref=str(zd["id"])).first())
    assert ticket is not None and ticket.customer == customer
    assert wait_for(lambda: ZendeskWrite.objects.filter(status="sent").exists())
    time.sleep(2)  # a duplicate hand-off would have posted by now
    ticket.refresh_from_db()
    assert ticket.status == Ticket.Status.APPROVAL_REQUIRED, ticket.stop_detail
    notes = [c for c in fake_zendesk.added_comments(zd["id"]) if not c["public"]]
    assert len(notes) == 1 and "Approval required" in notes[0]["body"]
    assert Ticket.objects.filter(source="zendesk").count() == 1


def test_zendesk_down_then_back_the_sweep_delivers_the_note_once(
    zendesk_connection, fake_zendesk, settings, worker, tenant
):
    # Given a Zendesk ticket escalated while Zendesk is down
    settings.SWEEP_GRACE_SECONDS = 0
    customer = Customer.objects.create(tenant=tenant, external_id="C-DOWN", name="Down", email="down@example.com")
    zd = fake_zendesk.add_ticket(requester_id=fake_zendesk.add_user(customer.email)["id"])
    ticket = Ticket.objects.create(
        tenant=tenant, customer=customer, message="x", currency="", source="zendesk", external_ref=str(zd["id"])
    )
    fake_zendesk.down = True
    from refundagent.ticket_state import ticket_transition

    ticket_transition(ticket=ticket, to=Ticket.Status.ESCALATED, detail="Unknown sender.")
    assert wait_for(lambda: ZendeskWrite.objects.filter(status="retrying").exists())

    # When Zendesk is back and the sweep runs (beat's job)
    fake_zendesk.down = False
    time.sleep(2)
    outbox_sweep()

    # Then the note is delivered once
    assert wait_for(lambda: ZendeskWrite.objects.filter(status="sent").exists())
    time.sleep(2)
    assert len(fake_zendesk.added_comments(zd["id"])) == 1
