"""What goes back to Zendesk, through the fake Zendesk over HTTP: one internal note per outcome
of a Zendesk ticket (written where every outcome passes, ticket_transition), exactly once even
after a lost answer; a 429's Retry-After honoured; Zendesk down then back: every note once, in
order; the reviewed reply as a public comment only when it may be sent, once per outcome, and
never an email for a Zendesk ticket."""

import json
import time
from datetime import timedelta
from decimal import Decimal

import pytest
from django.utils import timezone

from approvals.gate import Proposal, policy_current, policy_gate_evaluate
from approvals.services.requests import approval_request_create
from refundagent.models import AgentRun, RefundDraft, Ticket, TicketReply
from refundagent.services import ticket_escalate
from refundagent.tests.payments_support import approve
from refundagent.ticket_state import ticket_transition
from refundagent.zendesk.models import ZendeskWrite
from refundagent.zendesk.writeback import zendesk_outcome_record, zendesk_write_deliver, zendesk_writes_sweep
from tests.factories import manual_payout_record

pytestmark = pytest.mark.django_db


@pytest.fixture
def shop(policy, make_order, make_user, settings, zendesk_connection):
    settings.PAYMENT_GATEWAY = "manual"
    settings.ZENDESK_RETRY_SECONDS = 60
    settings.EMAIL_RETRY_SECONDS = 0
    return {
        "order": make_order("100.00", external_id="ORD-ZD", payment_ref="pi_zd123456"),
        "support": make_user("support", "support"),
        "finance": make_user("finance", "finance"),
    }


def zendesk_ticket(shop, fake_zendesk, *, status=Ticket.Status.RUNNING):
    """A Zendesk ticket in the fake, and its product ticket (source zendesk) held by the agent."""
    order = shop["order"]
    requester = fake_zendesk.add_user(order.customer.email)
    zd = fake_zendesk.add_ticket(requester_id=requester["id"])
    ticket = Ticket.objects.create(
        tenant=order.tenant,
        order=order,
        customer=order.customer,
        message="Refund please.",
        currency=order.currency,
        status=status,
        source="zendesk",
        external_ref=str(zd["id"]),
    )
    return ticket, zd["id"]


def gate(ticket, shop, amount: str, key="zd-1"):
    """The gate's verdict on a refund of `amount`, its draft, and the request when it allows one."""
    order = shop["order"]
    policy = policy_current(order.tenant)
    verdict = policy_gate_evaluate(
        order=order,
        policy=policy,
        now=timezone.now(),
        item_ids=[],
        refund_to=None,
        proposal=Proposal(recommendation="refund", amount=Decimal(amount), policy_version=policy.version),
    )
    run = AgentRun.objects.create(ticket=ticket, provider="scripted", status=AgentRun.Status.STOPPED)
    RefundDraft.objects.create(
        run=run,
        ticket=ticket,
        recommendation="refund",
        amount=Decimal(amount),
        currency=order.currency,
        gate_verdict=verdict.as_dict(),
    )
    request = None
    if verdict.outcome == "approval_required":
        request, _ = approval_request_create(
            order=order,
            policy=policy,
            verdict=verdict,
            idempotency_key=key,
            requested_by=shop["support"],
            ticket_ref=ticket.pk,
        )
    return verdict, request


def sweep_when_due():
    """The retry's wait is over (no test sleeps it out), then the sweep runs."""
    ZendeskWrite.objects.filter(status__in=["pending", "retrying"]).update(next_attempt_at=timezone.now())
    return zendesk_writes_sweep(older_than=timedelta(0))


def notes(fake_zendesk, zd_id):
    return [c for c in fake_zendesk.added_comments(zd_id) if c["public"] is False]


def public(fake_zendesk, zd_id):
    return [c for c in fake_zendesk.added_comments(zd_id) if c["public"] is True]


