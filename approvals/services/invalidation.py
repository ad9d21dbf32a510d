"""A request whose facts changed: what changed (re-checked under the order lock before
approving and before executing), and its invalidation with a replacement when the refund is
still eligible."""

from datetime import datetime

from django.utils import timezone

from ledger.exceptions import DomainError
from ledger.models import Order
from ledger.selectors import order_refund_position

from ..destinations import approval_destination_resolve, approval_legs_resolve, approval_request_entries
from ..exceptions import ApprovalConflict
from ..gate import Outcome, Proposal, policy_current, policy_gate_evaluate
from ..locks import order_lock
from ..models import ApprovalRequest
from ..reason_words import gate_outcome_words
from ..request_state import approval_request_transition
from ..signals import approval_invalidated, approval_replaced
from .requests import approval_request_create, approval_request_replacement_key


def approval_facts_changed(*, request: ApprovalRequest, order: Order, now: datetime | None = None) -> str:
    """What changed since the request was made, in words, or '' if nothing did. Re-runs the
    policy gate on the request's exact args against the current facts: the order's status and
    window, the destination (still the customer's, still the one approved), the items still
    refundable, the currency, the refundable amount and the current policy version. Called under
    the order lock before approving and again before executing."""
    now = now or timezone.now()
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
    if order.currency != request.currency:
        changes.append(f"currency was {request.currency}, now {order.currency}")
    args = request.args or {}
    try:
        refund_to, kind = approval_destination_resolve(request=request)
        approval_legs_resolve(request=request)
    except DomainError as exc:
        changes.append(f"destination: {exc.message}")
        return "; ".join(changes)
    proposal = Proposal(
        recommendation="refund", amount=request.amount, policy_version=request.policy_version, destination=kind
    )
    verdict = policy_gate_evaluate(
        order=order,
        policy=policy,
        proposal=proposal,
        requested_amount=request.amount,
        requested_currency=request.currency,
        item_ids=list(args.get("items") or []),
        refund_to=_gate_refund_to(args=args, refund_to=refund_to, kind=kind),
        now=now,
        # A person's exception was approved outside exactly these rules: they are not a change.
        waive=frozenset(request.waived_rules or ()),
    )
    if verdict.outcome != Outcome.APPROVAL_REQUIRED:
        # The stale citation is already named above.
        if verdict.codes != ["citation_stale"]:
            changes.append(f"the policy gate now {gate_outcome_words(verdict.outcome)}: {verdict.reason}")
    elif verdict.allowed_amount != request.amount:
        changes.append(f"the gate now allows {verdict.allowed_amount}, not {request.amount} {request.currency}")
    elif "destination_method" in args and verdict.destination_method != args["destination_method"]:
        changes.append(f"destination was {args['destination_method']}, now {verdict.destination_method}")
    elif args.get("legs") and _legs_paid(verdict.legs) != _legs_paid(args["legs"]):
        changes.append(f"the refund's legs were {_legs_paid(args['legs'])}, now {_legs_paid(verdict.legs)}")
    return "; ".join(changes)


def _gate_refund_to(*, args: dict, refund_to, kind: str):
    """The method the gate is asked about again: the exact leg approved (a request naming one leg);
    a refund split over several legs, or an older request naming none, any of the order's payments
    (the gate splits it again the same way when nothing changed)."""
    if kind != "original" or len(args.get("legs") or []) == 1:
        return refund_to
    return None


def _legs_paid(legs: list[dict]) -> list[tuple]:
    """What a leg pays and where (what the payment could still return may move without changing it)."""
    return [(leg.get("payment"), leg.get("method"), leg.get("kind"), leg.get("amount")) for leg in legs]


def approval_request_invalidate(
    *, request, reason: str, actor=None, now, from_status=ApprovalRequest.Status.PENDING, replace: bool = True
):
    """Mark a request whose facts changed `invalidated` and, when the refund is still eligible (and
    `replace`), make its replacement (a new exact action with its own args, hash and key). Without
    `replace` a person decides what is owed now (its ticket goes to the human queue). Runs inside
    the caller's transaction with the order row locked. Returns the replacement or None."""
    fields = {"decision_note": f"Invalidated: {reason}", "updated_at": now}
    if from_status == ApprovalRequest.Status.PENDING:
        fields.update(decided_by=actor, decided_at=now)
    moved = approval_request_transition(
        request=request, to=ApprovalRequest.Status.INVALIDATED, from_=from_status, **fields
    )
    if not moved:
        raise ApprovalConflict(f"Request #{request.pk} was decided by someone else.", code="already_decided")
    if not replace:
        request.refresh_from_db()
        approval_invalidated.send(sender=ApprovalRequest, request=request, actor=actor, reason=reason, verdict={})
        return None
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
        order=order,
        policy=policy,
        proposal=proposal,
        item_ids=request.args.get("items") or [],
        refund_to=_gate_refund_to(args=request.args or {}, refund_to=refund_to, kind=kind),
        now=now,
        # A person's exception stays one: the same rules waived, the same dual control.
        waive=frozenset(request.waived_rules or ()),
    )
    replacement = None
    if verdict.outcome == Outcome.APPROVAL_REQUIRED:
        replacement, _ = approval_request_create(
            order=order,
            policy=policy,
            verdict=verdict,
            idempotency_key=approval_request_replacement_key(key=request.idempotency_key),
            requested_by=request.requested_by,
            filed_by=request.filed_by,
            ticket_ref=request.ticket_ref,
            trace_id=request.trace_id,
            origin=request.origin,
            policy_exception=request.policy_exception,
            waived_rules=request.waived_rules or (),
            proposal_reason=request.proposal_reason,
        )
        ApprovalRequest.objects.filter(pk=request.pk).update(replaced_by=replacement)
    request.refresh_from_db()
    approval_invalidated.send(
        sender=ApprovalRequest, request=request, actor=actor, reason=reason, verdict=verdict.as_dict()
    )
    if replacement is not None:
        approval_replaced.send(sender=ApprovalRequest, request=replacement, old=request)
    return replacement


def approval_request_hold_for_dispute(*, request: ApprovalRequest, dispute) -> ApprovalRequest | None:
    """A dispute opened on the request's order: a request waiting for a decision, or approved but
    not yet written to the ledger, is held (invalidated with the dispute as the reason; the gate
    makes no replacement while the dispute is open, so the ticket goes to a person). Nothing is
    paid until a person decides again. Delivered late (approvals.ledger_events), it holds only
    what still waits: a dispute closed meanwhile, or a request decided or written meanwhile, is
    left alone. Returns the replacement, if any."""
    order_lock(order_id=request.order_id)
    request.refresh_from_db()
    dispute.refresh_from_db()
    if (
        not dispute.is_open
        or request.status not in (ApprovalRequest.Status.PENDING, ApprovalRequest.Status.APPROVED)
        or request.ledger_entry_id is not None
        or approval_request_entries(request=request).exists()
    ):
        return None
    reason = (
        f"the order is disputed ({dispute.provider_ref}: {dispute.status}); "
        f"the charge is {'still' if dispute.is_charge_refundable else 'not'} refundable at the provider"
    )
    return approval_request_invalidate(request=request, reason=reason, now=timezone.now(), from_status=request.status)
