"""Filing a refund the provider refused again: `approval_request_payment_retry` (finance, never the
filer) files a new request for the same exact refund (a refund paid in legs: the refused legs only,
as approved) under a new idempotency key (`<key>:r<n>`), linked as the refused request's
replacement; the ticket goes back to `approval_required` and finance approves it as any other
request. A new key means a new refund at the provider.
"""

from decimal import Decimal

from django.db import transaction
from django.utils import timezone

from ledger.exceptions import InvalidInput, NotFound
from ledger.models import RefundStatus
from ledger.money import ZERO, money_parse
from ledger.selectors import order_refund_position
from ledger.services import REFUSED_STATUSES, canonical_hash
from ledger.tenancy import tenant_for_user

from ..destinations import approval_leg_key, approval_request_entries
from ..exceptions import ApprovalConflict
from ..followups import approval_followups_waiting
from ..gate import policy_current
from ..locks import order_lock
from ..models import ApprovalRequest
from ..signals import approval_refile_check, approval_replaced
from .decisions import approval_decider_check
from .requests import approval_request_replacement_key


def approval_request_payment_retry(*, request_id: int, user, note: str = "") -> ApprovalRequest:
    """File the refund a provider refused again, as a new request for finance to decide.

    Only a `payment_failed` request, once (a second retry of the same request is a conflict:
    decide the first). The new request has the same exact args (and hash) under a new key (of a
    refund paid in several legs, only the legs the provider refused, exactly as approved), the
    facts it is checked against taken now (what is refundable, the current policy), and needs the
    same number of approvers. Who may: whoever may decide the request (finance, not the filer)."""
    tenant = tenant_for_user(user)
    try:
        request = ApprovalRequest.objects.for_tenant(tenant).get(pk=request_id)
    except (ApprovalRequest.DoesNotExist, ValueError, TypeError):
        raise NotFound(f"Approval request {request_id} not found.") from None
    approval_decider_check(user=user, request=request)
    now = timezone.now()
    with transaction.atomic():
        order = order_lock(order_id=request.order_id)
        request = ApprovalRequest.objects.select_for_update().get(pk=request.pk)
        if request.status != ApprovalRequest.Status.PAYMENT_FAILED or request.replaced_by_id is not None:
            raise ApprovalConflict(
                f"Request #{request.pk} is {request.status}"
                + (f" and was filed again as #{request.replaced_by_id}" if request.replaced_by_id else "")
                + "; only a refused payment is filed again.",
                code="not_payment_failed",
            )
        if approval_followups_waiting(request=request):
            # Its ticket has not heard everything yet (a receiver failed and is retried): asked
            # now, it would answer from a state it is about to leave.
            raise ApprovalConflict(
                f"The ticket of request #{request.pk} has not caught up with its approval yet (a follow-up "
                "waits to be retried); file it again once it has.",
                code="followup_waiting",
            )
        # Whatever the request is for may refuse first (its ticket closed meanwhile): nothing written.
        approval_refile_check.send(sender=ApprovalRequest, request=request)
        policy = policy_current(order.tenant)
        if policy is None:
            raise InvalidInput("The shop has no published refund policy.", code="no_policy")
        args, amount = _refused_legs_args(request=request)
        refundable = order_refund_position(order).refundable
        if amount > refundable:
            raise ApprovalConflict(
                f"Only {refundable} {order.currency} is refundable on {order.external_id} now.",
                code="refund_exceeds_refundable",
            )
        replacement = ApprovalRequest.objects.create(
            tenant_id=request.tenant_id,
            action=request.action,
            order=order,
            amount=amount,
            currency=request.currency,
            args=args,
            args_hash=canonical_hash(args),
            idempotency_key=approval_request_replacement_key(key=request.idempotency_key),
            policy=policy,
            policy_version=policy.version,
            refundable_at_request=refundable,
            trace_id=request.trace_id,
            ticket_ref=request.ticket_ref,
            approver_role=request.approver_role,
            required_approvals=request.required_approvals,
            expires_at=now + (request.expires_at - request.created_at),
            # The same makers and the same kind of request: a person's exception stays one.
            requested_by=request.requested_by,
            filed_by=request.filed_by,
            origin=request.origin,
            policy_exception=request.policy_exception,
            waived_rules=request.waived_rules,
            proposal_reason=request.proposal_reason,
            decision_note=f"Filed again by {user.get_username()} after the provider refused request #{request.pk}"
            + (f": {note}" if note else "."),
        )
        ApprovalRequest.objects.filter(pk=request.pk).update(replaced_by=replacement, updated_at=now)
        request.refresh_from_db()
        approval_replaced.send(sender=ApprovalRequest, request=replacement, old=request)
    return replacement


def _refused_legs_args(*, request: ApprovalRequest) -> tuple[dict, Decimal]:
    """The args (and amount) of the refund to file again: the request's own when it names one leg
    or none; of a request paid in several legs, only the legs the provider refused, each exactly as
    approved (the legs it paid stand, and are never paid twice). Refuses while a leg has no answer
    yet (`legs_pending`): what to file again is known only once every leg has one."""
    args = dict(request.args or {})
    legs = args.get("legs") or []
    if len(legs) <= 1:
        return args, request.amount
    entries = {entry.idempotency_key: entry for entry in approval_request_entries(request=request)}
    statuses = [entries.get(approval_leg_key(request_key=request.idempotency_key, index=n)) for n in range(len(legs))]
    if any(entry is None or entry.status == RefundStatus.PENDING for entry in statuses):
        raise ApprovalConflict(
            f"A leg of request #{request.pk} has no answer from the provider yet; file it again once every leg has one.",
            code="legs_pending",
        )
    refused = [leg for leg, entry in zip(legs, statuses, strict=True) if entry.status in REFUSED_STATUSES]
    if not refused:
        raise ApprovalConflict(
            f"No leg of request #{request.pk} was refused: nothing to file again.", code="no_leg_refused"
        )
    amount = sum((money_parse(leg["amount"]) for leg in refused), ZERO)
    args.update(legs=refused, amount=str(amount), destination_method=refused[0]["method"])
    return args, amount
