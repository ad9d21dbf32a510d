"""Fixtures for the approvals tests. Requests are built directly through the gate and
approval_request_create (no agent run needed); these tests never import the agent app."""

from decimal import Decimal

import pytest
from django.utils import timezone

from approvals.gate import Proposal, policy_current, policy_gate_evaluate
from approvals.services import approval_request_create
from ledger.models import Order, Tenant


@pytest.fixture
def approval_request_make(request):
    """make(order="ORD-5001", filer="acme-support", amount=None, items=None, destination=None,
    refund_to=None, ticket_ref=None) -> a pending ApprovalRequest for what the gate allows.
    `order` and `filer` are an Order and a User, or a demo order id and username (which seed the demo).
    `refund_to` is the external id of one of the order customer's payment methods."""
    fixtures = request  # the inner function has a `request` of its own
    counter = {"n": 0}

    def make(order="ORD-5001", filer="acme-support", tenant="acme", amount=None, items=None,
             destination=None, refund_to=None, ticket_ref=None, key=None):
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
