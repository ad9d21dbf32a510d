"""The escalation queue in the support UI: escalated, failed and payment-failed tickets, oldest
first, with their reason and owner; take, hand back, propose a refund and close with a reply, each
traced. Django's test client posts the forms as the browser would. Every test builds its own shop."""

from datetime import timedelta

import pytest
from django.urls import reverse
from django.utils import timezone

from approvals.models import ApprovalRequest
from refundagent.models import QUEUE_STATUSES, Ticket
from tests.helpers import signed_in

pytestmark = pytest.mark.django_db


# The shop's people this module works with (conftest.STAFF).
PEOPLE = ("support", "support2", "finance")


@pytest.fixture
def queue(people, customer, make_order):
    """Three tickets in the queue (filed and escalated 3 days ago, failed 2, payment_failed 1) and one refunded."""

    def ticket(status, days_ago, stop_reason=None, detail=""):
        return ticket_filed(
            order=make_order("120.00", days_old=60),
            customer=customer,
            by=people["support"],
            status=status,
            since=timezone.now() - timedelta(days=days_ago),
            stop_reason=stop_reason,
            detail=detail,
        )

    return {
        "escalated": ticket("escalated", 3, "budget_exhausted", "The agent ran out of steps."),
        "failed": ticket("failed", 2, "failed", "The model provider failed."),
        "payment_failed": ticket("payment_failed", 1, "failed", "The provider refused the payout."),
        "refunded": ticket("refunded", 4),
    }


def ticket_filed(*, order, customer, by, status, since, stop_reason=None, detail="") -> Ticket:
    """A ticket in `status`, filed at `since` and, in a queue status, waiting for a person since then."""
    made = Ticket.objects.create(
        tenant=order.tenant,
        order=order,
        customer=customer,
        message="Help.",
        currency="USD",
        created_by=by,
        status=status,
        stop_reason=stop_reason,
        stop_detail=detail,
    )
    waiting = since if status in QUEUE_STATUSES else None
    Ticket.objects.filter(pk=made.pk).update(created_at=since, awaiting_person_since=waiting)
    return made


def queue_ids(html: str, tickets) -> list[int]:
    return sorted(
        (t.pk for t in tickets if f'data-ticket="{t.pk}"' in html), key=lambda pk: html.index(f'data-ticket="{pk}"')
    )


def test_the_queue_lists_what_a_person_must_finish_oldest_first_with_reason_age_and_owner(queue, people, client):
    # given three queued tickets and a refunded one, the failed one taken by support2
    Ticket.objects.filter(pk=queue["failed"].pk).update(owner=people["support2"])
    client = signed_in(people["support"], client)
    # when support opens the queue
    response = client.get(reverse("ticket_queue"))
    html = response.content.decode()
    # then the three queued tickets, oldest first, with their reason in plain words, age and owner
    assert response.status_code == 200
    assert queue_ids(html, queue.values()) == [queue["escalated"].pk, queue["failed"].pk, queue["payment_failed"].pk]
    assert "Escalated: the agent or finance handed it to a person" in html
    assert "The agent ran out of steps" in html and "Payment failed: the provider refused the payout" in html
    assert "3\xa0days" in html and "support2" in html
    assert reverse("ticket_queue") in client.get(reverse("tickets")).content.decode()  # linked from the nav
    # when filtered by reason, by "mine" and by "nobody yet"
    by_reason = client.get(reverse("ticket_queue"), {"reason": "payment_failed"}).content.decode()
    mine = signed_in(people["support2"], client).get(reverse("ticket_queue"), {"owner": "me"}).content.decode()
    nobody = client.get(reverse("ticket_queue"), {"owner": "none"}).content.decode()
    # then each shows only its tickets
    assert queue_ids(by_reason, queue.values()) == [queue["payment_failed"].pk]
    assert queue_ids(mine, queue.values()) == [queue["failed"].pk]
    assert queue_ids(nobody, queue.values()) == [queue["escalated"].pk, queue["payment_failed"].pk]


