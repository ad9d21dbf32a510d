"""The one owner of an approval request's state: which transitions are allowed, and how one is
applied.

Every write of `ApprovalRequest.status` after the request is made goes through
`approval_request_transition` (a test finds every other writer). A move is a compare-and-set:
the row is updated only while its status is one the table allows to move to the target (and,
when the caller says so, one of `from_`, and matching `when`), so two writers racing on one
request never both win and a decided request is never moved back by a late event. A row count
of 0 means someone else moved it first: the function returns False and the caller answers as it
always did (a 409, or nothing to do).

A request is made `pending` (approval_request_create, and the payment retry's new request):
nothing moves one back there.
"""

from collections.abc import Iterable

from django.db.models import Q
from django.utils import timezone

from .models import ApprovalRequest

Status = ApprovalRequest.Status

# target status -> the statuses a request may be in to move there, and who moves it.
TRANSITIONS: dict[str, frozenset[str]] = {
    # Made pending; never moved back.
    Status.PENDING: frozenset(),
    # Finance's last distinct approval (approvals.services.decisions).
    Status.APPROVED: frozenset({Status.PENDING}),
    # Finance's other decisions (approvals.services.decisions).
    Status.DENIED: frozenset({Status.PENDING}),
    Status.CHANGES_REQUESTED: frozenset({Status.PENDING}),
    Status.ESCALATED: frozenset({Status.PENDING}),
    # The expiry sweep (approvals.services.requests).
    Status.EXPIRED: frozenset({Status.PENDING}),
    # Its ticket was closed or escalated by a person (approvals.services.withdrawal).
    Status.WITHDRAWN: frozenset({Status.PENDING}),
    # The facts changed at the decision or at the execution, a dispute opened before the ledger
    # write, or a later leg of the request it refiles failed (approvals.services.invalidation).
    Status.INVALIDATED: frozenset({Status.PENDING, Status.APPROVED}),
    # The evaluator's verdict on every leg paid (approvals.services.verification).
    Status.EXECUTED: frozenset({Status.APPROVED}),
    # The ledger refused the write (approvals.services.execution), or the verdict failed, also later on an
    # executed request (approvals.services.verification).
    Status.FAILED: frozenset({Status.APPROVED, Status.EXECUTED}),
    # The provider refused a leg, also days after it reported it paid: only
    # approval_payment_failed (approvals.services.execution), called by the receiver of the ledger's refund
    # events (approvals.ledger_events) and by the execution that saw the refusal.
    Status.PAYMENT_FAILED: frozenset({Status.APPROVED, Status.EXECUTED}),
}

# Statuses no transition leaves: the request is done (a refused payment is filed again as a new
# request, never by moving this one).
TERMINAL: frozenset[str] = frozenset(
    status for status in Status if not any(status in sources for sources in TRANSITIONS.values())
)


def approval_request_transition_allowed(*, request: ApprovalRequest, to: str) -> bool:
    """Whether the table lets `request`, as read, move to `to`. Only
    `approval_request_transition` decides: the row may have moved since it was read."""
    return request.status in TRANSITIONS[to]


def approval_request_transition(
    *,
    request: ApprovalRequest,
    to: str,
    from_: str | Iterable[str] | None = None,
    when: Q | None = None,
    **fields,
) -> bool:
    """Move `request` to status `to` by compare-and-set; True if this call moved it.

    `from_` (a status or several) narrows the table's sources to what the caller read; `when`
    adds conditions the row must still meet (the decision's args hash, an expiry). Other
    `fields` are written in the same UPDATE (`updated_at` defaults to now). On success the
    instance gets the written values; on failure it is left as it was."""
    allowed = TRANSITIONS[to]
    if from_ is not None:
        allowed = allowed & frozenset({from_} if isinstance(from_, str) else from_)
    values = {"status": to, "updated_at": timezone.now(), **fields}
    rows = ApprovalRequest.objects.filter(pk=request.pk, status__in=allowed)
    if when is not None:
        rows = rows.filter(when)
    if rows.update(**values) != 1:
        return False
    for name, value in values.items():
        setattr(request, name, value)
    return True