def test_a_note_at_each_outcome_exactly_once_with_the_reasons_and_the_review_link(
    shop, fake_zendesk, django_capture_on_commit_callbacks
):
    # Given a Zendesk ticket the gate sends to finance
    ticket, zd_id = zendesk_ticket(shop, fake_zendesk)
    verdict, request = gate(ticket, shop, "30.00")

    # When it moves to approval_required, finance approves, and the refund is paid
    with django_capture_on_commit_callbacks(execute=True):
        assert ticket_transition(ticket=ticket, to=Ticket.Status.APPROVAL_REQUIRED)
    with django_capture_on_commit_callbacks(execute=True):
        approve(request, shop["finance"])
    with django_capture_on_commit_callbacks(execute=True):
        manual_payout_record(request, reference="BANK-1")
    ticket.refresh_from_db()
    assert ticket.status == Ticket.Status.REFUNDED

    # Then Zendesk has two internal notes, in order: approval required, refunded (approved makes none)
    made = notes(fake_zendesk, zd_id)
    assert len(made) == 2 and public(fake_zendesk, zd_id) == []
    first, second = made
    assert first["body"].startswith(f"Refund agent, ticket #{ticket.pk}: Approval required")
    for reason in verdict.reasons:
        assert reason in first["body"]
    assert f"Approval request #{request.pk}: 30.00 USD" in first["body"]
    review = f"https://refunds.shop.example/admin/approvals/approvalrequest/{request.pk}/change/"
    assert f"Review: {review}" in first["body"]
    assert second["body"].startswith(f"Refund agent, ticket #{ticket.pk}: Refunded")
    assert f"https://refunds.shop.example/tickets/{ticket.pk}/" in second["body"]
    assert first["metadata"]["custom"]["refundagent_key"] == f"t{ticket.pk}:approval_required:r{request.pk}:note"
    # And each write is recorded as sent with Zendesk's comment id
    writes = list(ZendeskWrite.objects.order_by("id").values_list("outcome", "status", "zendesk_comment_id"))
    assert writes == [
        ("approval_required", "sent", first["id"]),
        ("refunded", "sent", second["id"]),
    ]


@pytest.mark.parametrize(
    "to, words",
    [
        (Ticket.Status.DENIED, "Denied"),
        (Ticket.Status.ESCALATED, "Escalated"),
    ],
)
def test_denied_and_escalated_leave_a_note(shop, fake_zendesk, django_capture_on_commit_callbacks, to, words):
    ticket, zd_id = zendesk_ticket(shop, fake_zendesk)

    with django_capture_on_commit_callbacks(execute=True):
        assert ticket_transition(ticket=ticket, to=to, detail="The order is outside the 30-day window.")

    (note,) = notes(fake_zendesk, zd_id)
    assert note["body"].startswith(f"Refund agent, ticket #{ticket.pk}: {words}")
    assert "Why it stopped: The order is outside the 30-day window." in note["body"]


def test_payment_failed_leaves_a_note(shop, fake_zendesk, django_capture_on_commit_callbacks):
    ticket, zd_id = zendesk_ticket(shop, fake_zendesk)
    _, request = gate(ticket, shop, "30.00")
    with django_capture_on_commit_callbacks(execute=True):
        ticket_transition(ticket=ticket, to=Ticket.Status.APPROVAL_REQUIRED)
        approve(request, shop["finance"])
    ticket.refresh_from_db()

    with django_capture_on_commit_callbacks(execute=True):
        assert ticket_transition(ticket=ticket, to=Ticket.Status.PAYMENT_FAILED, detail="card_declined")

    assert [n["body"].split(": ", 1)[1].split(":")[0] for n in notes(fake_zendesk, zd_id)] == [
        "Approval required",
        "Payment failed",
    ]


def test_a_ticket_not_from_zendesk_writes_nothing(shop, fake_zendesk, django_capture_on_commit_callbacks):
    ticket, _ = zendesk_ticket(shop, fake_zendesk)
    Ticket.objects.filter(pk=ticket.pk).update(source="web", external_ref="")
    ticket.refresh_from_db()

    with django_capture_on_commit_callbacks(execute=True):
        assert ticket_transition(ticket=ticket, to=Ticket.Status.ESCALATED)

    assert not ZendeskWrite.objects.exists() and fake_zendesk.puts() == []


def test_the_same_outcome_recorded_twice_and_delivered_twice_is_one_note(
    shop, fake_zendesk, django_capture_on_commit_callbacks
):
    ticket, zd_id = zendesk_ticket(shop, fake_zendesk)
    with django_capture_on_commit_callbacks(execute=True):
        ticket_transition(ticket=ticket, to=Ticket.Status.ESCALATED)
        zendesk_outcome_record(ticket=ticket, to=Ticket.Status.ESCALATED)
    write = ZendeskWrite.objects.get()

    zendesk_write_deliver(write_id=write.pk)
    zendesk_write_deliver(write_id=write.pk)

    assert len(notes(fake_zendesk, zd_id)) == 1 and len(fake_zendesk.puts()) == 1