def test_take_hand_back_propose_and_close_through_the_ui_are_traced(queue, people, client):
    client = signed_in(people["support"], client)
    escalated, failed = queue["escalated"], queue["failed"]
    # when support takes the escalated ticket from the queue page
    response = client.post(
        reverse("ticket_assign", args=[escalated.pk]), {"to": "me", "next": reverse("ticket_queue")}, follow=True
    )
    # then it is theirs, shown to everyone on the queue and on the ticket
    assert response.status_code == 200
    escalated.refresh_from_db()
    assert escalated.owner == people["support"]
    other = signed_in(people["support2"])
    assert "owner: <strong>support</strong>" in other.get(reverse("ticket", args=[escalated.pk])).content.decode()
    # when they hand it back
    client.post(reverse("ticket_assign", args=[escalated.pk]), {"to": ""})
    escalated.refresh_from_db()
    assert escalated.owner is None

    # when they take it again and propose a policy exception from the ticket page's form
    client.post(reverse("ticket_assign", args=[escalated.pk]), {"to": "me"})
    html = client.get(reverse("ticket", args=[escalated.pk])).content.decode()
    assert 'id="propose-form"' in html and 'id="close-form"' in html
    response = client.post(
        reverse("ticket_propose", args=[escalated.pk]),
        {"amount": "60.00", "reason": "Goodwill: a loyal customer.", "exception": "on"},
        follow=True,
    )
    # then a human request for exactly 60.00 waits for two finance approvers, and the ticket waits for finance
    assert "proposed (request #" in response.content.decode()
    request = ApprovalRequest.objects.get(ticket_ref=escalated.pk)
    assert (request.origin, request.amount, request.requested_by, request.required_approvals) == (
        "human",
        60,
        people["support"],
        2,
    )
    escalated.refresh_from_db()
    assert escalated.status == "approval_required"

    # when they close the failed ticket with a reply and a note
    response = client.post(
        reverse("ticket_close", args=[failed.pk]),
        {"reply": "We have sent a replacement instead.", "note": "Replacement shipped."},
        follow=True,
    )
    # then it is closed and its reply is the person's
    failed.refresh_from_db()
    assert (failed.status, failed.customer_reply) == ("closed", "We have sent a replacement instead.")
    assert "We have sent a replacement instead." in response.content.decode()

    # and each action is in the traces, in order, shown on the ticket pages
    assert list(escalated.trace_events.order_by("seq").values_list("decision", flat=True)) == [
        "take",
        "hand_back",
        "take",
        "human_proposal",
    ]
    close = failed.trace_events.get(decision="close")
    assert "Replacement shipped." in close.reason and close.data["reply_written"] is True
    trace_html = client.get(reverse("ticket", args=[escalated.pk])).content.decode()
    assert "hand_back" in trace_html and "human_proposal" in trace_html


def test_a_refused_proposal_in_the_ui_shows_why_and_writes_nothing(queue, people, client):
    # given an escalated out-of-window ticket
    client = signed_in(people["support"], client)
    ticket = queue["escalated"]
    # when support proposes more than is refundable
    response = client.post(
        reverse("ticket_propose", args=[ticket.pk]), {"amount": "500.00", "reason": "x", "exception": "on"}, follow=True
    )
    # then the page says why and nothing was written
    assert "Not proposed:" in response.content.decode() and "still refundable" in response.content.decode()
    assert not ApprovalRequest.objects.exists()
    ticket.refresh_from_db()
    assert ticket.status == "escalated" and not ticket.trace_events.exists()


def test_an_invalid_queue_filter_lists_nothing_and_says_why(queue, people, client):
    # given three tickets in the queue
    # when the queue is asked for with a reason that is not one of its choices
    response = signed_in(people["support"], client).get(reverse("ticket_queue"), {"reason": "refunded", "owner": "me"})

    # then 400 with the error and no ticket listed (before: 200 and the whole queue)
    assert response.status_code == 400
    assert "Select a valid choice. refunded is not one of the available choices." in response.content.decode()
    assert queue_ids(response.content.decode(), queue.values()) == []


