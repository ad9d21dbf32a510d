"""The refund destination, exact from filing to ledger: the ticket names one of the customer's
payment methods (or the original), the gate names the exact method in the approved args, the
execution writes exactly there and the evaluator checks it."""

from decimal import Decimal

import pytest
from django.urls import reverse

from approvals.destinations import approval_destination_resolve
from approvals.models import ApprovalRequest
from approvals.services.decisions import approval_request_decide
from approvals.services.execution import approval_execute
from approvals.services.verification import approval_verify
from ledger.exceptions import InvalidInput
from ledger.models import Customer, Order, PaymentMethod, RefundEntry, Tenant
from ledger.services import canonical_hash, ledger_refund_issue
from refundagent.agent.loop import agent_run_ticket
from refundagent.agent.prompts import ticket_facts
from refundagent.agent.providers.offline import OfflineProvider
from refundagent.agent.providers.scripted import ScriptedProvider
from refundagent.models import Ticket, TraceEvent
from refundagent.services import ticket_create
from tests.factories import refund_draft

GIFT_CARD = "gift_card_cust-1001"


@pytest.fixture
def other_customer_card(demo):
    """A gift card of another customer of the same tenant."""
    acme = Tenant.objects.get(slug="acme")
    customer = Customer.objects.create(tenant=acme, external_id="CUST-1002", name="Max Other", email="max@example.com")
    return PaymentMethod.objects.create(
        customer=customer, external_id="gift_card_other", kind="gift_card", balance=Decimal("10.00")
    )


@pytest.fixture
def ticket_defaults():
    return {"order": "ORD-5005", "items": ["ITEM-6"], "refund_to": GIFT_CARD, "message": "Please refund the socks."}


def scripted(ticket, turns):
    agent_run_ticket(
        ticket_id=ticket.pk,
        provider=ScriptedProvider(
            [
                {"tool": "orders_lookup_order", "input": {"order_id": ticket.order.external_id}},
                {"tool": "refund_policy_retrieve", "input": {}},
                *turns,
            ]
        ),
    )
    ticket.refresh_from_db()
    return ticket


# --- filing -------------------------------------------------------------------------------------


@pytest.mark.parametrize("refund_to", ["gift_card_other", "gift_card_cust-2001", "card_1881", "no_such_method"])
def test_the_api_refuses_a_payment_method_that_is_not_the_customers_and_writes_nothing(
    api_client, other_customer_card, refund_to
):
    # given a payment method of another customer (same tenant, other tenant) or none at all
    client = api_client("acme-support")
    tickets, events = Ticket.objects.count(), TraceEvent.objects.count()
    # when support files a ticket refunding to it
    response = client.post(
        "/api/tickets",
        {"order": "ORD-5001", "customer": "CUST-1001", "message": "Refund please.", "refund_to": refund_to},
        content_type="application/json",
    )
    # then 422 with the reason, and nothing is written
    assert response.status_code == 422
    assert response.json()["code"] == "unknown_payment_method"
    assert refund_to in response.json()["detail"]
    assert (Ticket.objects.count(), TraceEvent.objects.count()) == (tickets, events)


def test_the_service_refuses_another_customers_payment_method(user, other_customer_card):
    with pytest.raises(InvalidInput) as refused:
        ticket_create(
            user=user("acme-support"),
            order="ORD-5001",
            customer="CUST-1001",
            message="Refund please.",
            refund_to=other_customer_card.external_id,
        )
    assert refused.value.code == "unknown_payment_method"
    assert Ticket.objects.count() == 0


def test_the_api_files_and_shows_the_chosen_destination(api_client, django_capture_on_commit_callbacks):
    client = api_client("acme-support")
    with django_capture_on_commit_callbacks(execute=False):
        response = client.post(
            "/api/tickets",
            {
                "order": "ORD-5005",
                "customer": "CUST-1001",
                "message": "Socks.",
                "items": ["ITEM-6"],
                "refund_to": GIFT_CARD,
            },
            content_type="application/json",
        )
    assert response.status_code == 201
    assert (response.json()["refund_to"], response.json()["refund_to_kind"]) == (GIFT_CARD, "gift_card")
    shown = client.get(f"/api/tickets/{response.json()['id']}").json()
    assert (shown["refund_to"], shown["refund_to_kind"]) == (GIFT_CARD, "gift_card")
    # and without it: null, the original payment method
    with django_capture_on_commit_callbacks(execute=False):
        plain = client.post(
            "/api/tickets",
            {"order": "ORD-5001", "customer": "CUST-1001", "message": "Refund."},
            content_type="application/json",
        ).json()
    assert (plain["refund_to"], plain["refund_to_kind"]) == (None, None)


