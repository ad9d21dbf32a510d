from datetime import datetime

from ninja import Field, Schema

from ledger.schemas import Money


class VoteOut(Schema):
    approver: str
    decision: str
    note: str
    at: datetime


class ApprovalOut(Schema):
    """docs/api.md: GET /api/approvals/{id}. Tickets embed the same object."""

    id: int
    status: str
    action: str
    order: str
    customer: str
    amount: Money
    currency: str
    args: dict
    args_hash: str
    idempotency_key: str
    policy_version: str
    trace_id: str
    approver_role: str
    required_approvals: int
    approvals: list[VoteOut]
    expires_at: datetime
    requested_by: str | None
    decided_by: str | None
    decided_at: datetime | None
    decision_note: str
    ticket: int | None
    ledger_entry: int | None
    origin: str = Field(description="agent: the agent's draft; human: proposed by a person (requested_by).")
    policy_exception: bool
    waived_rules: list[str]
    proposal_reason: str
    # status payment_failed: the provider's reason (finance may file the refund again)
    payment_failure: str | None = None


def approval_serialize(request) -> dict:
    """One approval request as the API shows it (select_related order__customer, requested_by,
    decided_by and prefetch votes__approver to keep it to a few queries)."""
    return {
        "id": request.pk,
        "status": request.status,
        "action": request.action,
        "order": request.order.external_id,
        "customer": request.order.customer.external_id,
        "amount": request.amount,
        "currency": request.currency,
        "args": request.args,
        "args_hash": request.args_hash,
        "idempotency_key": request.idempotency_key,
        "policy_version": request.policy_version,
        "trace_id": request.trace_id,
        "approver_role": request.approver_role,
        "required_approvals": request.required_approvals,
        "approvals": [
            {"approver": v.approver.get_username(), "decision": v.decision, "note": v.note, "at": v.created_at}
            for v in request.votes.all()
            if v.decision == "approve"
        ],
        "expires_at": request.expires_at,
        "requested_by": request.requested_by.get_username() if request.requested_by_id else None,
        "decided_by": request.decided_by.get_username() if request.decided_by_id else None,
        "decided_at": request.decided_at,
        "decision_note": request.decision_note,
        "ticket": request.ticket_ref,
        "ledger_entry": request.ledger_entry_id,
        "origin": request.origin,
        "policy_exception": request.policy_exception,
        "waived_rules": list(request.waived_rules or []),
        "proposal_reason": request.proposal_reason,
        "payment_failure": (request.verification or {}).get("detail") if request.status == "payment_failed" else None,
    }
