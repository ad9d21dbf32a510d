"""Writes of the approvals layer: approval requests, their decisions, their execution.

Lock order, everywhere (the same as the ledger's): the order row first, then the approval
request row. Decisions are taken by compare-and-set on the status; a row count other than 1
is a conflict (409).
"""

import logging
import os
import re
import signal
from datetime import datetime
from decimal import Decimal
from pathlib import Path

from django.conf import settings
from django.db import IntegrityError, transaction
from django.utils import timezone

from ledger.exceptions import DomainError, InvalidInput, NotFound
from ledger.models import Order, PaymentMethod, RefundEntry
from ledger.selectors import order_refund_position
from ledger.services import canonical_hash, ledger_refund_issue, money
from ledger.telemetry import traced
from ledger.tenancy import tenant_for_user, user_require_role, user_roles

from .exceptions import ApprovalConflict, Forbidden, MakerChecker
from .gate import GateVerdict, Outcome, Proposal, order_original_method, policy_current, policy_gate_evaluate
from .models import ApprovalRequest, ApprovalVote, RefundPolicy
from .signals import approval_decided, approval_replaced, refund_executed, refund_verified

logger = logging.getLogger(__name__)

APPROVE_PERMISSION = "approvals.approve_approvalrequest"
DECISIONS = {
    ApprovalVote.Decision.APPROVE: ApprovalRequest.Status.APPROVED,
    ApprovalVote.Decision.DENY: ApprovalRequest.Status.DENIED,
    ApprovalVote.Decision.REQUEST_CHANGES: ApprovalRequest.Status.CHANGES_REQUESTED,
    ApprovalVote.Decision.ESCALATE: ApprovalRequest.Status.ESCALATED,
}
MAX_NOTE_LENGTH = 4000
# Test hook for the crash-after-ledger-write test: a path; the first execution that finds no
# file there creates it and SIGKILLs its own process right after the ledger write committed.
CRASH_AFTER_LEDGER_WRITE_ENV = "APPROVALS_CRASH_AFTER_LEDGER_WRITE_MARKER"

ISSUE_REFUND = "refunds.issue_refund"


