"""People finish what the agent could not: a refund proposed by a person on an escalated ticket
(POST /api/tickets/{id}/proposal) goes through the same approval, execution and ledger path as
the agent's, under the gate's hard limits; a policy exception needs a reason and two approvers,
never the proposer. Every test builds its own shop."""

import importlib
from datetime import timedelta
from decimal import Decimal

import pytest
from django.apps import apps
from django.urls import reverse
from django.utils import timezone

from approvals.models import ApprovalRequest, ApprovalVote, RefundPolicy
from approvals.review import review_sections
from approvals.services.refile import approval_request_payment_retry
from approvals.services.verification import approval_verdict
from ledger.models import Customer, Order, Payment, PaymentMethod, RefundEntry
from refundagent.models import Ticket, TraceEvent
from tests.factories import manual_payout_record

pytestmark = pytest.mark.django_db


# The shop's people this module works with (conftest.STAFF).
PEOPLE = ("support", "lead", "finance", "finance2")


@pytest.fixture
def escalated_ticket(people, customer):
    """escalated_ticket(order, filer="support") -> an escalated ticket on `order`, filed by that person."""

    def make(order, status=Ticket.Status.ESCALATED, filer="support"):
        return Ticket.objects.create(
            tenant=order.tenant,
            order=order,
            customer=customer,
            message="Please make an exception.",
            currency=order.currency,
            created_by=people[filer],
            status=status,
            stop_reason=Ticket.StopReason.ESCALATED,
            stop_detail="Outside the window: a person decides.",
        )

    return make


def propose(client, ticket, **body):
    return client.post(f"/api/tickets/{ticket.pk}/proposal", body, content_type="application/json")


def decide(client, approval_id, args_hash, decision="approve", **extra):
    return client.post(
        f"/api/approvals/{approval_id}/decision",
        {"decision": decision, "args_hash": args_hash, **extra},
        content_type="application/json",
    )


def rows() -> tuple[int, int, int, int]:
    return (
        ApprovalRequest.objects.count(),
        ApprovalVote.objects.count(),
        RefundEntry.objects.count(),
        TraceEvent.objects.count(),
    )


def test_an_exception_on_an_escalated_out_of_window_ticket_needs_two_finance_approvers_never_the_proposer(
    people, make_order, escalated_ticket, api_client, django_capture_on_commit_callbacks
):
    # given an escalated ticket on a delivered order placed 60 days ago, outside the 30-day window
    order = make_order("120.00", days_old=60)
    ticket = escalated_ticket(order)
    lead = api_client(people["lead"])
    # when the lead (support and finance) proposes an 80.00 exception refund with a reason
    response = propose(lead, ticket, amount="80.00", reason="Loyal customer, courier lost the parcel.", exception=True)
    # then 201: a human, exceptional request for exactly 80.00 needing two approvers, the ticket waits for finance
    assert response.status_code == 201, response.content
    body = response.json()
    assert (body["origin"], body["amount"], body["currency"], body["requested_by"]) == ("human", "80.00", "USD", "lead")
    assert (body["policy_exception"], body["required_approvals"], body["ticket"]) == (True, 2, ticket.pk)
    assert body["waived_rules"] == ["window"]  # delivered: only the window is broken, only it is waived
    assert body["args"]["amount"] == "80.00" and len(body["args_hash"]) == 64 and body["idempotency_key"]
    ticket.refresh_from_db()
    assert (ticket.status, ticket.stop_reason) == ("approval_required", "approval_required")
    assert "passed to our team" in ticket.customer_reply

    # when the proposer tries to approve it
    response = decide(lead, body["id"], body["args_hash"])
    # then 403, and no vote was recorded
    assert response.status_code == 403
    assert ApprovalVote.objects.count() == 0

    # when one finance user approves
    with django_capture_on_commit_callbacks(execute=True):
        response = decide(api_client(people["finance"]), body["id"], body["args_hash"])
    # then it is still pending with one approval of two, and nothing was written to the ledger
    assert response.status_code == 200, response.content
    assert (response.json()["status"], len(response.json()["approvals"])) == ("pending", 1)
    assert RefundEntry.objects.count() == 0

    # when a second, distinct finance user approves
    with django_capture_on_commit_callbacks(execute=True):
        response = decide(api_client(people["finance2"]), body["id"], body["args_hash"])
    # then it is executed once: one ledger entry of exactly 80.00, the ticket refunded, the reply says 80.00 USD
    assert response.status_code == 200, response.content
    request = manual_payout_record(ApprovalRequest.objects.get(pk=body["id"]))  # the manual gateway: paid by hand
    assert request.status == ApprovalRequest.Status.EXECUTED
    entries = RefundEntry.objects.filter(order=order)
    assert [(e.amount, e.idempotency_key) for e in entries] == [(Decimal("80.00"), request.idempotency_key)]
    ticket.refresh_from_db()
    assert ticket.status == "refunded" and ticket.stop_reason is None
    assert "refunded 80.00 USD" in ticket.customer_reply
    detail = lead.get(f"/api/tickets/{ticket.pk}").json()
    assert detail["customer_reply"] == ticket.customer_reply and detail["stop_reason"] is None
    decisions = list(ticket.trace_events.order_by("seq").values_list("decision", flat=True))
    assert decisions[0] == "human_proposal" and "approve_vote" in decisions and "verified" in decisions


