"""Fixtures for the approvals tests. Requests are built directly through the gate and
approval_request_create (no agent run needed); these tests never import the agent app."""

from decimal import Decimal

import pytest
from django.utils import timezone

from approvals.gate import Proposal, policy_current, policy_gate_evaluate
from approvals.requests import approval_request_create
from ledger.models import Order, Tenant


@pytest.fixture
def approval_request_make(demo, user):
    """make(order="ORD-5001", filer="acme-support", amount=None, items=None, destination=None,
    refund_to=None, ticket_ref=None) -> a pending ApprovalRequest for what the gate allows.
    `refund_to` is the external id of one of the order customer's payment methods."""
    counter = {"n": 0}

    def make(order="ORD-5001", filer="acme-support", tenant="acme", amount=None, items=None,
             destination=None, refund_to=None, ticket_ref=None, key=None):
        counter["n"] += 1
        found_tenant = Tenant.objects.get(slug=tenant)
        found = Order.objects.select_related("customer", "tenant").get(tenant=found_tenant, external_id=order)
        policy = policy_current(found_tenant)
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
            idempotency_key=key or f"test:{order}:{counter['n']}",
            requested_by=user(filer) if filer else None,
            ticket_ref=ticket_ref,
        )
        assert created
        return request

    return make
