"""The runtime's decision on the agent's draft: where a proposal becomes an outcome.

The model proposes with refunds.create_draft; the runtime decides here, from the ledger and the
current policy (approvals.gate), never from the model's numbers. One transaction holds the
draft row, the gate's verdict, the approval request when the refund is eligible, the ticket's
move (by compare-and-set, from `running` only) and the caller's stop of its run, so a resumed
run finds the ticket stopped and does nothing more. Their trace events are written in that
transaction after every other lock it takes, and dropped with it if it fails.

The agent loop calls this as a step of its own: it persists the model's call first, so a worker
that dies while deciding resumes with this same proposal and no new model call.
"""

from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime

from django.db import transaction
from django.utils import timezone

from approvals import gate
from approvals.decision_records import decision_record_create
from approvals.gate import Outcome
from approvals.models import ApprovalRequest, RefundPolicy
from approvals.services.requests import approval_request_create
from ledger.models import Order
from ledger.money import ZERO
from ledger.selectors import order_refund_position

from ..exceptions import TicketStateConflict
from ..labels import label
from ..models import AgentRun, RefundDraft, Ticket
from ..redaction import sensitive_values_for_ticket
from ..selectors import order_open_tickets
from ..ticket_state import STOP_REASON_FOR_STATUS, ticket_transition
from ..tracing import trace_event_build, trace_events_write
from .tools import CREATE_DRAFT, CreateDraftArgs


@dataclass(frozen=True)
class DraftDecision:
    """What the runtime made of a draft, as the loop needs it to answer the call and stop its run."""

    draft: RefundDraft
    verdict: gate.GateVerdict
    status: str  # the ticket's new status: approval_required, denied or escalated
    stop_reason: str  # the stop reason that status implies (the run stops with it too)
    detail: str  # what a person reads as the ticket's stop_detail
    result: dict  # the answer to the model's tool call
    approval: ApprovalRequest | None
    decided_at: datetime


def agent_draft_decide(
    *,
    run: AgentRun,
    ticket: Ticket,
    args: CreateDraftArgs,
    raw_args: dict,
    order: Order | None,
    stop_run: Callable[[DraftDecision], None],
    sensitive: list[str] | None = None,
    trace: Callable[..., None] | None = None,
    reply_model_claim: str = "",
) -> DraftDecision:
    """Decide the agent's draft and stop the ticket with the outcome; returns the decision.

    `args` are the validated draft, `raw_args` the model's arguments as sent (traced).
    `reply_model_claim` is what the reply's second model check found (agent.reply_check; the
    loop makes that call, as it makes its other model calls), '' for nothing. `order`
    is the order the draft is about, already scope-checked: the ticket's own, or on a
    customer-level ticket the customer's order the draft names (None: it named none, and a
    person must decide). Items: the ticket's if it named any, else the draft's where the gate
    lets them narrow the ticket's scope (approvals.gate). On a
    customer-level ticket the ticket takes that order (and the items) in the same transaction,
    so everything downstream reads an ordinary order ticket.

    `stop_run(decision)` runs inside the transaction once the ticket moved: the caller answers
    the tool call and stops its run there, so the run's stop commits or rolls back with the
    decision. Raises TicketStateConflict, with nothing written, if the ticket is no longer
    `running` (a person changed it meanwhile).

    `trace(**event)` records the decision's trace events where the caller keeps its own (the
    loop: its stop writes them with the run's, in order); a caller that records what `trace`
    received must drop it if this raises. Without it, the events are written here, after
    `stop_run`."""
    if sensitive is None:
        sensitive = sensitive_values_for_ticket(ticket)
    now = timezone.now()
    if order is None:
        policy, original_method, payments = gate.policy_current(ticket.tenant), None, None
    else:
        reads = gate.decision_reads(tenant=ticket.tenant, order=order)
        policy, original_method, payments = reads.policy, reads.original_method, reads.payments
    # Read once: the gate decides on it and the decision's record keeps it (a policy replay).
    position = order_refund_position(order) if order is not None else None
    verdict, proposal, adopt = _verdict(
        ticket=ticket,
        args=args,
        order=order,
        policy=policy,
        original_method=original_method,
        position=position,
        payments=payments,
        now=now,
        reply_model_claim=reply_model_claim,
    )
    status = _status_for(verdict, policy)
    # Made once: the draft keeps it, the policy event records it (redacted into a dict of its own).
    verdict_data = verdict.as_dict()

    events = []
    if trace is None:

        def trace(**kwargs):
            events.append(trace_event_build(ticket=ticket, run=run, sensitive=sensitive, **kwargs))

    with transaction.atomic():
        draft = RefundDraft.objects.create(
            run=run,
            ticket=ticket,
            recommendation=args.recommendation,
            amount=args.amount,
            currency=order.currency if order is not None else ticket.currency,
            policy_version=args.policy_version,
            rationale=args.rationale,
            customer_reply=args.customer_reply,
            gate_verdict=verdict_data,
        )
        trace(
            span="draft",
            status="ok",
            decision=args.recommendation,
            tool=CREATE_DRAFT,
            # In words for the trace's reason column; the code is the event's `decision`.
            reason=f"Draft {draft.pk}: {label(args.recommendation, 'recommendation')}"
            f"{f' {args.amount}' if args.amount is not None else ''}, citing {args.policy_version or 'no policy'}.",
            data={"draft": draft.pk, "args": raw_args},
        )
        trace(
            span="policy",
            status="ok" if status == Ticket.Status.APPROVAL_REQUIRED else status,
            decision=verdict.outcome,
            reason=verdict.reason[:200],
            tool=CREATE_DRAFT,
            data=verdict_data,
        )
        result = {
            "draft": draft.pk,
            "outcome": verdict.outcome,
            "reasons": verdict.reasons,
            "allowed_amount": None if verdict.allowed_amount is None else str(verdict.allowed_amount),
        }
        detail, approval = verdict.reason, None
        if status == Ticket.Status.APPROVAL_REQUIRED:
            approval, detail = _approval_request(
                ticket=ticket, draft=draft, order=order, policy=policy, verdict=verdict, trace=trace
            )
            result["approval"] = approval.pk
        decision_record_create(
            tenant=ticket.tenant,
            order=order,
            policy=policy,
            proposal=proposal,
            verdict=verdict,
            position=position,
            requested_amount=ticket.requested_amount,
            requested_currency=ticket.currency or None,
            item_ids=verdict.item_ids or list(ticket.items or []) or list(args.items or []),
            refund_to=ticket.refund_to,
            now=now,
            ticket_ref=ticket.pk,
            required_approvals=approval.required_approvals if approval is not None else 0,
            approval_pk=approval.pk if approval is not None else None,
        )
        # The ticket moves only while the loop holds it running; the stop reason is the status's.
        stop_reason = STOP_REASON_FOR_STATUS[status]
        if not ticket_transition(
            ticket=ticket,
            to=status,
            only_from={Ticket.Status.RUNNING},
            stop_reason=stop_reason,
            detail=detail,
            updated_at=now,
            **adopt,
        ):
            # A person changed the ticket meanwhile: roll the decision back.
            raise TicketStateConflict(f"Ticket {ticket.pk} was changed by a person while the agent ran.")
        decision = DraftDecision(
            draft=draft,
            verdict=verdict,
            status=status,
            stop_reason=stop_reason,
            detail=detail,
            result=result,
            approval=approval,
            decided_at=now,
        )
        stop_run(decision)
        trace_events_write(events)
    return decision


