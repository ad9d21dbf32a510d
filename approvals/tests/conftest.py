"""Fixtures for the approvals tests. Requests are built directly through the gate and
approval_request_create (no agent run needed); these tests never import the agent app.
`people`, `orders` and `file_request` build a shop of their own from the root conftest's builders."""

from decimal import Decimal

import pytest
from django.utils import timezone

from approvals.gate import Proposal, policy_current, policy_gate_evaluate
from approvals.services.requests import approval_request_create
from ledger.models import Order, PaymentMethod, Tenant


@pytest.fixture
def approval_request_make(request):
    """make(order="ORD-5001", filer="acme-support", amount=None, items=None, destination=None,
    refund_to=None, ticket_ref=None) -> a pending ApprovalRequest for what the gate allows.
    `order` and `filer` are an Order and a User, or a demo order id and username (which seed the demo).
    `refund_to` is the external id of one of the order customer's payment methods."""
    fixtures = request  # the inner function has a `request` of its own
    counter = {"n": 0}

    def make(
        order="ORD-5001",
        filer="acme-support",
        tenant="acme",
        amount=None,
        items=None,
        destination=None,
        refund_to=None,
        ticket_ref=None,
        key=None,
    ):
        counter["n"] += 1
        if isinstance(order, str):
            fixtures.getfixturevalue("demo")
            order = Order.objects.get(tenant=Tenant.objects.get(slug=tenant), external_id=order)
        if isinstance(filer, str):
            filer = fixtures.getfixturevalue("user")(filer)
        found = Order.objects.select_related("customer", "tenant").get(pk=order.pk)
        policy = policy_current(found.tenant)
        method = found.customer.payment_methods.get(external_id=refund_to) if refund_to else None
        verdict = policy_gate_evaluate(
            order=found,
            policy=policy,
            proposal=Proposal(
                recommendation="refund",
                amount=Decimal(amount) if amount is not None else None,
                policy_version=policy.version,
                destination=destination,
            ),
            item_ids=items or [],
            refund_to=method,
            now=timezone.now(),
        )
        request, created = approval_request_create(
            order=found,
            policy=policy,
            verdict=verdict,
            idempotency_key=key or f"test:{found.external_id}:{counter['n']}",
            requested_by=filer,
            ticket_ref=ticket_ref,
        )
        assert created
        return request

    return make


@pytest.fixture
def people(tenant, policy, make_user):
    """A shop on refund-policy-v4 (two approvers above 500.00) with support, two finance users, a lead who
    is both, an operator (superuser), and a finance user of another tenant."""
    other = Tenant.objects.create(slug="other", name="Other Shop")
    return {
        "support": make_user("support", "support"),
        "finance": make_user("finance", "finance"),
        "finance2": make_user("finance2", "finance"),
        "lead": make_user("lead", "support", "finance"),
        "ops": make_user("ops", is_staff=True, is_superuser=True),
        "other-finance": make_user("other-finance", "finance", tenant=other),
    }


@pytest.fixture
def orders(policy, make_order):
    """The shop's delivered, unrefunded orders in its window, by total: three of one item (two under the
    threshold, one above it) and one of shoes and two pairs of socks."""
    return {
        "120.00": make_order("120.00", external_id="ORD-1", days_old=12, items=[("ITEM-1", "120.00", 1)]),
        "50.00": make_order("50.00", external_id="ORD-2", days_old=5, items=[("ITEM-2", "50.00", 1)]),
        "750.00": make_order("750.00", external_id="ORD-3", days_old=6, items=[("ITEM-3", "750.00", 1)]),
        "200.00": make_order(
            "200.00", external_id="ORD-4", days_old=8, items=[("ITEM-5", "150.00", 1), ("ITEM-6", "25.00", 2)]
        ),
    }


@pytest.fixture
def gift_card(customer):
    """A gift card of the shop's customer, beside the card the orders were paid with."""
    return PaymentMethod.objects.create(
        customer=customer, external_id="gift_card_1", kind=PaymentMethod.Kind.GIFT_CARD, balance=Decimal("25.00")
    )


@pytest.fixture
def file_request(approval_request_make, people, orders):
    """file_request("120.00", filer="support", **make) -> a pending request for that order, filed by
    that person (`make` as for approval_request_make)."""

    def make(total, filer="support", **kwargs):
        return approval_request_make(order=orders[total], filer=people[filer], **kwargs)

    return make


@pytest.fixture
def client_as(api_client, people):
    return lambda name: api_client(people[name])
