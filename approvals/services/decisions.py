"""Deciding an approval request: approve (one vote of the distinct approvals the policy asks
for), deny, request changes or escalate. Who may decide (finance, the approve permission, never
the filer), the preconditions, and the re-check of the facts before approving.

Decisions are taken by compare-and-set on the status under the locks of approvals.locks; a row
count other than 1 is a conflict (409).
"""

from datetime import datetime

from django.db import transaction
from django.db.models import Q
from django.utils import timezone

from ledger.exceptions import DomainError, InvalidInput, NotFound
from ledger.money import money_check_currency, money_parse
from ledger.outbox import publish_on_commit
from ledger.selectors import order_refund_position
from ledger.telemetry import traced
from ledger.tenancy import tenant_for_user, user_require_role, user_roles

from ..exceptions import ApprovalConflict, Forbidden, MakerChecker
from ..gate import refund_cap
from ..locks import approval_request_lock
from ..models import ApprovalRequest, ApprovalVote
from ..outbox import approval_execution_publish
from ..request_state import approval_request_transition
from ..signals import (
    approval_approved,
    approval_changes_requested,
    approval_denied,
    approval_escalated,
    approval_vote_recorded,
)
from .invalidation import approval_facts_changed, approval_request_invalidate
from .requests import approval_required_count

APPROVE_PERMISSION = "approvals.approve_approvalrequest"
DECISIONS = {
    ApprovalVote.Decision.APPROVE: ApprovalRequest.Status.APPROVED,
    ApprovalVote.Decision.DENY: ApprovalRequest.Status.DENIED,
    ApprovalVote.Decision.REQUEST_CHANGES: ApprovalRequest.Status.CHANGES_REQUESTED,
    ApprovalVote.Decision.ESCALATE: ApprovalRequest.Status.ESCALATED,
}
# The event each decision other than approve announces.
DECISION_EVENTS = {
    ApprovalVote.Decision.DENY: approval_denied,
    ApprovalVote.Decision.REQUEST_CHANGES: approval_changes_requested,
    ApprovalVote.Decision.ESCALATE: approval_escalated,
}
MAX_NOTE_LENGTH = 4000


@traced(
    "refund.approval.decide",
    result=lambda r: {
        "refund.approval.status": r.status,
        "refund.ticket.id": r.ticket_ref,
        "refund.ticket.trace_id": r.trace_id.replace("-", ""),
    },
)
def approval_request_decide(
    *,
    request_id: int,
    user,
    decision: str,
    args_hash: str,
    note: str = "",
    wanted_amount=None,
    now: datetime | None = None,
) -> ApprovalRequest:
    """Decide one approval request: approve, deny, request_changes or escalate. The one service
    behind the API and the admin.

    Another tenant's request is NotFound (404); without the finance role and the approve
    permission, or as the person who filed the ticket, Forbidden / MakerChecker (403); not
    pending, expired, a different args hash, or a second approval by the same person:
    ApprovalConflict (409), and nothing is written.

    Before approving, the facts the request was made on are re-checked (what is still
    refundable on the order, the tenant's current policy version). If they changed the
    request is invalidated, a replacement is made if the refund is still eligible, and
    ApprovalConflict is raised after that has been committed: nothing is executed.

    Above the policy's threshold (counting the order's other refunds and pending requests, as
    they are at decision time) a request needs several distinct approvers: each approval is
    a vote, and the request stays pending until the last one is in; then the execution is
    enqueued on commit.
    """
    now = now or timezone.now()
    if decision not in DECISIONS:
        raise InvalidInput(f"Unknown decision {decision!r}; one of {', '.join(DECISIONS)}.", code="bad_decision")
    note = (note or "").strip()
    if len(note) > MAX_NOTE_LENGTH:
        raise InvalidInput(f"The note is longer than {MAX_NOTE_LENGTH} characters.", code="note_too_long")
    wanted = None
    if wanted_amount not in (None, ""):
        if decision != ApprovalVote.Decision.REQUEST_CHANGES:
            raise InvalidInput("A wanted amount goes only with request_changes.", code="wanted_amount_unexpected")
        wanted = money_parse(wanted_amount, field="wanted_amount")
        if wanted <= 0:
            raise InvalidInput("The wanted amount must be positive.", code="amount_not_positive")

    tenant = tenant_for_user(user)
    try:
        request = ApprovalRequest.objects.for_tenant(tenant).select_related("order").get(pk=request_id)
    except (ApprovalRequest.DoesNotExist, ValueError, TypeError):
        raise NotFound(f"Approval request {request_id} not found.") from None
    approval_decider_check(user=user, request=request)
    if wanted is not None:
        # Every entry point (API, admin) asks for an amount the request's currency can pay.
        money_check_currency(amount=wanted, currency=request.currency, field="wanted_amount")

    replaced_conflict = None
    with transaction.atomic():
        order, request = approval_request_lock(order_id=request.order_id, request_id=request.pk)
        _decision_preconditions(request=request, user=user, decision=decision, args_hash=args_hash, now=now)
        if wanted is not None:
            _wanted_amount_check(request=request, order=order, wanted=wanted)

        if decision == ApprovalVote.Decision.APPROVE:
            changed = approval_facts_changed(request=request, order=order, now=now)
            if changed:
                replacement = approval_request_invalidate(request=request, reason=changed, actor=user, now=now)
                replaced_conflict = ApprovalConflict(
                    f"The facts changed since request #{request.pk} was made ({changed}). It was invalidated"
                    + (
                        f" and replaced by request #{replacement.pk} for {replacement.amount} {replacement.currency}"
                        if replacement
                        else "; the refund is no longer eligible, so there is no replacement"
                    )
                    + ". Nothing was executed.",
                    code="approval_invalidated",
                    details={"replaced_by": replacement.pk if replacement else None, "changed": changed},
                )
            else:
                _approval_required_recount(request=request, order=order)
                _approval_vote_approve(request=request, user=user, args_hash=args_hash, note=note, now=now)
        else:
            _approval_decide_other(
                request=request, user=user, decision=decision, args_hash=args_hash, note=note, wanted=wanted, now=now
            )
    if replaced_conflict is not None:
        raise replaced_conflict
    request.refresh_from_db()
    return request