def test_a_lost_answer_then_a_retry_makes_one_note(shop, fake_zendesk, django_capture_on_commit_callbacks):
    # Given Zendesk makes the note but the answer is lost
    ticket, zd_id = zendesk_ticket(shop, fake_zendesk)
    fake_zendesk.fail_next("drop")
    with django_capture_on_commit_callbacks(execute=True):
        ticket_transition(ticket=ticket, to=Ticket.Status.ESCALATED)
    write = ZendeskWrite.objects.get()
    assert write.status == ZendeskWrite.Status.RETRYING and len(notes(fake_zendesk, zd_id)) == 1

    # When the wait is over and the sweep hands it over again
    sweep_when_due()

    # Then the comments were read, the marker found, and nothing posted twice
    write.refresh_from_db()
    assert write.status == ZendeskWrite.Status.SENT and write.attempts == 2
    assert len(notes(fake_zendesk, zd_id)) == 1 and len(fake_zendesk.puts()) == 1
    assert write.zendesk_comment_id == notes(fake_zendesk, zd_id)[0]["id"]
    assert [c["path"] for c in fake_zendesk.calls][-1].endswith("/comments.json")


def test_a_5xx_is_retried_and_posts_once(shop, fake_zendesk, django_capture_on_commit_callbacks):
    ticket, zd_id = zendesk_ticket(shop, fake_zendesk)
    fake_zendesk.fail_next("500")
    with django_capture_on_commit_callbacks(execute=True):
        ticket_transition(ticket=ticket, to=Ticket.Status.ESCALATED)
    assert ZendeskWrite.objects.get().status == ZendeskWrite.Status.RETRYING

    sweep_when_due()

    assert ZendeskWrite.objects.get().status == ZendeskWrite.Status.SENT
    assert len(notes(fake_zendesk, zd_id)) == 1


def test_a_429_waits_its_retry_after(shop, fake_zendesk, django_capture_on_commit_callbacks):
    # Given Zendesk answers 429 with Retry-After: 30
    ticket, zd_id = zendesk_ticket(shop, fake_zendesk)
    fake_zendesk.retry_after = 30
    fake_zendesk.fail_next("429")

    # When the note is delivered (the re-queue runs at once here, eagerly: it must not call early)
    before = time.time()
    with django_capture_on_commit_callbacks(execute=True):
        ticket_transition(ticket=ticket, to=Ticket.Status.ESCALATED)
    zendesk_writes_sweep(older_than=timedelta(0))

    # Then one call was made and the next waits 30 s
    write = ZendeskWrite.objects.get()
    assert write.status == ZendeskWrite.Status.RETRYING and len(fake_zendesk.puts()) == 1
    assert 29 <= write.next_attempt_at.timestamp() - before <= 32
    assert notes(fake_zendesk, zd_id) == []

    # And once the wait is over it is delivered
    ZendeskWrite.objects.update(next_attempt_at=timezone.now())
    zendesk_write_deliver(write_id=write.pk)
    assert len(notes(fake_zendesk, zd_id)) == 1


def test_zendesk_down_then_back_delivers_every_note_once_in_order(
    shop, fake_zendesk, django_capture_on_commit_callbacks
):
    # Given Zendesk is down while a ticket goes to finance, is escalated by a person, and another ticket too
    fake_zendesk.down = True
    ticket, zd_id = zendesk_ticket(shop, fake_zendesk)
    _, request = gate(ticket, shop, "30.00")
    other, other_zd = zendesk_ticket(shop, fake_zendesk)
    with django_capture_on_commit_callbacks(execute=True):
        ticket_transition(ticket=ticket, to=Ticket.Status.APPROVAL_REQUIRED)
    with django_capture_on_commit_callbacks(execute=True):
        ticket_escalate(ticket=ticket, user=shop["support"], note="the customer called")
    with django_capture_on_commit_callbacks(execute=True):
        ticket_transition(ticket=other, to=Ticket.Status.DENIED)
    for _ in range(3):
        sweep_when_due()
    assert fake_zendesk.added_comments(zd_id) == [] and fake_zendesk.added_comments(other_zd) == []
    assert set(ZendeskWrite.objects.values_list("status", flat=True)) <= {"pending", "retrying"}

    # When Zendesk is back and the sweep runs
    fake_zendesk.down = False
    for _ in range(3):
        sweep_when_due()

    # Then every note is there once, in the order of the outcomes
    bodies = [n["body"] for n in notes(fake_zendesk, zd_id)]
    assert len(bodies) == 2
    assert "Approval required" in bodies[0] and "Escalated" in bodies[1]
    assert "Escalated by support: the customer called" in bodies[1]
    assert len(notes(fake_zendesk, other_zd)) == 1
    assert set(ZendeskWrite.objects.values_list("status", flat=True)) == {"sent"}