def test_the_web_form_files_the_destination_and_the_ticket_page_shows_it(
    client, user, django_capture_on_commit_callbacks
):
    client.force_login(user("acme-support"))
    form = {"order": "ORD-5005", "customer": "CUST-1001", "message": "Socks.", "items": "ITEM-6"}
    refused = client.post(reverse("ticket_new"), {**form, "refund_to": "gift_card_cust-2001"})
    assert refused.status_code == 422
    assert "is not a payment method of customer CUST-1001" in refused.content.decode()
    assert Ticket.objects.count() == 0
    with django_capture_on_commit_callbacks(execute=False):
        filed = client.post(reverse("ticket_new"), {**form, "refund_to": GIFT_CARD})
    assert filed.status_code == 302
    ticket = Ticket.objects.get()
    assert ticket.refund_to.external_id == GIFT_CARD
    page = client.get(reverse("ticket", args=[ticket.pk])).content.decode()
    assert "Refund to" in page and GIFT_CARD in page


def test_the_facts_name_the_destination(file_ticket, django_capture_on_commit_callbacks):
    with django_capture_on_commit_callbacks(execute=False):
        gift = file_ticket()
        original = file_ticket(order="ORD-5001", items=(), refund_to=None)
    assert {k: ticket_facts(gift)[k] for k in ("refund_to", "refund_to_kind", "destination")} == {
        "refund_to": GIFT_CARD,
        "refund_to_kind": "gift_card",
        "destination": "gift_card",
    }
    assert {k: ticket_facts(original)[k] for k in ("refund_to", "refund_to_kind", "destination")} == {
        "refund_to": None,
        "refund_to_kind": None,
        "destination": "original",
    }


# --- from the draft to the ledger ---------------------------------------------------------------


def test_a_gift_card_ticket_is_refunded_to_exactly_that_card_and_verified(
    file_ticket, user, django_capture_on_commit_callbacks
):
    # given a ticket refunding ORD-5005's socks to the customer's gift card, run by the offline planner
    ticket = file_ticket()
    agent_run_ticket(ticket_id=ticket.pk, provider=OfflineProvider())
    ticket.refresh_from_db()
    assert ticket.status == "approval_required", ticket.stop_detail
    # then the approval's args name that exact gift card
    request = ApprovalRequest.objects.get(ticket_ref=ticket.pk)
    assert (request.args["destination"], request.args["destination_method"]) == ("gift_card", GIFT_CARD)
    assert request.args_hash == canonical_hash(request.args)
    # when finance approves and the runtime executes (the task enqueued on commit)
    with django_capture_on_commit_callbacks(execute=True):
        approval_request_decide(
            request_id=request.pk, user=user("acme-finance"), decision="approve", args_hash=request.args_hash
        )
    request.refresh_from_db()
    # then the ledger entry went to that card, the evaluator verified it, the ticket is refunded
    entry = RefundEntry.objects.get(idempotency_key=request.idempotency_key)
    assert (entry.destination.external_id, entry.destination_kind, entry.amount) == (
        GIFT_CARD,
        "gift_card",
        Decimal("25.00"),
    )
    assert request.status == "executed", request.verification
    check = next(c for c in request.verification["checks"] if c["name"] == "destination_method_exact")
    assert check["ok"] and check["actual"] == GIFT_CARD
    ticket.refresh_from_db()
    assert ticket.status == "refunded"


def test_without_refund_to_the_args_name_the_orders_own_payment_method(file_ticket):
    ticket = file_ticket(order="ORD-5001", items=(), refund_to=None)
    agent_run_ticket(ticket_id=ticket.pk, provider=OfflineProvider())
    request = ApprovalRequest.objects.get(ticket_ref=ticket.pk)
    assert (request.args["destination"], request.args["destination_method"]) == ("original", "card_4242")


def test_a_model_that_drafts_original_on_a_gift_card_ticket_is_escalated(file_ticket):
    # given a gift-card ticket and a model that drafts the refund to the original method
    ticket = scripted(file_ticket(), [refund_draft("ORD-5005", "25.00", destination="original")])
    # then the gate escalates (never silently overrides), and no approval request exists
    assert ticket.status == "escalated"
    assert "destination_mismatch" in ticket.drafts.get().gate_verdict["codes"]
    assert not ApprovalRequest.objects.filter(ticket_ref=ticket.pk).exists()


def test_a_model_that_drafts_a_gift_card_on_an_original_ticket_is_escalated(file_ticket):
    ticket = scripted(file_ticket(refund_to=None), [refund_draft("ORD-5005", "25.00", destination="gift_card")])
    assert ticket.status == "escalated"
    assert "destination_mismatch" in ticket.drafts.get().gate_verdict["codes"]


def test_a_model_that_states_no_destination_gets_the_tickets(file_ticket):
    ticket = scripted(file_ticket(), [refund_draft("ORD-5005", "25.00", destination=None)])
    assert ticket.status == "approval_required", ticket.stop_detail
    assert ApprovalRequest.objects.get(ticket_ref=ticket.pk).args["destination_method"] == GIFT_CARD


