"""The one owner of a ticket's state: which transitions are allowed, and how one is applied.

Every write of `Ticket.status` goes through `ticket_transition` (the loop, the ticket services,
the receivers of approval events, the views). It applies the move by compare-and-set: the row
is updated only while its status is one the table allows to move to the target, so two writers
racing on one ticket never both win, and a settled ticket is never moved back by a late event.
"""

from django.utils import timezone

from .models import Ticket

S = Ticket.Status
R = Ticket.StopReason

# target status -> the statuses a ticket may be in to move there.
TRANSITIONS: dict[str, frozenset[str]] = {
    # The agent takes a queued ticket; "request changes" and a re-run put one back in the queue.
    S.QUEUED: frozenset({S.APPROVAL_REQUIRED, S.ESCALATED, S.FAILED, S.PAYMENT_FAILED}),
    S.RUNNING: frozenset({S.QUEUED}),
    # The runtime's decision on the agent's draft.
    S.DRAFT_READY: frozenset({S.RUNNING}),
    S.APPROVAL_REQUIRED: frozenset(
        # the agent's draft; a replacement request; a person's proposal on an escalated,
        # failed or payment-failed ticket.
        {S.RUNNING, S.APPROVAL_REQUIRED, S.ESCALATED, S.FAILED, S.PAYMENT_FAILED}
    ),
    S.DENIED: frozenset({S.RUNNING, S.APPROVAL_REQUIRED}),
    # Finance approved; the execution follows.
    S.APPROVED: frozenset({S.APPROVAL_REQUIRED}),
    # Only the evaluator's verdict on an executed refund settles a ticket as refunded.
    S.REFUNDED: frozenset({S.APPROVED}),
    # The provider refused the payout: back with finance.
    S.PAYMENT_FAILED: frozenset({S.APPROVED}),
    S.ESCALATED: frozenset(
        {S.QUEUED, S.RUNNING, S.DRAFT_READY, S.APPROVAL_REQUIRED, S.DENIED, S.FAILED, S.PAYMENT_FAILED, S.ESCALATED}
    ),
    # A run that failed, or an execution whose verification failed (the alert moves even a
    # refunded ticket: the ledger disagrees with what was approved).
    S.FAILED: frozenset({S.QUEUED, S.RUNNING, S.APPROVED, S.REFUNDED}),
    S.CLOSED: frozenset(
        {S.QUEUED, S.DRAFT_READY, S.APPROVAL_REQUIRED, S.ESCALATED, S.DENIED, S.FAILED, S.PAYMENT_FAILED}
    ),
}

# A ticket in one of these is done: nothing but the verification alert moves it again.
SETTLED: frozenset[str] = frozenset({S.REFUNDED, S.CLOSED})

# The stop reason a person sees for a status the runtime stopped at. Statuses and stop reasons
# are separate enums; this mapping is where one meets the other, spelled out.
STOP_REASON_FOR_STATUS: dict[str, str | None] = {
    S.QUEUED: None,
    S.RUNNING: None,
    S.DRAFT_READY: R.DRAFT_READY,
    S.APPROVAL_REQUIRED: R.APPROVAL_REQUIRED,
    S.APPROVED: R.APPROVAL_REQUIRED,
    S.REFUNDED: R.APPROVAL_REQUIRED,
    S.PAYMENT_FAILED: R.FAILED,
    S.ESCALATED: R.ESCALATED,
    S.DENIED: R.DENIED,
    S.FAILED: R.FAILED,
    S.CLOSED: None,
}

_UNSET = object()


def ticket_transition(
    *, ticket: Ticket, to: str, detail: str | None = None, stop_reason=_UNSET, only_from=None, **fields
) -> bool:
    """Move `ticket` to status `to` by compare-and-set; True if this call moved it.

    `stop_reason` defaults to the one the status implies (`STOP_REASON_FOR_STATUS`); pass it
    to say more (e.g. `budget_exhausted` for an escalation). `detail`, if given, becomes the
    readable `stop_detail`. `only_from` narrows the allowed sources further (e.g. the loop only
    moves a ticket it holds as `running`). Other `fields` are written in the same UPDATE. On
    success the instance is updated in place; on failure it is left as it was.
    """
    allowed = TRANSITIONS[to]
    if only_from is not None:
        allowed = allowed & frozenset(only_from)
    if stop_reason is _UNSET:
        stop_reason = STOP_REASON_FOR_STATUS[to]
    values = {"status": to, "stop_reason": stop_reason, "updated_at": timezone.now(), **fields}
    if detail is not None:
        values["stop_detail"] = detail
    moved = Ticket.objects.filter(pk=ticket.pk, status__in=allowed).update(**values) == 1
    if moved:
        for name, value in values.items():
            setattr(ticket, name, value)
    return moved
