"""Builders for the payment tests: a shop's ticket waiting for finance with its approval request
(made through the gate, as the agent's decision would), and approving it as finance does."""

from datetime import timedelta
from decimal import Decimal

import pytest
from django.utils import timezone

from approvals.gate import Proposal, policy_current, policy_gate_evaluate
from approvals.services.decisions import approval_request_decide
from approvals.services.requests import approval_request_create
from ledger.models import Order, Payment, PaymentMethod
from refundagent.models import Ticket


def ticket_gated(
    *, order, filer, amount: str, key: str, refund_to=None
) -> tuple[Ticket, "GateVerdict", "ApprovalRequest | None"]:  # noqa: F821
    """A ticket of `order`'s customer, the gate's verdict on a refund of `amount` (to `refund_to`,
    None: the original method), and its pending request when the gate allows one (else None)."""
    ticket = Ticket.objects.create(
        tenant=order.tenant,
        order=order,
        customer=order.customer,
        message="Refund please.",
        currency=order.currency,
        created_by=filer,
        status=Ticket.Status.APPROVAL_REQUIRED,
        stop_reason=Ticket.StopReason.APPROVAL_REQUIRED,
    )
    policy = policy_current(order.tenant)
    verdict = policy_gate_evaluate(
        order=order,
        policy=policy,
        now=timezone.now(),
        item_ids=[],
        refund_to=refund_to,
        proposal=Proposal(
            recommendation="refund", amount=Decimal(amount), policy_version=policy.version, destination=None
        ),
    )
    if verdict.outcome != "approval_required":
        return ticket, verdict, None
    request, _ = approval_request_create(
        order=order, policy=policy, verdict=verdict, idempotency_key=key, requested_by=filer, ticket_ref=ticket.pk
    )
    return ticket, verdict, request


def ticket_awaiting_approval(*, order, filer, amount: str, key: str) -> tuple[Ticket, "ApprovalRequest"]:  # noqa: F821
    """A ticket of `order`'s customer in approval_required, and its pending request for `amount`."""
    ticket, _, request = ticket_gated(order=order, filer=filer, amount=amount, key=key)
    return ticket, request


def approve(request, user):
    return approval_request_decide(request_id=request.pk, user=user, decision="approve", args_hash=request.args_hash)


def order_paid(tenant, customer, external_id, *payments, total=None):
    """An order paid by `payments` ((method, amount, payment_ref), in that order); its total theirs
    unless given."""
    order = Order.objects.create(
        tenant=tenant,
        customer=customer,
        external_id=external_id,
        total=Decimal(total) if total else sum((Decimal(amount) for _, amount, _ in payments), Decimal(0)),
        currency="USD",
        placed_at=timezone.now() - timedelta(days=3),
    )
    for method, amount, ref in payments:
        Payment.objects.create(
            order=order,
            payment_method=method,
            method=method.kind,
            payment_ref=ref,
            amount=Decimal(amount),
            currency="USD",
        )
    return order


# Fixtures of an order paid two ways, for the split-tender tests (imported there).
@pytest.fixture
def gift_card(customer):
    return PaymentMethod.objects.create(
        customer=customer, external_id="gift_card_9", kind=PaymentMethod.Kind.GIFT_CARD, balance=Decimal("0.00")
    )


@pytest.fixture
def split_order(tenant, customer, card, gift_card):
    """120.00 paid 20.00 by gift card (first, no provider reference) and 100.00 by card."""
    return order_paid(tenant, customer, "ORD-SPLIT", (gift_card, "20.00", ""), (card, "100.00", "pi_split"))