def test_a_later_note_waits_behind_an_earlier_one_of_its_ticket(shop, fake_zendesk, django_capture_on_commit_callbacks):
    ticket, zd_id = zendesk_ticket(shop, fake_zendesk)
    fake_zendesk.down = True
    with django_capture_on_commit_callbacks(execute=True):
        ticket_transition(ticket=ticket, to=Ticket.Status.ESCALATED)
    with django_capture_on_commit_callbacks(execute=True):
        ticket_transition(ticket=ticket, to=Ticket.Status.CLOSED)
        ticket.refresh_from_db()
    first = ZendeskWrite.objects.get()
    fake_zendesk.down = False
    second = ZendeskWrite.objects.create(
        tenant=ticket.tenant,
        ticket=ticket,
        zendesk_ticket_id=int(ticket.external_ref),
        kind="note",
        outcome="denied",
        key="later",
        body="later",
    )

    # The later one is not delivered while the first is owed
    zendesk_write_deliver(write_id=second.pk)
    second.refresh_from_db()
    assert second.status == ZendeskWrite.Status.PENDING and second.attempts == 0
    assert len(fake_zendesk.puts()) == 1  # the first's attempt while Zendesk was down

    # Delivering the first hands the second over
    ZendeskWrite.objects.filter(pk=first.pk).update(next_attempt_at=timezone.now())
    zendesk_write_deliver(write_id=first.pk)
    assert [c["body"] for c in notes(fake_zendesk, zd_id)][-1] == "later"
    assert ZendeskWrite.objects.filter(status="sent").count() == 2


def test_a_refused_write_fails_for_a_person(shop, fake_zendesk, django_capture_on_commit_callbacks):
    ticket, _ = zendesk_ticket(shop, fake_zendesk)
    Ticket.objects.filter(pk=ticket.pk).update(external_ref="999999")  # no such Zendesk ticket
    ticket.refresh_from_db()

    with django_capture_on_commit_callbacks(execute=True):
        ticket_transition(ticket=ticket, to=Ticket.Status.ESCALATED)

    write = ZendeskWrite.objects.get()
    assert write.status == ZendeskWrite.Status.FAILED and "404" in write.last_error


# --- the public reply --------------------------------------------------------------------------------


@pytest.fixture
def refunded(shop, fake_zendesk, django_capture_on_commit_callbacks):
    ticket, zd_id = zendesk_ticket(shop, fake_zendesk)
    _, request = gate(ticket, shop, "30.00")
    with django_capture_on_commit_callbacks(execute=True):
        ticket_transition(ticket=ticket, to=Ticket.Status.APPROVAL_REQUIRED)
        approve(request, shop["finance"])
    ticket.refresh_from_db()
    return ticket, zd_id, request


def send(client, ticket, capture, body=None):
    with capture(execute=True):
        return client.post(f"/api/tickets/{ticket.pk}/reply", json.dumps(body or {}), content_type="application/json")


def test_the_reply_is_a_public_comment_once_per_outcome_and_never_an_email(
    shop, refunded, fake_zendesk, api_client, smtp_server, django_capture_on_commit_callbacks
):
    ticket, zd_id, request = refunded
    client = api_client(shop["support"])

    # Before the refund is paid: refused, nothing posted
    early = send(client, ticket, django_capture_on_commit_callbacks)
    assert early.status_code == 409 and public(fake_zendesk, zd_id) == []

    # Once it is paid: one public comment with the outcome's reply, and no email
    with django_capture_on_commit_callbacks(execute=True):
        manual_payout_record(request, reference="BANK-2")
    first = send(client, ticket, django_capture_on_commit_callbacks)
    again = send(client, ticket, django_capture_on_commit_callbacks, {"text": "Another text"})

    assert first.status_code == 202, first.content
    assert again.status_code == 200
    (comment,) = public(fake_zendesk, zd_id)
    ticket.refresh_from_db()
    assert comment["body"] == ticket.customer_reply and "refunded 30.00 USD" in comment["body"]
    assert smtp_server.messages == []
    assert TicketReply.objects.get().status == TicketReply.Status.SENT


