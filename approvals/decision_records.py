"""Recording the facts of each gate decision (approvals.models.DecisionRecord), so that a policy
replay (approvals.replay) can decide them again with a draft, whatever happened to the order
since. Written in the transaction of the decision it records: one commits with the other.

Two decisions are recorded: the gate's on an agent's draft (refundagent.agent.decision) and on
a person's proposal that became a request (approvals.services.proposals). Not recorded: a proposal the gate
refuses (a 422 that writes nothing; the person's next proposal is the decision), and the
re-checks of a request before approval and execution (approvals.services.invalidation), which decide the
one decision already recorded again: recording them would count it twice in a replay."""

from datetime import datetime
from decimal import Decimal

from django.db.models import ExpressionWrapper, Value
from django.db.models.functions import Coalesce

from ledger.models import Order, PaymentMethod
from ledger.money import ZERO
from ledger.selectors import MONEY_FIELD, RefundPosition, sum_subquery

from .gate import GateVerdict, Outcome, Proposal
from .models import DecisionRecord, RefundPolicy
from .services.requests import order_refund_exposure, order_requests_in_flight


def verdict_risk(verdict: GateVerdict) -> dict:
    """The risk figures the gate put on its verdict, if it has any (empty otherwise)."""
    risk = getattr(verdict, "risk", None) or getattr(verdict, "risk_signals", None) or {}
    return dict(risk) if isinstance(risk, dict) else {"signals": list(risk)}


def _exposure(*, order: Order, exclude_pk: int | None, refunded: Decimal | None):
    """order_refund_exposure as an expression of the record's INSERT (one statement, not two)."""
    if refunded is None:
        return order_refund_exposure(order=order, exclude_pk=exclude_pk)
    in_flight = sum_subquery(order_requests_in_flight(order=order, exclude_pk=exclude_pk), "amount", MONEY_FIELD)
    return ExpressionWrapper(
        Coalesce(in_flight, Value(ZERO), output_field=MONEY_FIELD) + Value(refunded),
        output_field=MONEY_FIELD,
    )


def decision_record_create(
    *,
    tenant,
    order: Order | None,
    policy: RefundPolicy | None,
    proposal: Proposal | None,
    verdict: GateVerdict,
    position: RefundPosition | None,
    requested_amount: Decimal | None,
    requested_currency: str | None,
    item_ids: list[str],
    refund_to: PaymentMethod | None,
    now: datetime,
    ticket_ref: int | None = None,
    source: str = DecisionRecord.Source.AGENT,
    required_approvals: int = 0,
    approval_pk: int | None = None,
    proposed_by=None,
    policy_exception: bool = False,
    waived_rules: list[str] | tuple = (),
) -> DecisionRecord:
    """Record the facts `verdict` was decided on. `position` is the one the gate read; the
    exposure dual control counts is read here, leaving out the request this decision made
    (`approval_pk`). A person's proposal (`source` PROPOSAL) also keeps who proposed it
    (`proposed_by`), whether it was a policy exception, and the rules the gate was told to waive
    (`waived_rules`), which a replay passes to the gate again."""
    fields = {}
    if order is not None:
        refunded = position.refunded_total if position is not None else None
        fields = dict(
            order=order,
            order_external_id=order.external_id,
            order_status=order.status,
            order_placed_at=order.placed_at,
            order_age_days=(now - order.placed_at).days,
            order_total=order.total,
            order_refunded=refunded,
            # Read in the INSERT itself: the decision's transaction pays one statement for the record.
            order_exposure=_exposure(order=order, exclude_pk=approval_pk, refunded=refunded),
            order_lines=[
                {
                    "line_no": line.line_no,
                    "item_id": line.item_id,
                    "price": str(line.price),
                    "quantity": line.quantity,
                    "refunded_quantity": line.refunded_quantity,
                }
                for line in (position.lines if position is not None else [])
            ],
        )
    foreign = bool(order is not None and refund_to is not None and refund_to.customer_id != order.customer_id)
    return DecisionRecord.objects.create(
        tenant=tenant,
        ticket_ref=ticket_ref,
        source=source,
        decided_at=now,
        currency=verdict.currency,
        requested_amount=requested_amount,
        requested_currency=requested_currency or "",
        item_ids=list(item_ids or []),
        destination={
            "kind": verdict.destination,
            "method": verdict.destination_method,
            "method_kind": verdict.destination_method_kind,
            "foreign": foreign,
        },
        proposal=(
            {}
            if proposal is None
            else {
                "recommendation": proposal.recommendation,
                "amount": None if proposal.amount is None else str(proposal.amount),
                "policy_version": proposal.policy_version,
                "destination": proposal.destination,
                "customer_reply": proposal.customer_reply,
                # Whether the gate found the reply promising a payment (a fact of the reply, not of
                # the policy): kept, so a replay need not read every reply again (approvals.replay).
                "reply_promises_payment": "reply_promises_payment" in verdict.codes,
                # What the reply's second model check found, if anything (a model call a replay
                # must not repeat).
                "reply_model_claim": proposal.reply_model_claim,
            }
        ),
        risk=verdict_risk(verdict),
        policy=policy,
        policy_version=verdict.policy_version or "",
        outcome=verdict.outcome,
        allowed_amount=verdict.allowed_amount if verdict.outcome == Outcome.APPROVAL_REQUIRED else None,
        codes=list(verdict.codes),
        order_disputes=verdict.facts.get("disputes", []),
        order_payments=verdict.facts.get("payments", []),
        required_approvals=required_approvals,
        proposed_by=proposed_by,
        policy_exception=policy_exception,
        waived_rules=sorted(waived_rules),
        **fields,
    )