def refund_args_canonical(*, order: Order, verdict: GateVerdict, ticket_ref: int | None) -> dict:
    """The exact arguments `refunds.issue_refund` will be executed with. Hash these, show these,
    execute these: nothing else. `destination` is the kind ('original', 'gift_card'),
    `destination_method` the exact payment method's external id (None only when the order's
    payment recorded no method)."""
    return {
        "action": ISSUE_REFUND,
        "tenant": order.tenant.slug,
        "order": order.external_id,
        "customer": order.customer.external_id,
        "amount": str(verdict.allowed_amount),
        "currency": order.currency,
        "destination": verdict.destination,
        "destination_method": verdict.destination_method,
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
    fresh_key: bool = False,
) -> tuple[ApprovalRequest, bool]:
    """Create the one approval request for an eligible refund. Keyed: calling it again with the
    same idempotency key (a resumed run) returns the request already made, and False.

    `fresh_key=True` is for a caller whose key cannot exist yet (the agent's decision derives it
    from the draft it inserted in the same transaction): no savepoint, and a duplicate would be
    an IntegrityError that rolls the caller's transaction back."""
    if verdict.outcome != Outcome.APPROVAL_REQUIRED or verdict.allowed_amount is None:
        raise ValueError("Only an eligible verdict becomes an approval request.")
    # No look-up first: the unique key decides (a replay is the rare path, and the insert in a
    # savepoint costs the common path one query less).
    args = refund_args_canonical(order=order, verdict=verdict, ticket_ref=ticket_ref)
    required = 1
    if policy.two_approver_threshold is not None and verdict.allowed_amount > policy.two_approver_threshold:
        required = policy.approvals_above_threshold
    fields = dict(
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
    if fresh_key:
        return ApprovalRequest.objects.create(**fields), True
    try:
        with transaction.atomic():
            request = ApprovalRequest.objects.create(**fields)
    except IntegrityError:
        existing = ApprovalRequest.objects.filter(idempotency_key=idempotency_key).first()
        if existing is None:
            raise  # not a replay: another constraint refused the row
        return existing, False
    return request, True


@traced("refund.approval.decide", result=lambda r: {"refund.approval.status": r.status,
        "refund.ticket.id": r.ticket_ref, "refund.ticket.trace_id": r.trace_id.replace("-", "")})
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

    Above the policy's threshold a request needs several distinct approvers: each approval is
    a vote, and the request stays pending until the last one is in; then the execution is
    enqueued on commit.
    """
    now = now or timezone.now()
    if decision not in DECISIONS:
        raise InvalidInput(
            f"Unknown decision {decision!r}; one of {', '.join(DECISIONS)}.", code="bad_decision"
        )
    note = (note or "").strip()
    if len(note) > MAX_NOTE_LENGTH:
        raise InvalidInput(f"The note is longer than {MAX_NOTE_LENGTH} characters.", code="note_too_long")
    wanted = None
    if wanted_amount not in (None, ""):
        if decision != ApprovalVote.Decision.REQUEST_CHANGES:
            raise InvalidInput("A wanted amount goes only with request_changes.", code="wanted_amount_unexpected")
        wanted = money(wanted_amount)
        if wanted <= 0:
            raise InvalidInput("The wanted amount must be positive.", code="amount_not_positive")

    tenant = tenant_for_user(user)
    try:
        request = ApprovalRequest.objects.for_tenant(tenant).select_related("order").get(pk=request_id)
    except (ApprovalRequest.DoesNotExist, ValueError, TypeError):
        raise NotFound(f"Approval request {request_id} not found.") from None
    approval_decider_check(user=user, request=request)

    replaced_conflict = None
    with transaction.atomic():
        order = Order.objects.select_for_update().get(pk=request.order_id)
        request = ApprovalRequest.objects.select_for_update().get(pk=request.pk)
        _decision_preconditions(request=request, user=user, decision=decision, args_hash=args_hash, now=now)

        if decision == ApprovalVote.Decision.APPROVE:
            changed = _facts_changed(request=request, order=order)
            if changed:
                replacement = _approval_request_invalidate(request=request, reason=changed, actor=user, now=now)
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
    permission, and never the person who filed the ticket (maker-checker), for every decision."""
    if not user.is_authenticated:
        raise Forbidden("Sign in to decide approval requests.", code="unauthenticated")
    role = request.approver_role if request is not None else "finance"
    user_require_role(user, role)
    if not user.has_perm(APPROVE_PERMISSION):
        raise Forbidden("This needs the permission to decide approval requests.", code="permission_required")
    if request is not None and request.requested_by_id is not None and request.requested_by_id == user.pk:
        raise MakerChecker(
            f"{user.get_username()} filed the ticket of request #{request.pk}; the maker cannot decide it."
        )


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


def _facts_changed(*, request: ApprovalRequest, order: Order) -> str:
    """What changed since the request was made, in words, or '' if nothing did."""
    changes = []
    position = order_refund_position(order)
    if position.refundable != request.refundable_at_request:
        changes.append(
            f"refundable on {order.external_id} was {request.refundable_at_request}, now {position.refundable} "
            f"{order.currency}"
        )
    policy = policy_current(order.tenant)
    current_version = policy.version if policy else None
    if current_version != request.policy_version:
        changes.append(f"policy was {request.policy_version}, now {current_version or 'none'}")
    return "; ".join(changes)


def _approval_vote_approve(*, request, user, args_hash, note, now) -> None:
    vote = ApprovalVote.objects.create(
        request=request, approver=user, decision=ApprovalVote.Decision.APPROVE, args_hash=args_hash, note=note
    )
    approvals = request.votes.filter(decision=ApprovalVote.Decision.APPROVE).values("approver").distinct().count()
    if approvals >= request.required_approvals:
        updated = ApprovalRequest.objects.filter(
            pk=request.pk, status=ApprovalRequest.Status.PENDING, args_hash=args_hash, expires_at__gt=now
        ).update(
            status=ApprovalRequest.Status.APPROVED,
            decided_by=user,
            decided_at=now,
            decision_note=note,
            updated_at=now,
        )
        if updated != 1:
            raise ApprovalConflict(f"Request #{request.pk} was decided by someone else.", code="already_decided")
        request_id = request.pk
        transaction.on_commit(lambda: approval_execute_enqueue(request_id))
    request.refresh_from_db()
    approval_decided.send(
        sender=ApprovalRequest, request=request, vote=vote, decision=ApprovalVote.Decision.APPROVE, actor=user
    )


def _approval_decide_other(*, request, user, decision, args_hash, note, wanted, now) -> None:
    updated = ApprovalRequest.objects.filter(pk=request.pk, status=ApprovalRequest.Status.PENDING).update(
        status=DECISIONS[decision],
        decided_by=user,
        decided_at=now,
        decision_note=note,
        requested_amount_change=wanted,
        updated_at=now,
    )
    if updated != 1:
        raise ApprovalConflict(f"Request #{request.pk} was decided by someone else.", code="already_decided")
    # One vote per person: someone who approved earlier and now denies keeps the first vote;
    # the request records the final decision and who took it.
    vote = None
    if not request.votes.filter(approver=user).exists():
        vote = ApprovalVote.objects.create(
            request=request, approver=user, decision=decision, args_hash=args_hash, note=note
        )
    request.refresh_from_db()
    approval_decided.send(sender=ApprovalRequest, request=request, vote=vote, decision=decision, actor=user)


def _approval_request_invalidate(*, request, reason: str, actor=None, now, from_status=ApprovalRequest.Status.PENDING):
    """Mark a request whose facts changed `invalidated` and, when the refund is still eligible,
    make its replacement (a new exact action with its own args, hash and key). Runs inside the
    caller's transaction with the order row locked. Returns the replacement or None."""
    fields = {"status": ApprovalRequest.Status.INVALIDATED, "decision_note": f"Invalidated: {reason}", "updated_at": now}
    if from_status == ApprovalRequest.Status.PENDING:
        fields.update(decided_by=actor, decided_at=now)
    updated = ApprovalRequest.objects.filter(pk=request.pk, status=from_status).update(**fields)
    if updated != 1:
        raise ApprovalConflict(f"Request #{request.pk} was decided by someone else.", code="already_decided")
    order = Order.objects.select_related("tenant", "customer").get(pk=request.order_id)
    policy = policy_current(order.tenant)
    # The replacement keeps the destination: the exact method approved before (or, for a request
    # made before methods were named, the method that request would have been executed to).
    try:
        refund_to, kind = approval_destination_resolve(request=request)
    except DomainError:
        refund_to, kind = None, request.args.get("destination") or "original"
    proposal = Proposal(
        recommendation="refund",
        amount=request.amount,
        policy_version=policy.version if policy else "",
        destination=kind,
    )
    verdict = policy_gate_evaluate(
        order=order, policy=policy, proposal=proposal, item_ids=request.args.get("items") or [],
        refund_to=refund_to if kind != "original" else None, now=now,
    )
    replacement = None
    if verdict.outcome == Outcome.APPROVAL_REQUIRED:
        replacement, _ = approval_request_create(
            order=order,
            policy=policy,
            verdict=verdict,
            idempotency_key=_replacement_key(request.idempotency_key),
            requested_by=request.requested_by,
            ticket_ref=request.ticket_ref,
            trace_id=request.trace_id,
        )
        ApprovalRequest.objects.filter(pk=request.pk).update(replaced_by=replacement)
    request.refresh_from_db()
    approval_decided.send(
        sender=ApprovalRequest,
        request=request,
        vote=None,
        decision="invalidate",
        actor=actor,
        reason=reason,
        verdict=verdict.as_dict(),
    )
    if replacement is not None:
        approval_replaced.send(sender=ApprovalRequest, request=replacement, old=request)
    return replacement


def _replacement_key(key: str) -> str:
    match = re.fullmatch(r"(.*):r(\d+)", key)
    base, n = (match.group(1), int(match.group(2))) if match else (key, 0)
    candidate = f"{base}:r{n + 1}"
    while ApprovalRequest.objects.filter(idempotency_key=candidate).exists():
        n += 1
        candidate = f"{base}:r{n + 1}"
    return candidate


def approval_requests_expire(*, now: datetime | None = None) -> int:
    """Mark pending requests past their expiry `expired` (the periodic sweep). Each one by
    compare-and-set, so a decision racing the sweep wins or loses cleanly. Returns how many."""
    now = now or timezone.now()
    expired = 0
    due = ApprovalRequest.objects.filter(status=ApprovalRequest.Status.PENDING, expires_at__lte=now)
    for request_id in due.values_list("pk", flat=True).order_by("created_at")[:1000]:
        with transaction.atomic():
            updated = ApprovalRequest.objects.filter(
                pk=request_id, status=ApprovalRequest.Status.PENDING, expires_at__lte=now
            ).update(status=ApprovalRequest.Status.EXPIRED, decided_at=now, updated_at=now,
                     decision_note="Expired before finance decided.")
            if updated != 1:
                continue
            request = ApprovalRequest.objects.get(pk=request_id)
            approval_decided.send(sender=ApprovalRequest, request=request, vote=None, decision="expire", actor=None)
            expired += 1
    return expired


def approval_execute_enqueue(request_id: int) -> None:
    from .tasks import approval_execute_task

    approval_execute_task.delay(request_id)


def approval_destination_resolve(*, request: ApprovalRequest) -> tuple[PaymentMethod | None, str]:
    """Where the approved refund goes, exactly as approved: the payment method named by
    `destination_method`, which must be the order's customer's and of the approved kind
    ('original': the method the order was paid with; 'gift_card': a gift card). Anything else
    refuses (InvalidInput): the execution fails with the reason, nothing is written.

    Requests made before the method was named (no `destination_method` in their args) keep
    their old meaning: 'original' is the order's payment method, 'gift_card' the customer's
    oldest gift card."""
    args = request.args or {}
    kind = args.get("destination") or "original"
    order = request.order
    if kind not in ("original", "gift_card"):
        raise InvalidInput(f"Unknown refund destination {kind!r}.", code="bad_destination")
    original = order_original_method(order)
    if "destination_method" not in args:
        if kind == "original":
            return original, kind
        card = order.customer.payment_methods.filter(kind=PaymentMethod.Kind.GIFT_CARD).order_by("id").first()
        if card is None:
            raise InvalidInput(f"Customer {order.customer.external_id} has no gift card.", code="no_gift_card")
        return card, kind
    method_id = args["destination_method"]
    if method_id is None:
        if kind == "original" and original is None:
            return None, kind  # the order's payment recorded no method: the original, unnamed
        raise InvalidInput(f"The approved refund to '{kind}' names no payment method.", code="destination_unnamed")
    method = order.customer.payment_methods.filter(external_id=method_id).first()
    if method is None:
        raise InvalidInput(
            f"Payment method {method_id} is not one of customer {order.customer.external_id}'s.",
            code="foreign_destination",
        )
    if kind == "original" and (original is None or original.pk != method.pk):
        raise InvalidInput(
            f"Payment method {method_id} is not the one order {order.external_id} was paid with.",
            code="destination_not_original",
        )
    if kind == "gift_card" and method.kind != PaymentMethod.Kind.GIFT_CARD:
        raise InvalidInput(f"Payment method {method_id} is not a gift card.", code="destination_not_gift_card")
    return method, kind


@traced("refund.approval.execute", result=lambda r: {"refund.approval.status": r.status})
def approval_execute(*, request_id: int) -> ApprovalRequest:
    """Write the approved refund into the ledger, exactly as approved, then have it verified.

    Safe to run any number of times (task redelivery, retries, a worker killed after the ledger
    write): the request's idempotency key makes the ledger return the entry already written.
    Callable synchronously (evals run it inside a transaction where on_commit never fires)."""
    request = ApprovalRequest.objects.select_related("order", "order__customer", "order__tenant").get(pk=request_id)
    if request.status in (ApprovalRequest.Status.EXECUTED, ApprovalRequest.Status.FAILED):
        return request  # done before: executing again changes nothing
    if request.status != ApprovalRequest.Status.APPROVED:
        raise ApprovalConflict(f"Request #{request.pk} is {request.status}; only an approved request is executed.")

    args = request.args
    try:
        if canonical_hash(args) != request.args_hash or Decimal(args["amount"]) != request.amount or (
            args["currency"] != request.currency or args["order"] != request.order.external_id
        ):
            raise InvalidInput("The stored args no longer match their hash or the request.", code="args_tampered")
        destination, destination_kind = approval_destination_resolve(request=request)
        replacement = None
        with transaction.atomic():
            order = Order.objects.select_for_update().get(pk=request.order_id)
            existing = RefundEntry.objects.filter(idempotency_key=request.idempotency_key).first()
            # Facts re-checked under the order lock, unless the entry was already written by an
            # earlier attempt (then the ledger replays it).
            changed = "" if existing is not None else _facts_changed(request=request, order=order)
            if changed:
                replacement = _approval_request_invalidate(
                    request=request, reason=changed, now=timezone.now(), from_status=ApprovalRequest.Status.APPROVED
                )
            else:
                entry = ledger_refund_issue(
                    order=order,
                    amount=args["amount"],
                    currency=args["currency"],
                    idempotency_key=request.idempotency_key,
                    destination=destination,
                    destination_kind=destination_kind,
                    item_ids=list(args.get("items") or []),
                    source=RefundEntry.Source.APPROVAL,
                    approval_ref=str(request.pk),
                    reason=f"Approved request #{request.pk} under {request.policy_version}.",
                    created_by=request.decided_by,
                )
                ApprovalRequest.objects.filter(pk=request.pk, status=ApprovalRequest.Status.APPROVED).update(
                    ledger_entry_ref=entry.pk, updated_at=timezone.now()
                )
                request.refresh_from_db()
                refund_executed.send(sender=ApprovalRequest, request=request, entry=entry, replayed=existing is not None)
        if changed:
            logger.warning("approval %s not executed: %s (replacement %s)", request.pk, changed,
                           replacement.pk if replacement else None)
            request.refresh_from_db()
            return request
    except DomainError as exc:
        return _approval_execution_failed(request=request, exc=exc)

    _crash_after_ledger_write_hook()

    from .verification import approval_verify

    approval_verify(request_id=request.pk)
    request.refresh_from_db()
    return request


def _approval_execution_failed(*, request: ApprovalRequest, exc: DomainError) -> ApprovalRequest:
    verdict = {
        "ok": False,
        "stage": "execute",
        "error": exc.code,
        "detail": exc.message,
        "checks": [{"name": "ledger_write", "ok": False, "expected": f"{request.amount} {request.currency}",
                    "actual": exc.message}],
        "verified_at": timezone.now().isoformat(),
    }
    with transaction.atomic():
        updated = ApprovalRequest.objects.filter(pk=request.pk, status=ApprovalRequest.Status.APPROVED).update(
            status=ApprovalRequest.Status.FAILED, verification=verdict, updated_at=timezone.now()
        )
        request.refresh_from_db()
        if updated == 1:
            logger.error(
                "approval %s execution failed: %s (%s)", request.pk, exc.message, exc.code,
                extra={"approval": request.pk, "verification": verdict},
            )
            refund_verified.send(sender=ApprovalRequest, request=request, verdict=verdict)
    return request


def _crash_after_ledger_write_hook() -> None:
    marker = os.getenv(CRASH_AFTER_LEDGER_WRITE_ENV)
    if not marker:
        return
    path = Path(marker)
    if path.exists():
        return
    path.write_text(str(os.getpid()))
    os.kill(os.getpid(), signal.SIGKILL)


def user_can_decide(user) -> bool:
    """For UIs: show decision buttons only to those the service would let through."""
    return bool(user.is_authenticated and user.has_perm(APPROVE_PERMISSION) and "finance" in user_roles(user))