def test_a_lost_answer_on_the_reply_then_a_retry_makes_one_comment(
    shop, refunded, fake_zendesk, api_client, smtp_server, settings, django_capture_on_commit_callbacks
):
    ticket, zd_id, request = refunded
    settings.SWEEP_GRACE_SECONDS = 0
    with django_capture_on_commit_callbacks(execute=True):
        manual_payout_record(request, reference="BANK-3")
    fake_zendesk.fail_next("drop")

    response = send(api_client(shop["support"]), ticket, django_capture_on_commit_callbacks)

    # The eager retry ran at once: it read the comments, found the first, posted nothing more
    assert response.status_code == 202
    assert len(public(fake_zendesk, zd_id)) == 1 and len(fake_zendesk.puts()) == 3  # two notes, one reply
    assert TicketReply.objects.get().status == TicketReply.Status.SENT
    assert smtp_server.messages == []


def test_the_ticket_page_shows_the_write_back_status(shop, fake_zendesk, client, django_capture_on_commit_callbacks):
    ticket, zd_id = zendesk_ticket(shop, fake_zendesk)
    fake_zendesk.fail_next("503")
    with django_capture_on_commit_callbacks(execute=True):
        ticket_transition(ticket=ticket, to=Ticket.Status.ESCALATED)
    client.force_login(shop["support"])

    waiting = client.get(f"/tickets/{ticket.pk}/").content.decode()
    sweep_when_due()
    delivered = client.get(f"/tickets/{ticket.pk}/").content.decode()

    assert f"Zendesk ticket #{zd_id}" in waiting and 'id="zendesk-writes"' in waiting
    assert "retrying (Zendesk answered 503" in waiting
    assert "retrying" not in delivered and ">sent<" in delivered


def test_the_page_of_a_web_ticket_has_no_zendesk_card(shop, fake_zendesk, client):
    ticket, _ = zendesk_ticket(shop, fake_zendesk)
    Ticket.objects.filter(pk=ticket.pk).update(source="web", external_ref="")
    client.force_login(shop["support"])

    page = client.get(f"/tickets/{ticket.pk}/").content.decode()

    assert 'id="zendesk"' not in page


def test_the_token_and_secret_are_in_no_api_answer_trace_or_error(
    shop, fake_zendesk, api_client, zendesk_connection, caplog, django_capture_on_commit_callbacks
):
    from refundagent.models import TraceEvent

    from .zendesk_support import API_TOKEN, WEBHOOK_SECRET

    # Given a note refused because the token was revoked at Zendesk
    ticket, _ = zendesk_ticket(shop, fake_zendesk)
    fake_zendesk.agents.clear()
    with django_capture_on_commit_callbacks(execute=True):
        ticket_transition(ticket=ticket, to=Ticket.Status.ESCALATED)
    write = ZendeskWrite.objects.get()
    assert write.status == ZendeskWrite.Status.FAILED and "401" in write.last_error

    # Then neither secret is in the ticket's API answer, its trace, the row's error or the logs
    answer = api_client(shop["support"]).get(f"/api/tickets/{ticket.pk}").content.decode()
    trace = json.dumps(list(TraceEvent.objects.filter(ticket=ticket).values("reason", "data")))
    for secret in (API_TOKEN, WEBHOOK_SECRET):
        assert secret not in answer and secret not in trace
        assert secret not in write.last_error and secret not in caplog.text


def test_a_429_on_the_reply_waits_its_retry_after(
    shop, refunded, fake_zendesk, api_client, smtp_server, django_capture_on_commit_callbacks
):
    ticket, zd_id, request = refunded
    with django_capture_on_commit_callbacks(execute=True):
        manual_payout_record(request, reference="BANK-4")
    fake_zendesk.retry_after = 120
    fake_zendesk.fail_next("429")

    before = time.time()
    response = send(api_client(shop["support"]), ticket, django_capture_on_commit_callbacks)

    # The eager re-queue ran at once and found the reply not due: no second call, nothing posted
    assert response.status_code == 202
    reply = TicketReply.objects.get()
    assert reply.status == TicketReply.Status.RETRYING and public(fake_zendesk, zd_id) == []
    assert 119 <= reply.next_attempt_at.timestamp() - before <= 123
    assert len(fake_zendesk.puts()) == 3  # two notes, one refused reply
    assert smtp_server.messages == []
