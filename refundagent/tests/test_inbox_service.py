"""The inbox's one service: a message files a ticket, joins one, or (stored already) changes nothing.
Who the sender is decides whether the agent may touch it."""

import threading

import pytest
from django.db import connection

from ledger.models import Customer, Tenant
from refundagent.inbox.services import inbound_message_receive
from refundagent.models import Ticket, TicketMessage, TraceEvent

pytestmark = pytest.mark.django_db


def receive(tenant, **fields):
    defaults = dict(
        source="email",
        sender="ada@example.com",
        sender_verified=True,
        subject="Broken kettle",
        text="My kettle arrived broken. Please refund it.",
        message_id="<m1@mail.example.com>",
    )
    return inbound_message_receive(tenant=tenant, **(defaults | fields))


def test_a_verified_known_customer_files_one_customer_level_ticket_queued_for_the_agent(
    tenant, customer, django_capture_on_commit_callbacks
):
    # When Ada writes from her own, verified address
    with django_capture_on_commit_callbacks() as queued:
        result = receive(tenant, sender="ADA@example.com")

    # Then one customer-level ticket of hers is queued, with the message in its conversation
    ticket = result.ticket
    assert (result.created, result.duplicate) == (True, False)
    assert (ticket.customer, ticket.order, ticket.source, ticket.created_by) == (customer, None, "email", None)
    assert ticket.status == Ticket.Status.QUEUED and ticket.currency == ""
    assert ticket.message == "Broken kettle\n\nMy kettle arrived broken. Please refund it."
    message = TicketMessage.objects.get()
    assert (message.ticket, message.direction, message.message_id) == (ticket, "in", "m1@mail.example.com")
    # and the agent run is handed over after commit (the outbox's hand-off)
    assert len(queued) == 1
    assert TraceEvent.objects.filter(ticket=ticket, decision="filed").count() == 1


@pytest.mark.parametrize(
    ("sender", "verified", "why"),
    [
        ("mallory@example.net", True, "no customer has this email address"),
        ("ada@example.com", False, "the sender's address could not be verified"),
        ("", True, "no customer has this email address"),
    ],
)
def test_an_unknown_or_unverified_sender_gets_an_escalated_ticket_without_customer(
    tenant, customer, django_capture_on_commit_callbacks, sender, verified, why
):
    with django_capture_on_commit_callbacks() as queued:
        ticket = receive(tenant, sender=sender, sender_verified=verified).ticket

    assert ticket.customer is None and ticket.status == Ticket.Status.ESCALATED
    assert why in ticket.stop_detail
    assert ticket.awaiting_person_since is not None
    assert not queued  # no agent run


def test_two_customers_with_one_address_are_not_guessed_between(tenant, customer):
    Customer.objects.create(tenant=tenant, external_id="CUST-2", name="Ada B", email="ada@example.com")

    ticket = receive(tenant).ticket

    assert ticket.customer is None and "more than one customer" in ticket.stop_detail


def test_a_message_with_no_text_is_an_escalated_ticket(tenant, customer):
    ticket = receive(tenant, text="   ", subject="").ticket

    assert ticket.status == Ticket.Status.ESCALATED and "no text" in ticket.stop_detail


def test_a_text_over_the_limit_is_kept_up_to_it_and_escalated(tenant, customer, settings):
    settings.INBOX_MAX_TEXT_CHARS = 100

    ticket = receive(tenant, text="x" * 500).ticket

    assert ticket.status == Ticket.Status.ESCALATED and "longer than 100" in ticket.stop_detail
    assert len(TicketMessage.objects.get().text) == 100


def test_one_message_id_is_stored_once(tenant, customer):
    first = receive(tenant)
    again = receive(tenant, message_id="m1@mail.example.com", text="something else")

    assert again.duplicate and not again.created and again.ticket == first.ticket
    assert Ticket.objects.count() == 1 and TicketMessage.objects.count() == 1


def test_a_repeat_files_nothing_and_queues_no_second_agent_run(tenant, customer, django_capture_on_commit_callbacks):
    # Given Ada's message, filed and queued
    first = receive(tenant)
    events = TraceEvent.objects.count()

    # When the provider posts it again (nothing looks for it first: the insert's constraint finds it)
    with django_capture_on_commit_callbacks() as queued:
        again = receive(tenant)

    # Then the filing it began is rolled back whole: no ticket, no event, no agent run handed over
    assert again.duplicate and again.ticket == first.ticket
    assert queued == []
    assert Ticket.objects.count() == 1 and TicketMessage.objects.count() == 1
    assert TraceEvent.objects.count() == events


def test_a_repeat_of_a_reply_writes_no_second_event(tenant, customer):
    ticket = receive(tenant).ticket
    reply = dict(message_id="<m2@x>", in_reply_to="<m1@mail.example.com>", subject="Re: kettle")
    receive(tenant, **reply)
    events = TraceEvent.objects.filter(ticket=ticket).count()

    again = receive(tenant, **reply)

    assert again.duplicate and again.ticket == ticket
    assert ticket.messages.count() == 2 and TraceEvent.objects.filter(ticket=ticket).count() == events


