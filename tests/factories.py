"""Builders shared by every app's tests (the root conftest turns the database ones into fixtures).

Tests build exactly the data they need with these instead of leaning on the demo's order ids.
"""

from datetime import timedelta
from decimal import Decimal

from django.contrib.auth import get_user_model

from approvals.models import RefundPolicy
from ledger.models import Membership
from ledger.tenancy import roles_sync

POLICY_VERSION = "refund-policy-v4"
DRAFT_REPLY = "Hello, we have passed your request for order {order} to our finance team for review."
DRAFT_RATIONALE = "In window, delivered, refundable."


def refund_draft_args(
    *,
    reply,
    amount=None,
    version=POLICY_VERSION,
    recommendation="refund",
    rationale=DRAFT_RATIONALE,
    destination=None,
    **fields,
) -> dict:
    """The arguments of a refunds_create_draft call. None leaves amount, policy_version or destination
    out (a model that forgot them); `fields` (order, items, ...) go in as they are."""
    args = {
        "recommendation": recommendation,
        "amount": amount,
        "policy_version": version,
        "rationale": rationale,
        "customer_reply": reply,
        "destination": destination,
        **fields,
    }
    return {k: v for k, v in args.items() if v is not None or k not in ("amount", "policy_version", "destination")}


def refund_draft(
    order="ORD-5001",
    amount="120.00",
    *,
    version=POLICY_VERSION,
    reply=None,
    recommendation="refund",
    destination=None,
    rationale=DRAFT_RATIONALE,
) -> dict:
    """A scripted model turn that drafts a refund; `order` is only named in the default customer reply."""
    return {
        "tool": "refunds_create_draft",
        "input": refund_draft_args(
            reply=reply or DRAFT_REPLY.format(order=order),
            amount=amount,
            version=version,
            recommendation=recommendation,
            rationale=rationale,
            destination=destination,
        ),
    }


def policy_publish(
    *,
    tenant,
    version=POLICY_VERSION,
    window_days=30,
    threshold="500.00",
    approvals_above_threshold=2,
    now,
    threshold_currency="USD",
    risk_rules=None,
):
    """A published refund policy shaped like refund-policy-v4: full refunds of pending, processed and delivered
    orders to the original method, item refunds of delivered orders also to a gift card."""
    return RefundPolicy.objects.create(
        tenant=tenant,
        version=version,
        status=RefundPolicy.Status.PUBLISHED,
        window_days=window_days,
        full_refund_statuses=["pending", "processed", "delivered"],
        item_refund_statuses=["delivered"],
        full_refund_destinations=["original"],
        item_refund_destinations=["original", "gift_card"],
        two_approver_threshold=Decimal(threshold),
        two_approver_threshold_currency=threshold_currency,
        approvals_above_threshold=approvals_above_threshold,
        text=f"Refund policy ({version}): refunds within {window_days} days; above {threshold}, two approvers.",
        published_at=now - timedelta(days=200),
        risk_rules=risk_rules or {},
    )


def user_build(*, username, tenant, roles=(), **fields):
    """A user of `tenant` with the given roles (the groups `support` and `finance` with their permissions).
    Finance works in the admin, so is staff; `fields` (is_superuser=True, ...) set the rest."""
    groups = {role: synced.group for role, synced in roles_sync().items()}
    fields = {"is_staff": "finance" in roles, **fields}
    user = get_user_model().objects.create(username=username, email=f"{username}@{tenant.slug}.example", **fields)
    Membership.objects.create(user=user, tenant=tenant)
    user.groups.add(*(groups[r] for r in roles))
    return user


def manual_payout_record(request, *, user=None, reference=None):
    """What finance does after paying an approved `manual` refund by hand (the embedded default
    gateway): record the payout, then the execution's rerun that the record sets off verifies it.
    Returns the request as it now is (`executed` once verified)."""
    from approvals.services.execution import approval_execute
    from ledger.models import RefundEntry
    from ledger.services import ledger_refund_record_paid

    request.refresh_from_db()
    entry = RefundEntry.objects.get(idempotency_key=request.idempotency_key)
    ledger_refund_record_paid(
        entry_id=entry.pk,
        tenant=entry.tenant,
        reference=reference or f"BANK-TRF-TEST-{entry.pk}",
        user=user or request.decided_by,
    )
    approval_execute(request_id=request.pk)
    request.refresh_from_db()
    return request


def manual_payout_record_when_written(request, *, timeout=60.0, reference=None):
    """For tests with a real worker: wait until the worker has written the approved refund (a
    `pending` manual entry), then record the payout as finance would. Returns the entry, or None
    when it was never written in time."""
    import time

    from ledger.models import RefundEntry, RefundStatus
    from ledger.services import ledger_refund_record_paid

    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        entry = RefundEntry.objects.filter(idempotency_key=request.idempotency_key).first()
        if entry is not None and entry.status == RefundStatus.PENDING:
            request.refresh_from_db()
            return ledger_refund_record_paid(
                entry_id=entry.pk,
                tenant=entry.tenant,
                reference=reference or f"BANK-TRF-TEST-{entry.pk}",
                user=request.decided_by,
            )
        time.sleep(0.3)
    return None