def test_a_proposal_within_the_policy_follows_the_policy_threshold(people, make_order, escalated_ticket, api_client):
    # given a failed ticket on an order in the window
    ticket = escalated_ticket(make_order("120.00", days_old=3), status=Ticket.Status.FAILED)
    # when support proposes a partial refund without an exception
    response = propose(api_client(people["support"]), ticket, amount="40.00", reason="Partial: one item broke.")
    # then one approver suffices (below the threshold) and it is not an exception
    assert response.status_code == 201, response.content
    body = response.json()
    assert (body["origin"], body["required_approvals"], body["policy_exception"]) == ("human", 1, False)
    assert body["requested_by"] == "support"


@pytest.mark.parametrize(
    "case",
    [
        "above_refundable",
        "foreign_method",
        "exception_without_reason",
        "outside_window_without_exception",
        "other_currency",
        "rule_not_waivable",
    ],
)
def test_a_proposal_the_hard_limits_refuse_answers_422_and_writes_nothing(
    case, people, make_order, escalated_ticket, api_client, tenant
):
    # given an escalated ticket on an out-of-window 120.00 order, and another customer's card
    ticket = escalated_ticket(make_order("120.00", days_old=60))
    stranger = Customer.objects.create(tenant=tenant, external_id="CUST-2", name="Bob", email="bob@example.com")
    PaymentMethod.objects.create(customer=stranger, external_id="card_2", kind=PaymentMethod.Kind.CARD)
    body = {"amount": "50.00", "reason": "Goodwill.", "exception": True}
    if case == "above_refundable":
        body["amount"] = "120.01"
    elif case == "foreign_method":
        body["refund_to"] = "card_2"
    elif case == "exception_without_reason":
        body["reason"] = ""
    elif case == "outside_window_without_exception":
        body["exception"] = False
    elif case == "other_currency":
        body["currency"] = "EUR"
    elif case == "rule_not_waivable":
        # the policy's data says the window cannot be waived
        RefundPolicy.objects.filter(pk=ticket.order.tenant.refund_policies.get().pk).update(waivable_rules=[])
    before = rows()
    # when support proposes it
    response = propose(api_client(people["support"]), ticket, **body)
    # then 422 and nothing was written: no request, vote, ledger entry or trace event; the ticket is unchanged
    assert response.status_code == 422, response.content
    assert rows() == before
    ticket.refresh_from_db()
    assert (ticket.status, ticket.customer_reply) == ("escalated", "")


def test_a_ticket_outside_the_queue_cannot_get_a_proposal(people, make_order, escalated_ticket, api_client):
    # given a ticket already waiting for finance
    ticket = escalated_ticket(make_order("120.00"), status=Ticket.Status.APPROVAL_REQUIRED)
    before = rows()
    # when support proposes on it
    response = propose(api_client(people["support"]), ticket, amount="10.00", reason="x")
    # then 409 and nothing written
    assert response.status_code == 409
    assert rows() == before