def approval_decider_check(*, user, request: ApprovalRequest | None = None) -> None:
    """May `user` decide approval requests (and this one)? The finance role and the approve
    permission, and never a maker (the ticket's filer, or the person who proposed the refund:
    ApprovalRequest.maker_ids), for every decision."""
    if not user.is_authenticated:
        raise Forbidden("Sign in to decide approval requests.", code="unauthenticated")
    role = request.approver_role if request is not None else "finance"
    user_require_role(user, role)
    if not user.has_perm(APPROVE_PERMISSION):
        raise Forbidden("This needs the permission to decide approval requests.", code="permission_required")
    if request is not None and user.pk in request.maker_ids:
        made = "filed the ticket of" if request.filed_by_id in (None, user.pk) else "proposed the refund of"
        raise MakerChecker(f"{user.get_username()} {made} request #{request.pk}; a maker cannot decide it.")


def _decision_preconditions(*, request, user, decision, args_hash, now) -> None:
    if request.status != ApprovalRequest.Status.PENDING:
        raise ApprovalConflict(
            f"Request #{request.pk} is already {request.status}; it cannot be decided again.", code="already_decided"
        )
    if request.expires_at <= now:
        raise ApprovalConflict(
            f"Request #{request.pk} expired at {request.expires_at:%Y-%m-%d %H:%M} UTC; it can no longer be decided.",
            code="approval_expired",
        )
    if not args_hash or args_hash != request.args_hash:
        raise ApprovalConflict(
            f"The args hash does not match request #{request.pk}: decide exactly what is shown "
            "(reload it; a changed amount is a new request).",
            code="args_hash_mismatch",
        )
    if decision == ApprovalVote.Decision.APPROVE and request.votes.filter(approver=user).exists():
        raise ApprovalConflict(
            f"{user.get_username()} already approved request #{request.pk}; it needs "
            f"{request.required_approvals} distinct approvers.",
            code="already_voted",
        )


def _wanted_amount_check(*, request, order, wanted) -> None:
    """A wanted amount the gate could never allow is refused here, with its cap named, rather than
    handed to the agent, whose next draft the gate would cap again while the page said nothing."""
    cap, cap_words = refund_cap(
        position=order_refund_position(order),
        item_ids=list((request.args or {}).get("items") or []),
        currency=request.currency,
    )
    if wanted > cap:
        raise InvalidInput(
            f"The gate cannot allow {wanted} {request.currency}: the most it allows is {cap_words}. "
            f"Ask for at most {cap} {request.currency}, or deny and let a person propose other items.",
            code="wanted_amount_above_cap",
            details={"field": "wanted_amount", "cap": str(cap)},
        )


