"""Writes of the approvals layer: approval requests and their decisions."""

from django.conf import settings
from django.db import IntegrityError, transaction
from django.utils import timezone

from ledger.models import Order
from ledger.services import canonical_hash

from .gate import GateVerdict, Outcome
from .models import ApprovalRequest, RefundPolicy

ISSUE_REFUND = "refunds.issue_refund"


def refund_args_canonical(*, order: Order, verdict: GateVerdict, ticket_ref: int | None) -> dict:
    """The exact arguments `refunds.issue_refund` will be executed with. Hash these, show these,
    execute these: nothing else."""
    return {
        "action": ISSUE_REFUND,
        "tenant": order.tenant.slug,
        "order": order.external_id,
        "customer": order.customer.external_id,
        "amount": str(verdict.allowed_amount),
        "currency": order.currency,
        "destination": verdict.destination,
        "items": list(verdict.item_ids),
        "policy_version": verdict.policy_version,
        "ticket": ticket_ref,
    }


def approval_request_create(
    *,
    order: Order,
    policy: RefundPolicy,
    verdict: GateVerdict,
    idempotency_key: str,
    requested_by=None,
    ticket_ref: int | None = None,
    trace_id: str = "",
) -> tuple[ApprovalRequest, bool]:
    """Create the one approval request for an eligible refund. Keyed: calling it again with the
    same idempotency key (a resumed run) returns the request already made, and False."""
    if verdict.outcome != Outcome.APPROVAL_REQUIRED or verdict.allowed_amount is None:
        raise ValueError("Only an eligible verdict becomes an approval request.")
    existing = ApprovalRequest.objects.filter(idempotency_key=idempotency_key).first()
    if existing is not None:
        return existing, False
    args = refund_args_canonical(order=order, verdict=verdict, ticket_ref=ticket_ref)
    required = 1
    if policy.two_approver_threshold is not None and verdict.allowed_amount > policy.two_approver_threshold:
        required = policy.approvals_above_threshold
    try:
        with transaction.atomic():
            request = ApprovalRequest.objects.create(
                tenant_id=order.tenant_id,
                action=ISSUE_REFUND,
                order=order,
                amount=verdict.allowed_amount,
                currency=order.currency,
                args=args,
                args_hash=canonical_hash(args),
                idempotency_key=idempotency_key,
                policy=policy,
                policy_version=policy.version,
                refundable_at_request=verdict.refundable,
                trace_id=str(trace_id),
                ticket_ref=ticket_ref,
                approver_role="finance",
                required_approvals=required,
                expires_at=timezone.now() + settings.APPROVAL_EXPIRY,
                requested_by=requested_by,
            )
    except IntegrityError:
        return ApprovalRequest.objects.get(idempotency_key=idempotency_key), False
    return request, True