def test_assign_takes_and_hands_back_a_ticket_of_the_queue(people, make_order, escalated_ticket, api_client):
    # given an escalated ticket nobody owns
    ticket = escalated_ticket(make_order("120.00"))
    support, lead = api_client(people["support"]), api_client(people["lead"])
    # when support takes it
    response = support.post(f"/api/tickets/{ticket.pk}/assign", {"to": "me"}, content_type="application/json")
    # then it is theirs, for everyone to see; the lead cannot take it from under them
    assert response.status_code == 200 and response.json()["owner"] == "support"
    assert lead.get(f"/api/tickets/{ticket.pk}").json()["owner"] == "support"
    assert (
        lead.post(f"/api/tickets/{ticket.pk}/assign", {"to": "me"}, content_type="application/json").status_code == 409
    )
    # when support hands it back
    response = support.post(f"/api/tickets/{ticket.pk}/assign", {"to": None}, content_type="application/json")
    # then nobody owns it and the trace has both actions
    assert response.status_code == 200 and response.json()["owner"] is None
    assert list(ticket.trace_events.values_list("decision", flat=True)) == ["take", "hand_back"]


def test_finance_reviews_a_proposal_with_who_proposed_it_why_and_what_it_waives(
    people, make_order, escalated_ticket, api_client
):
    # given an exception proposed by support on an out-of-window order
    ticket = escalated_ticket(make_order("120.00", days_old=60))
    body = propose(
        api_client(people["support"]), ticket, amount="30.00", reason="Courier lost it.", exception=True
    ).json()
    # when finance opens its review page's sections
    sections = review_sections(ApprovalRequest.objects.get(pk=body["id"]))
    # then one says who proposed it, why, and which rules it waives with how many approvers
    proposal = next(s for s in sections if s["title"] == "Proposed by a person (policy exception)")
    html = str(proposal["html"])
    assert "support" in html and "Courier lost it." in html
    assert "The refund window" in html and "needs 2 distinct approvers" in html


def test_the_tickets_filer_cannot_decide_a_colleagues_proposal_on_their_ticket(
    people, make_order, escalated_ticket, api_client, client, django_capture_on_commit_callbacks
):
    # given a ticket filed by the lead (support and finance), escalated, and support's proposal on it
    ticket = escalated_ticket(make_order("120.00"), filer="lead")
    body = propose(api_client(people["support"]), ticket, amount="80.00").json()
    request = ApprovalRequest.objects.get(pk=body["id"])
    # then both makers are on the request: the proposer and the ticket's filer
    assert (request.requested_by, request.filed_by) == (people["support"], people["lead"])
    assert request.maker_ids == {people["support"].pk, people["lead"].pk}

    # when the filer approves it through the API
    response = decide(api_client(people["lead"]), body["id"], body["args_hash"])
    # then 403 maker_checker, and nothing was decided
    assert response.status_code == 403, response.content
    assert response.json()["code"] == "maker_checker" and "filed the ticket" in response.json()["detail"]
    assert ApprovalVote.objects.count() == 0 and RefundEntry.objects.count() == 0

    # when the filer opens the request in the admin review queue and posts an approval anyway
    client.force_login(people["lead"])
    page = client.get(reverse("admin:approvals_approvalrequest_change", args=[request.pk])).content.decode()
    # then no approve button, the maker-checker warning, and the post decides nothing
    assert 'id="ra-approve"' not in page and "maker-checker" in page
    client.post(
        reverse("admin:approvals_approvalrequest_decide", args=[request.pk, "approve"]),
        {"args_hash": request.args_hash},
    )
    assert ApprovalRequest.objects.get(pk=request.pk).status == "pending" and ApprovalVote.objects.count() == 0

    # when a finance user who is neither maker approves
    with django_capture_on_commit_callbacks(execute=True):
        response = decide(api_client(people["finance"]), body["id"], body["args_hash"])
    # then it is executed (once finance records the payout made by hand: the manual gateway), and the
    # evaluator found no maker among the approvers
    assert response.status_code == 200, response.content
    request = manual_payout_record(request)
    assert request.status == ApprovalRequest.Status.EXECUTED
    check = next(c for c in request.verification["checks"] if c["name"] == "filer_not_approver")
    assert check["ok"] and check["actual"] == "ok"


