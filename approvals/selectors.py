"""Reads of approval requests, as the API and the agent app's ticket pages show them."""

from django.db.models import Prefetch, QuerySet

from ledger.exceptions import NotFound
from ledger.tenancy import tenant_for_user, user_require_role

from .models import ApprovalRequest, ApprovalVote


def approvals_for_tenant(tenant) -> QuerySet:
    """A tenant's approval requests with what their serialisation reads (order, customer,
    requester, decider, votes and their approvers) in a constant number of queries."""
    return (
        ApprovalRequest.objects.for_tenant(tenant)
        .select_related("order", "order__customer", "requested_by", "decided_by")
        .prefetch_related(Prefetch("votes", queryset=ApprovalVote.objects.select_related("approver")))
    )


def approval_changes_asked(*, tenant, ticket_ref: int | None, exclude_pk: int | None = None):
    """The newest request of a ticket that finance sent back ("request changes"), other than
    `exclude_pk`: what finance asked for stays on the pages after the agent drafts again."""
    if ticket_ref is None:
        return None
    asked = ApprovalRequest.objects.for_tenant(tenant).filter(
        ticket_ref=ticket_ref, status=ApprovalRequest.Status.CHANGES_REQUESTED
    )
    if exclude_pk is not None:
        asked = asked.exclude(pk=exclude_pk)
    return asked.select_related("decided_by").order_by("-decided_at", "-id").first()


def approvals_for(user) -> QuerySet:
    """The approval requests `user` may read: their tenant's, with the finance role."""
    user_require_role(user, "finance")
    return approvals_for_tenant(tenant_for_user(user))


def approval_get(*, user, request_id: int) -> ApprovalRequest:
    try:
        return approvals_for(user).get(pk=request_id)
    except ApprovalRequest.DoesNotExist:
        raise NotFound(f"Approval request {request_id} not found.") from None


def approval_latest_for_ticket(*, tenant, ticket_ref: int) -> ApprovalRequest | None:
    """The newest approval request made for a ticket (`ticket_ref` is opaque here: the caller
    names the tenant, so another tenant's request is never returned)."""
    return approvals_for_tenant(tenant).filter(ticket_ref=ticket_ref).order_by("-created_at", "-id").first()


def approvals_refused_by_provider(queryset: QuerySet) -> QuerySet:
    """Of `queryset`, the refunds the payment provider refused that nobody filed again (the review
    queue's banner). Served by the partial index approval_payment_failed_idx: a few rows, not a
    scan of every request."""
    return queryset.filter(status=ApprovalRequest.Status.PAYMENT_FAILED, replaced_by=None)