def test_a_full_refund_to_a_gift_card_is_escalated_under_refund_policy_v4(file_ticket):
    # given a whole-order refund to a gift card: refund-policy-v4 allows full refunds only to the original
    ticket = scripted(
        file_ticket(order="ORD-5001", items=()), [refund_draft("ORD-5001", "120.00", destination="gift_card")]
    )
    # then the gate escalates, naming the rule
    assert ticket.status == "escalated"
    assert "destination_not_allowed" in ticket.drafts.get().gate_verdict["codes"]
    assert not ApprovalRequest.objects.filter(ticket_ref=ticket.pk).exists()
    # and the offline planner escalates it too
    planned = file_ticket(order="ORD-5001", items=())
    agent_run_ticket(ticket_id=planned.pk, provider=OfflineProvider())
    planned.refresh_from_db()
    assert planned.status == "escalated"
    assert not ApprovalRequest.objects.filter(ticket_ref=planned.pk).exists()


# --- execution and the evaluator ----------------------------------------------------------------


@pytest.fixture
def approved_gift_card_request(file_ticket, user, django_capture_on_commit_callbacks):
    ticket = file_ticket()
    agent_run_ticket(ticket_id=ticket.pk, provider=OfflineProvider())
    request = ApprovalRequest.objects.get(ticket_ref=ticket.pk)
    with django_capture_on_commit_callbacks(execute=False):
        approval_request_decide(
            request_id=request.pk, user=user("acme-finance"), decision="approve", args_hash=request.args_hash
        )
    request.refresh_from_db()
    assert request.status == "approved"
    return request


def test_verification_fails_when_the_entry_went_to_another_method(approved_gift_card_request):
    # given an approved refund to the gift card, but an entry under its key written to another gift card
    request = approved_gift_card_request
    order = Order.objects.get(pk=request.order_id)
    other_card = PaymentMethod.objects.create(
        customer=order.customer, external_id="gift_card_second", kind="gift_card", balance=Decimal("5.00")
    )
    ledger_refund_issue(
        order=order,
        amount=request.args["amount"],
        currency="USD",
        idempotency_key=request.idempotency_key,
        destination=other_card,
        destination_kind="gift_card",
        item_ids=["ITEM-6"],
        source=RefundEntry.Source.APPROVAL,
        approval_ref=str(request.pk),
    )
    # when the evaluator checks it
    verdict = approval_verify(request_id=request.pk)
    # then it fails on the destination (and on the tender leg the request names), with the evidence
    assert verdict["ok"] is False and verdict["failed"] == ["destination_method_exact", "leg_method"]
    check = next(c for c in verdict["checks"] if c["name"] == "destination_method_exact")
    assert (check["expected"], check["actual"]) == (GIFT_CARD, "gift_card_second")
    request.refresh_from_db()
    assert request.status == "failed"


def _request_with_args(request, **changes):
    """The same request with other args, stored consistently (args and hash), as an old or
    hand-made request would be."""
    args = {**request.args, **changes}
    for key, value in list(changes.items()):
        if value is ...:
            del args[key]
    ApprovalRequest.objects.filter(pk=request.pk).update(args=args, args_hash=canonical_hash(args))
    request.refresh_from_db()
    return request


@pytest.mark.parametrize(
    "method,code", [("gift_card_cust-2001", "foreign_destination"), ("card_4242", "destination_not_gift_card")]
)
def test_execution_refuses_a_method_that_is_not_the_customers_or_not_of_the_kind(
    approved_gift_card_request, method, code
):
    request = _request_with_args(approved_gift_card_request, destination_method=method)
    approval_execute(request_id=request.pk)
    request.refresh_from_db()
    assert request.status == "failed"
    assert (request.verification["stage"], request.verification["error"]) == ("execute", code)
    assert not RefundEntry.objects.filter(idempotency_key=request.idempotency_key).exists()


def test_an_original_destination_must_be_the_orders_own_method(approved_gift_card_request):
    request = _request_with_args(approved_gift_card_request, destination="original", destination_method=GIFT_CARD)
    with pytest.raises(InvalidInput) as refused:
        approval_destination_resolve(request=request)
    assert refused.value.code == "destination_not_original"


def test_old_format_args_without_a_method_still_execute_and_verify(approved_gift_card_request):
    # given a request made before methods were named: destination 'gift_card' only
    request = _request_with_args(approved_gift_card_request, destination_method=...)
    assert "destination_method" not in request.args
    # when it executes
    approval_execute(request_id=request.pk)
    # then it goes to the customer's gift card, as before, and verifies
    request.refresh_from_db()
    assert request.status == "executed", request.verification
    entry = RefundEntry.objects.get(idempotency_key=request.idempotency_key)
    assert entry.destination.external_id == GIFT_CARD


def test_a_replacement_request_keeps_the_destination(approved_gift_card_request):
    # given an approved gift-card refund, then the shop refunds something else on the order
    request = approved_gift_card_request
    order = Order.objects.get(pk=request.order_id)
    ledger_refund_issue(order=order, amount="10.00", currency="USD", idempotency_key="shop:late", source="import")
    # when the execution finds the facts changed
    approval_execute(request_id=request.pk)
    # then the replacement refunds to the same gift card
    request.refresh_from_db()
    assert request.status == "invalidated"
    assert (request.replaced_by.args["destination"], request.replaced_by.args["destination_method"]) == (
        "gift_card",
        GIFT_CARD,
    )