def test_the_evaluator_fails_a_refund_the_tickets_filer_approved(people, make_order, escalated_ticket, api_client):
    # given the lead's proposal on a ticket support filed, and, written past the service, a vote
    # by the ticket's filer
    ticket = escalated_ticket(make_order("120.00"))
    body = propose(api_client(people["lead"]), ticket, amount="80.00").json()
    request = ApprovalRequest.objects.get(pk=body["id"])
    assert (request.requested_by, request.filed_by) == (people["lead"], people["support"])
    ApprovalVote.objects.create(request=request, approver=people["support"], decision="approve", args_hash="x")
    # when the evaluator checks who approved it
    verdict = approval_verdict(request=request)
    # then the filer among the approvers fails the check
    check = next(c for c in verdict["checks"] if c["name"] == "filer_not_approver")
    assert not check["ok"] and check["actual"] == "filer approved"


def test_a_refused_exception_filed_again_stays_an_exception_with_the_same_makers(
    people, make_order, escalated_ticket, api_client, fake_stripe, django_capture_on_commit_callbacks
):
    # given the lead's policy exception on support's out-of-window ticket, approved by two finance
    # users, and refused by the provider (402)
    ticket = escalated_ticket(make_order("120.00", days_old=60, payment_ref="pi_exception"))
    body = propose(api_client(people["lead"]), ticket, amount="80.00", reason="Courier lost it.", exception=True).json()
    fake_stripe.fail_next("402")
    with django_capture_on_commit_callbacks(execute=True):
        decide(api_client(people["finance"]), body["id"], body["args_hash"])
        decide(api_client(people["finance2"]), body["id"], body["args_hash"])
    refused = ApprovalRequest.objects.get(pk=body["id"])
    assert refused.status == ApprovalRequest.Status.PAYMENT_FAILED
    # when finance files it again
    again = approval_request_payment_retry(request_id=refused.pk, user=people["finance"])
    # then the new request is the same person's exception: origin, waived rules, reason and both makers
    assert (again.origin, again.policy_exception, again.waived_rules) == ("human", True, ["window"])
    assert (again.proposal_reason, again.required_approvals) == ("Courier lost it.", 2)
    assert (again.requested_by, again.filed_by) == (people["lead"], people["support"])
    assert decide(api_client(people["support"]), again.pk, again.args_hash).status_code == 403
    # and once two finance users approve it and the provider pays, the evaluator passes it
    with django_capture_on_commit_callbacks(execute=True):
        decide(api_client(people["finance"]), again.pk, again.args_hash)
        decide(api_client(people["finance2"]), again.pk, again.args_hash)
    again.refresh_from_db()
    assert again.status == ApprovalRequest.Status.EXECUTED, again.verification
    assert again.verification["ok"] and len(fake_stripe.refunds) == 1


def test_the_migration_fills_in_the_filer_of_requests_made_before_it(people, make_order, escalated_ticket, api_client):
    # given a proposal made before `filed_by` existed (the field empty)
    ticket = escalated_ticket(make_order("120.00"))
    body = propose(api_client(people["lead"]), ticket, amount="80.00").json()
    ApprovalRequest.objects.filter(pk=body["id"]).update(filed_by=None)
    # when refundagent/0008's backfill runs
    migration = importlib.import_module("refundagent.migrations.0008_approvalrequest_filed_by_backfill")
    migration.backfill(apps, None)
    # then the request names its ticket's filer, who may no longer decide it
    request = ApprovalRequest.objects.get(pk=body["id"])
    assert (request.requested_by, request.filed_by) == (people["lead"], people["support"])
    assert people["support"].pk in request.maker_ids