def _approval_request(*, ticket, draft, order, policy, verdict, trace) -> tuple[ApprovalRequest, str]:
    """The approval request for exactly what the gate allowed, keyed by the draft; and the
    ticket's stop detail that tells finance what to decide."""
    approval, created = approval_request_create(
        order=order,
        policy=policy,
        verdict=verdict,
        idempotency_key=f"refund:{ticket.tenant.slug}:ticket-{ticket.pk}:draft-{draft.pk}",
        requested_by=ticket.created_by,
        filed_by=ticket.created_by,
        ticket_ref=ticket.pk,
        trace_id=str(ticket.trace_id),
        fresh_key=True,  # derived from the draft inserted just before, in this transaction
    )
    detail = (
        f"Finance must approve a refund of {approval.amount} {approval.currency} on "
        f"{order.external_id} under {approval.policy_version} (approval #{approval.pk})."
    )
    trace(
        span="approval",
        status="pending",
        decision="requested" if created else "replayed",
        tool="refunds.issue_refund",
        reason=detail[:200],
        data={
            "approval": approval.pk,
            "amount": str(approval.amount),
            "currency": approval.currency,
            "args_hash": approval.args_hash,
            "idempotency_key": approval.idempotency_key,
            "required_approvals": approval.required_approvals,
        },
    )
    return approval, detail


def _verdict(
    *,
    ticket: Ticket,
    args: CreateDraftArgs,
    order: Order | None,
    policy: RefundPolicy | None,
    original_method,
    position=None,
    payments=None,
    now: datetime,
    reply_model_claim: str = "",
) -> tuple[gate.GateVerdict, gate.Proposal | None, dict]:
    """The gate's verdict on the draft, the proposal it decided, and what a customer-level ticket
    adopts from it."""
    filed_items = list(ticket.items or [])
    if order is None:
        verdict = gate.GateVerdict(
            outcome=Outcome.ESCALATED,
            currency=ticket.currency,
            refundable=ZERO,
            policy_version=policy.version if policy else None,
            codes=["order_not_named"],
            reasons=["The ticket names no order and the draft named none of the customer's orders: a person decides."],
        )
        return verdict, None, {}
    proposal = gate.Proposal(
        recommendation=args.recommendation,
        amount=args.amount,
        policy_version=args.policy_version,
        customer_reply=args.customer_reply,
        destination=args.destination,
        items=list(args.items) if args.items else None,
        reply_model_claim=reply_model_claim,
    )
    verdict = gate.policy_gate_evaluate(
        order=order,
        policy=policy,
        proposal=proposal,
        requested_amount=ticket.requested_amount,
        requested_currency=ticket.currency or None,
        item_ids=filed_items,
        refund_to=ticket.refund_to,
        now=now,
        original_method=original_method,
        position=position,
        payments=payments,
        scope_open=ticket.order_id is None,
        risk_check=True,
        open_tickets_on_order=order_open_tickets(order=order, ticket=ticket),
    )
    adopt = {}
    if ticket.order_id is None:
        adopt = {"order": order, "currency": order.currency}
    # The ticket takes the draft's items only where the gate let them narrow its scope.
    items = list(verdict.item_ids)
    if items != filed_items and set(items) <= set(order.items.values_list("item_id", flat=True)):
        adopt["items"] = items
    return verdict, proposal, adopt


def _status_for(verdict: gate.GateVerdict, policy: RefundPolicy | None) -> str:
    """Only an eligible refund with an amount under a current policy goes to finance; a denial
    stays denied; everything else goes to a person."""
    if verdict.outcome == Outcome.APPROVAL_REQUIRED and policy is not None and verdict.allowed_amount:
        return Ticket.Status.APPROVAL_REQUIRED
    if verdict.outcome == Outcome.DENIED:
        return Ticket.Status.DENIED
    return Ticket.Status.ESCALATED