def test_the_admin_shows_the_queue_and_takes_tickets(queue, people, client):
    # given the queue, and finance in the admin
    client = signed_in(people["finance"], client)
    url = reverse("admin:refundagent_escalatedticket_changelist")
    # when finance opens the escalation queue in the admin
    html = client.get(url).content.decode()
    # then the three queued tickets are listed oldest first with their reason in words, the refunded one is not
    rows = [t.pk for t in (queue["escalated"], queue["failed"], queue["payment_failed"])]
    assert all(f'value="{pk}"' in html for pk in rows) and f'value="{queue["refunded"].pk}"' not in html
    assert html.index(f'value="{rows[0]}"') < html.index(f'value="{rows[1]}"') < html.index(f'value="{rows[2]}"')
    assert "Failed: the run or the refund&#x27;s verification went wrong" in html
    # when finance takes the failed ticket with the admin action
    client.post(url, {"action": "take", "_selected_action": [queue["failed"].pk]})
    # then it is theirs, traced, and the "mine" filter shows it alone
    queue["failed"].refresh_from_db()
    assert queue["failed"].owner == people["finance"]
    assert queue["failed"].trace_events.get().decision == "take"
    mine = client.get(url, {"owner": "me"}).content.decode()
    assert f'value="{queue["failed"].pk}"' in mine and f'value="{rows[0]}"' not in mine


def test_the_queue_pages_oldest_first_and_keeps_its_filter_on_the_links(people, customer, make_order, client):
    order = make_order("120.00", days_old=60)
    for n in range(22):
        since = timezone.now() - timedelta(hours=30 - n)
        ticket_filed(
            order=order,
            customer=customer,
            by=people["support"],
            status="escalated",
            since=since,
            stop_reason="escalated",
        )
    signed_in(people["support"], client)
    first = client.get(reverse("ticket_queue")).content.decode()
    second = client.get(reverse("ticket_queue"), {"page": 2}).content.decode()
    # oldest first: the next page holds the ones that have waited less
    assert "Page 1 of 2" in first and 'href="?page=2">Newer →</a>' in first and "← Older" not in first
    assert 'href="?page=1">← Older</a>' in second
    filtered = client.get(reverse("ticket_queue"), {"reason": "escalated"}).content.decode()
    assert 'href="?reason=escalated&amp;page=2">Newer →</a>' in filtered


def test_a_refused_proposal_keeps_what_was_typed_and_says_why_at_the_field_in_words(queue, people, client):
    # given an escalated ticket on an order placed 60 days ago (outside the 30-day window)
    client = signed_in(people["support"], client)
    ticket = queue["escalated"]
    # when support proposes more than is refundable, with a reason
    too_much = client.post(
        reverse("ticket_propose", args=[ticket.pk]), {"amount": "500.00", "reason": "Loyal customer, broken on arrival"}
    )
    # then the same page comes back (422) with the amount and the reason still in the form, the error at the amount
    assert too_much.status_code == 422
    html = too_much.content.decode()
    assert 'value="500.00"' in html and "Loyal customer, broken on arrival" in html
    assert "still refundable" in html.split('id="amount-errors"', 1)[1].split("</ul>", 1)[0]
    # when they propose an amount within what is refundable, without the exception box
    refused = client.post(
        reverse("ticket_propose", args=[ticket.pk]), {"amount": "50.00", "reason": "Loyal customer, broken on arrival"}
    )
    # then the gate's refusal is in words in the form, not raw codes, and the input is kept
    assert refused.status_code == 422
    html = refused.content.decode()
    form_html = html.split('id="propose-form"', 1)[1].split("</form>", 1)[0]
    assert 'value="50.00"' in form_html and "Loyal customer, broken on arrival" in form_html
    assert "refund window" in form_html
    assert "order_status" not in html and "outside: window" not in html
    assert not ApprovalRequest.objects.exists()