def test_a_proposal_finer_than_the_orders_currency_is_a_422_and_writes_nothing(
    people, make_order, escalated_ticket, api_client
):
    # given an escalated ticket on a 1000 JPY order (yen have no minor unit)
    ticket = escalated_ticket(make_order("1000", currency="JPY"))
    before = rows()
    # when a person proposes 120.50 yen
    response = propose(api_client(people["lead"]), ticket, amount="120.50")
    # then 422 amount_precision, nothing written, and the ticket still waits in the queue
    assert response.status_code == 422, response.content
    assert response.json()["code"] == "amount_precision"
    assert rows() == before
    ticket.refresh_from_db()
    assert ticket.status == Ticket.Status.ESCALATED
    # while 120 yen is proposed as it stands
    response = propose(api_client(people["lead"]), ticket, amount="120")
    assert response.status_code == 201 and response.json()["amount"] == "120.00"


@pytest.mark.parametrize(
    "refund_to,status,code",
    [
        ("card_1", 201, None),  # Carol's own card_1, though Ada's card_1 comes first in the tenant
        ("gift_card_9", 422, "foreign_destination"),  # only Ada has it
        ("card_404", 422, "unknown_payment_method"),  # nobody of the tenant has it
    ],
)
def test_refund_to_names_a_method_of_the_orders_customer_though_ids_are_unique_per_customer_only(
    refund_to, status, code, people, tenant, customer, card, api_client
):
    # given Ada's card_1 (the `card` fixture), and Carol, whose own card has the same id card_1 and paid her order
    PaymentMethod.objects.create(customer=customer, external_id="gift_card_9", kind=PaymentMethod.Kind.GIFT_CARD)
    carol = Customer.objects.create(tenant=tenant, external_id="CUST-3", name="Carol", email="carol@example.com")
    carols_card = PaymentMethod.objects.create(
        customer=carol, external_id="card_1", kind=PaymentMethod.Kind.CARD, brand="visa", last4="1881"
    )
    order = Order.objects.create(
        tenant=tenant,
        customer=carol,
        external_id="ORD-CAROL",
        total=Decimal("100.00"),
        currency="USD",
        placed_at=timezone.now() - timedelta(days=5),
        status=Order.Status.DELIVERED,
    )
    Payment.objects.create(
        order=order,
        payment_method=carols_card,
        method="card",
        payment_ref="pi_carol",
        amount=Decimal("100.00"),
        currency="USD",
    )
    ticket = Ticket.objects.create(
        tenant=tenant,
        order=order,
        customer=carol,
        message="Broken on arrival.",
        currency="USD",
        created_by=people["support"],
        status=Ticket.Status.ESCALATED,
    )
    before = rows()

    # when a person proposes 30.00 on Carol's ticket to `refund_to`
    response = propose(api_client(people["lead"]), ticket, amount="30.00", reason="Broken.", refund_to=refund_to)

    # then Carol's own card_1 is taken (before: 422 foreign_destination, "card_1 is not one of customer
    # CUST-3's": the id was looked up in the whole tenant and Ada's came first); another customer's
    # method and an unknown id are still refused with their documented codes, writing nothing
    assert response.status_code == status, response.content
    if code is None:
        made = ApprovalRequest.objects.get(pk=response.json()["id"])
        assert (made.order_id, made.args["destination_method"]) == (order.pk, "card_1")
    else:
        assert response.json()["code"] == code
        assert rows() == before


def test_a_proposal_naming_more_units_than_the_order_has_is_a_422_with_the_reason(
    people, make_order, escalated_ticket, api_client
):
    # given an escalated ticket on an order with two units of ITEM-6, none refunded
    order = make_order("100.00", items=[("ITEM-5", "50.00", 1), ("ITEM-6", "25.00", 2)])
    ticket = escalated_ticket(order)
    before = rows()
    # when a person proposes a refund of ITEM-6 three times
    response = propose(
        api_client(people["lead"]), ticket, amount="50.00", items=["ITEM-6"] * 3, reason="Socks returned."
    )
    # then 422 says how many units the order has (not that they "are not refundable"), nothing written
    assert response.status_code == 422, response.content
    assert response.json()["code"] == "items_exceed_quantity"
    assert "ITEM-6 is named 3 times, but order" in response.json()["detail"]
    assert rows() == before
