"""The approvals endpoints (docs/api.md). Thin: parse, call one selector or service, serialise."""

from typing import Literal

from ninja import Field, Query, Router, Schema
from ninja.pagination import paginate
from pydantic import ConfigDict

from ledger.committed import when_database_answers
from ledger.money import MoneyIn
from ledger.pagination import LimitOffsetPage, SerializedQuerySet
from ledger.schemas import BodyIn

from .models import ApprovalRequest
from .schemas import ApprovalOut, approval_serialize
from .second_factor import second_factor_check
from .selectors import approval_get, approvals_for
from .services.decisions import approval_request_decide

router = Router(tags=["approvals"])


# A Literal, not the model's TextChoices: pydantic names an enum's schema after its class, and
# the ticket's enum is called `Status` too, so the two collided in the OpenAPI document.
ApprovalStatus = Literal[tuple(ApprovalRequest.Status.values)]


class ApprovalFilter(Schema):
    status: ApprovalStatus | None = Field(None, description="One of the approval request's statuses.")


class DecisionIn(BodyIn):
    # JSON Schema says what decisions.py checks: a wanted amount only with request_changes.
    model_config = ConfigDict(
        json_schema_extra={
            "if": {"properties": {"decision": {"not": {"const": "request_changes"}}}},
            "then": {"properties": {"wanted_amount": {"type": "null"}}},
        }
    )

    decision: Literal["approve", "deny", "request_changes", "escalate"]
    args_hash: str = Field(..., min_length=1, max_length=64, description="The hash of the args you reviewed.")
    note: str = Field("", max_length=4000)
    wanted_amount: MoneyIn | None = Field(
        None,
        description="Only with request_changes (else 422 wanted_amount_unexpected): the amount finance wants "
        "instead, a decimal string, at most the approved cap (else 422 wanted_amount_above_cap).",
    )


@router.get("", response=list[ApprovalOut])
@paginate(LimitOffsetPage)
def approval_list(request, filters: Query[ApprovalFilter]):
    """The caller's tenant's approval requests, oldest first (`?status=pending` for the queue)."""
    queryset = approvals_for(request.user).order_by("created_at", "id")
    if filters.status:
        queryset = queryset.filter(status=filters.status)
    return SerializedQuerySet(queryset, approval_serialize)


@router.get("/{int:request_id}", response=ApprovalOut)
def approval_detail(request, request_id: int):
    return approval_serialize(approval_get(user=request.user, request_id=request_id))


@router.post("/{int:request_id}/decision", response=ApprovalOut)
def approval_decision(request, request_id: int, body: DecisionIn):
    """Decide one exact action. `args_hash` must be the request's; wrong hash, expired or already
    decided answer 409; the filer of the ticket or a user without the finance role 403. Above the
    policy threshold the first approval answers 200 with the request still pending."""
    if getattr(request, "api_token", None) is None:
        # A session signed in with a password alone decides nothing: the admin's second factor
        # applies here too. A Bearer token is a credential an administrator issued, not a password.
        second_factor_check(user=request.user)
    approval_request_decide(
        request_id=request_id,
        user=request.user,
        decision=body.decision,
        args_hash=body.args_hash,
        note=body.note,
        wanted_amount=body.wanted_amount,
    )
    # The decision is committed: its answer waits out a database that is restarting.
    return when_database_answers(lambda: approval_serialize(approval_get(user=request.user, request_id=request_id)))
