"""Every operation under /api/ that takes a body takes a JSON object and nothing else: `true`,
`1`, `"hello"`, `[]`, `null` and `false` answer 422 (problem details) and write nothing. The
operations come from the OpenAPI document, so one added later is walked too."""

import json

import pytest

from approvals.models import ApprovalFollowUp, ApprovalRequest, ApprovalVote
from ledger.models import IdempotencyKey, RefundEntry, RefundEntryEvent
from refundagent.models import Ticket, TicketReply
from refundagent.tests.payments_support import approve, ticket_awaiting_approval

pytestmark = pytest.mark.django_db

NON_OBJECT_BODIES = ["true", "false", "1", "0", "1.5", '"hello"', '""', "[]", '[{"text": "hi"}]', "null"]
WRITTEN = [Ticket, TicketReply, ApprovalRequest, ApprovalVote, ApprovalFollowUp, RefundEntry, RefundEntryEvent]


def rows():
    counts = {model.__name__: model.objects.count() for model in WRITTEN}
    counts["IdempotencyKey"] = IdempotencyKey.objects.count()
    counts["states"] = (
        sorted(Ticket.objects.values_list("pk", "status", "owner_id", "updated_at")),
        sorted(ApprovalRequest.objects.values_list("pk", "status")),
        sorted(RefundEntry.objects.values_list("pk", "status", "provider_ref")),
    )
    return counts


@pytest.fixture
def world(policy, make_order, make_user, settings, django_capture_on_commit_callbacks):
    """A ticket awaiting approval (its request pending) and one whose refund waits for a manual
    payout: a valid body would write on each of them."""
    settings.PAYMENT_GATEWAY = "manual"
    support = make_user("support", "support")
    finance = make_user("finance", "finance")
    pending_ticket, pending_request = ticket_awaiting_approval(
        order=make_order("100.00"), filer=support, amount="30.00", key="bodies-1"
    )
    approved_ticket, approved_request = ticket_awaiting_approval(
        order=make_order("80.00"), filer=support, amount="20.00", key="bodies-2"
    )
    with django_capture_on_commit_callbacks(execute=True):
        approve(approved_request, finance)
    entry = RefundEntry.objects.get(approval_requests=approved_request)
    return {
        "user": make_user("both", "support", "finance"),
        "ids": {"ticket_id": pending_ticket.pk, "request_id": pending_request.pk, "refund_id": entry.pk},
    }


def operations_with_a_body(client):
    document = client.get("/api/openapi.json").json()
    for path, operations in document["paths"].items():
        for method, operation in operations.items():
            if "requestBody" in operation:
                yield path, method


def test_the_walk_sees_every_operation_that_takes_a_body(api_client, world):
    seen = set(operations_with_a_body(api_client(world["user"])))
    assert {
        ("/api/tickets", "post"),
        ("/api/tickets/{ticket_id}/proposal", "post"),
        ("/api/tickets/{ticket_id}/assign", "post"),
        ("/api/tickets/{ticket_id}/reply", "post"),
        ("/api/approvals/{request_id}/decision", "post"),
        ("/api/refunds/{refund_id}/paid", "post"),
    } <= seen


@pytest.mark.parametrize("body", NON_OBJECT_BODIES)
def test_a_body_that_is_not_an_object_is_refused_everywhere_and_writes_nothing(api_client, world, body):
    client = api_client(world["user"])
    operations = list(operations_with_a_body(client))
    assert operations
    before = rows()
    for path, method in operations:
        url = path.format(**world["ids"])
        response = getattr(client, method)(url, body, content_type="application/json")
        assert response.status_code == 422, (method, path, body, response.content)
        assert response["Content-Type"].startswith("application/problem+json")
        problem = response.json()
        assert problem["code"] == "invalid_input" and problem["status"] == 422
        assert "JSON object" in problem["detail"] + json.dumps(problem.get("errors")), problem
        assert rows() == before, (method, path, body)


def test_an_object_body_still_passes_the_same_base(api_client, world):
    """The refusal is of the shape only: an object is read as before (here it reaches the view,
    which answers for the ticket's state, not for the body's shape)."""
    client = api_client(world["user"])
    url = f"/api/tickets/{world['ids']['ticket_id']}/assign"
    response = client.post(url, json.dumps({"to": "me"}), content_type="application/json")
    assert response.json().get("code") != "invalid_input", response.content