def test_one_external_ref_is_one_ticket(tenant, customer):
    first = receive(tenant, source="zendesk", message_id="", external_ref="5001")
    again = receive(tenant, source="zendesk", message_id="", external_ref="5001")

    assert again.duplicate and again.ticket == first.ticket and Ticket.objects.count() == 1


def test_a_reply_by_in_reply_to_or_references_joins_its_ticket(tenant, customer):
    ticket = receive(tenant).ticket

    by_header = receive(tenant, message_id="<m2@x>", in_reply_to="<m1@mail.example.com>", subject="Re: kettle")
    by_refs = receive(tenant, message_id="<m3@x>", references=["<zzz@x> <m2@x>"], sender="other@example.net")

    assert by_header.ticket == by_refs.ticket == ticket and not by_header.created
    assert Ticket.objects.count() == 1
    assert list(ticket.messages.values_list("message_id", flat=True)) == ["m1@mail.example.com", "m2@x", "m3@x"]


def test_a_reply_naming_another_tenants_message_files_a_new_ticket(tenant, customer):
    other = Tenant.objects.create(slug="other", name="Other")
    Customer.objects.create(tenant=other, external_id="O-1", name="Ada", email="ada@example.com")
    theirs = receive(other, message_id="<theirs@x>").ticket

    ours = receive(tenant, message_id="<ours@x>", in_reply_to="<theirs@x>").ticket

    assert ours != theirs and ours.tenant == tenant and theirs.messages.count() == 1


def test_a_subject_token_joins_only_for_the_tickets_own_verified_customer(tenant, customer):
    ticket = receive(tenant).ticket
    Customer.objects.create(tenant=tenant, external_id="CUST-2", name="Bob", email="bob@example.com")
    subject = f"Re: your refund [#{ticket.pk}]"

    own = receive(tenant, message_id="<a@x>", subject=subject)
    stranger = receive(tenant, message_id="<b@x>", subject=subject, sender="bob@example.com")
    unverified = receive(tenant, message_id="<c@x>", subject=subject, sender_verified=False)

    assert own.ticket == ticket and not own.created
    assert stranger.created and stranger.ticket.customer.external_id == "CUST-2"
    assert unverified.created and unverified.ticket.customer is None


def test_attachments_are_listed_never_stored_and_large_ones_skipped(tenant, customer, settings):
    settings.INBOX_MAX_ATTACHMENT_BYTES = 1000

    receive(
        tenant,
        attachments=[
            {"name": "photo.jpg", "size": 500, "content_type": "image/jpeg"},
            {"name": "video.mp4", "size": 5000, "content_type": "video/mp4"},
        ],
    )

    assert TicketMessage.objects.get().attachments == [
        {"name": "photo.jpg", "size": 500, "content_type": "image/jpeg"},
        {"name": "video.mp4", "size": 5000, "content_type": "video/mp4", "skipped": True},
    ]


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize("key", ["message_id", "external_ref"])
def test_one_message_delivered_at_once_by_two_workers_is_one_ticket(key):
    # Given a tenant and its customer, committed (each thread has its own connection)
    tenant = Tenant.objects.create(slug="race", name="Race")
    Customer.objects.create(tenant=tenant, external_id="C-1", name="Ada", email="ada@example.com")
    fields = {"message_id": "<race@x>"} if key == "message_id" else {"message_id": "", "external_ref": "77"}
    barrier = threading.Barrier(4)
    results, errors = [], []

    def deliver():
        try:
            barrier.wait()
            results.append(receive(tenant, source="zendesk" if key == "external_ref" else "email", **fields))
        except Exception as exc:  # noqa: BLE001 - reported below
            errors.append(exc)
        finally:
            connection.close()

    # When four workers deliver it at the same moment
    threads = [threading.Thread(target=deliver) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()

    # Then one ticket and one message; the others answered with it as a duplicate
    assert not errors
    assert Ticket.objects.count() == 1 and TicketMessage.objects.count() == 1
    assert sum(r.created for r in results) == 1 and sum(r.duplicate for r in results) == 3
    assert {r.ticket.pk for r in results} == {Ticket.objects.get().pk}


def test_a_ticket_without_a_customer_is_never_a_refund_path(tenant, customer, make_user, make_order):
    # Given an escalated ticket from an unknown sender, which someone puts back in the agent's queue
    from refundagent.exceptions import TicketStateConflict
    from refundagent.services import ticket_refund_propose
    from refundagent.ticket_state import ticket_transition

    from .scripted_runs import run

    make_order("100.00", external_id="ORD-X")
    ticket = receive(tenant, sender="mallory@example.net").ticket
    assert ticket_transition(ticket=ticket, to=Ticket.Status.QUEUED, detail="queued by mistake")

    # When the agent runs on it (a model that would list orders and draft a refund)
    ticket, agent_run = run(ticket, [{"tool": "orders_list_customer_orders", "input": {}}])

    # Then it stops before the model is called, back with a person
    assert ticket.status == Ticket.Status.ESCALATED and "no customer" in ticket.stop_detail
    assert agent_run.messages in ([], None) or not any(m.get("role") == "assistant" for m in agent_run.messages)
    # and a person cannot propose a refund on it either
    with pytest.raises(TicketStateConflict) as refused:
        ticket_refund_propose(ticket=ticket, user=make_user("fin", "finance"), amount="10.00", order="ORD-X")
    assert refused.value.code == "no_customer"