def _approval_required_recount(*, request, order) -> None:
    """Dual control counts the order's other refunds as they are now: a request made alone needs
    a second approver once another request on the order would take it above the threshold. It
    only ever goes up (under the order lock, so two decisions on one order see each other)."""
    required = approval_required_count(order=order, policy=request.policy, amount=request.amount, exclude_pk=request.pk)
    if required > request.required_approvals:
        ApprovalRequest.objects.filter(pk=request.pk).update(required_approvals=required)
        request.required_approvals = required


def _approval_vote_approve(*, request, user, args_hash, note, now) -> None:
    vote = ApprovalVote.objects.create(
        request=request, approver=user, decision=ApprovalVote.Decision.APPROVE, args_hash=args_hash, note=note
    )
    approvals = request.votes.filter(decision=ApprovalVote.Decision.APPROVE).values("approver").distinct().count()
    if approvals >= request.required_approvals:
        moved = approval_request_transition(
            request=request,
            to=ApprovalRequest.Status.APPROVED,
            when=Q(args_hash=args_hash, expires_at__gt=now),
            decided_by=user,
            decided_at=now,
            decision_note=note,
            updated_at=now,
        )
        if not moved:
            raise ApprovalConflict(f"Request #{request.pk} was decided by someone else.", code="already_decided")
        # The approved row is the execution instruction (approvals.outbox); the publish after
        # commit only saves the sweep's wait, and a broker outage never fails the decision.
        publish_on_commit(approval_execution_publish, request_id=request.pk)
    request.refresh_from_db()
    event = approval_approved if request.status == ApprovalRequest.Status.APPROVED else approval_vote_recorded
    event.send(sender=ApprovalRequest, request=request, vote=vote, actor=user)


def _approval_decide_other(*, request, user, decision, args_hash, note, wanted, now) -> None:
    moved = approval_request_transition(
        request=request,
        to=DECISIONS[decision],
        decided_by=user,
        decided_at=now,
        decision_note=note,
        requested_amount_change=wanted,
        updated_at=now,
    )
    if not moved:
        raise ApprovalConflict(f"Request #{request.pk} was decided by someone else.", code="already_decided")
    # One vote per person: someone who approved earlier and now denies keeps the first vote;
    # the request records the final decision and who took it.
    vote = None
    if not request.votes.filter(approver=user).exists():
        vote = ApprovalVote.objects.create(
            request=request, approver=user, decision=decision, args_hash=args_hash, note=note
        )
    request.refresh_from_db()
    DECISION_EVENTS[decision].send(sender=ApprovalRequest, request=request, vote=vote, actor=user)


def user_can_decide(user) -> bool:
    """For UIs: show decision buttons only to those the service would let through."""
    return bool(user.is_authenticated and user.has_perm(APPROVE_PERMISSION) and "finance" in user_roles(user))


def approval_decisions_open(*, request: ApprovalRequest, user, now=None) -> tuple[list[str], str]:
    """For UIs: the decisions `user` could still make on `request` (the service's own
    preconditions, args hash aside), and, when there are none or approving is closed, why."""
    now = now or timezone.now()
    if request.status != ApprovalRequest.Status.PENDING:
        return [], f"Request #{request.pk} is {request.get_status_display()}: it can no longer be decided."
    if request.expires_at <= now:
        return (
            [],
            f"Request #{request.pk} expired at {request.expires_at:%Y-%m-%d %H:%M} UTC: it can no longer be decided.",
        )
    try:
        approval_decider_check(user=user, request=request)
    except DomainError as exc:
        return [], exc.message
    refundable = order_refund_position(request.order).refundable
    if refundable < request.amount:
        # Another refund of the order (a second ticket's) was paid since: approving would only
        # invalidate it, so Approve is not offered; the page says why.
        return [str(d) for d in DECISIONS if d != ApprovalVote.Decision.APPROVE], (
            f"Request #{request.pk} can no longer be approved: only {refundable} {request.currency} is still "
            f"refundable on {request.order.external_id}, less than its {request.amount} {request.currency} "
            "(another refund of the order was recorded since). Deny it, or request changes."
        )
    if request.votes.filter(approver=user, decision=ApprovalVote.Decision.APPROVE).exists():
        return [str(d) for d in DECISIONS if d != ApprovalVote.Decision.APPROVE], (
            f"You already approved request #{request.pk}; it needs {request.required_approvals} distinct approvers, "
            "so another finance user gives the next approval."
        )
    return [str(d) for d in DECISIONS], ""
