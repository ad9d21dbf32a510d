"""The one owner of a ticket's state: which transitions are allowed, and how one is applied.

Every write of `Ticket.status` goes through `ticket_transition` (the agent's claim, the loop, the
agent's decision on a draft, the ticket services, the receivers of approval events). A move is a
compare-and-set: the row is updated
only while its status is one the table allows to move to the target, so two writers racing on
one ticket never both win, and a settled ticket is never moved back by a late event. The views
ask the same table what a person may do (`ticket_transition_allowed`) instead of keeping their
own lists.

`draft_ready` (status and stop reason) is part of the API (docs/api.md) but no code path assigns it:
the runtime decides a draft in the same transaction that stores it, so a ticket never rests
between "draft stored" and "decided". No transition leads to it (its row below is empty); it
is kept as a source of escalate and close only so a row that somehow holds it can still be
handed to a person or closed, as before.

The same UPDATE keeps `awaiting_person_since`, the escalation queue's clock: set when a ticket
enters the queue (escalated, failed, payment_failed), kept while it moves within it (a failed
ticket escalated by hand has waited since it failed), cleared when it leaves (a person proposes a
refund, the agent runs again, it is closed).
"""

from django.db import transaction
from django.db.models import Case, DateTimeField, F, Value, When
from django.utils import timezone

from .models import QUEUE_STATUSES, Ticket
from .replies import ticket_reply_compose
from .zendesk.writeback import is_zendesk_ticket, zendesk_outcome_record

# A ticket in one of these is done: nothing but the verification alert and the provider's late
# failure of a paid refund move it again.
SETTLED: frozenset[str] = frozenset({Ticket.Status.REFUNDED, Ticket.Status.CLOSED})

_EVERY: frozenset[str] = frozenset(Ticket.Status)

# target status -> the statuses a ticket may be in to move there.
TRANSITIONS: dict[str, frozenset[str]] = {
    # The agent takes a queued ticket; "request changes" and a re-run put one back in the queue.
    Ticket.Status.QUEUED: frozenset(
        {Ticket.Status.APPROVAL_REQUIRED, Ticket.Status.ESCALATED, Ticket.Status.FAILED, Ticket.Status.PAYMENT_FAILED}
    ),
    Ticket.Status.RUNNING: frozenset({Ticket.Status.QUEUED}),
    # Never assigned (see the module docstring): nothing moves a ticket here.
    Ticket.Status.DRAFT_READY: frozenset(),
    Ticket.Status.APPROVAL_REQUIRED: frozenset(
        # the agent's draft; a replacement request (at the decision, or at the execution of an
        # approved one whose facts changed); a person's proposal on an escalated, failed or
        # payment-failed ticket.
        {
            Ticket.Status.RUNNING,
            Ticket.Status.APPROVAL_REQUIRED,
            Ticket.Status.APPROVED,
            Ticket.Status.ESCALATED,
            Ticket.Status.FAILED,
            Ticket.Status.PAYMENT_FAILED,
        }
    ),
    Ticket.Status.DENIED: frozenset({Ticket.Status.RUNNING, Ticket.Status.APPROVAL_REQUIRED}),
    # Finance approved; the execution follows.
    Ticket.Status.APPROVED: frozenset({Ticket.Status.APPROVAL_REQUIRED}),
    # Only the evaluator's verdict on an executed refund settles a ticket as refunded.
    Ticket.Status.REFUNDED: frozenset({Ticket.Status.APPROVED}),
    # The provider refused the payout: back with finance. Also after it reported the refund paid
    # (a refund can fail days later): the money did not move, so finance files it again.
    Ticket.Status.PAYMENT_FAILED: frozenset({Ticket.Status.APPROVED, Ticket.Status.REFUNDED}),
    # A person (or finance, or an expiry) can hand any unsettled ticket to the human queue.
    Ticket.Status.ESCALATED: _EVERY - SETTLED,
    # A run that failed, or an execution whose verification failed (the alert moves even a
    # refunded ticket: the ledger disagrees with what was approved).
    Ticket.Status.FAILED: frozenset(
        {Ticket.Status.QUEUED, Ticket.Status.RUNNING, Ticket.Status.APPROVED, Ticket.Status.REFUNDED}
    ),
    # Never from under the agent while it runs, nor from under finance while it decides or the
    # refund executes: decide the approval first.
    Ticket.Status.CLOSED: _EVERY
    - SETTLED
    - {Ticket.Status.RUNNING, Ticket.Status.APPROVAL_REQUIRED, Ticket.Status.APPROVED},
}


class _Keep:
    def __repr__(self):
        return "KEEP"


# As a stop reason: leave the column as it is (closing keeps the reason the ticket stopped for).
KEEP = _Keep()

# The stop reason a person sees for a status the runtime stopped at. Statuses and stop reasons
# are separate enums; this mapping is where one meets the other, spelled out.
STOP_REASON_FOR_STATUS: dict[str, str | None | _Keep] = {
    Ticket.Status.QUEUED: None,
    Ticket.Status.RUNNING: None,
    Ticket.Status.DRAFT_READY: Ticket.StopReason.DRAFT_READY,
    Ticket.Status.APPROVAL_REQUIRED: Ticket.StopReason.APPROVAL_REQUIRED,
    # Past finance's approval the ticket no longer waits for anything: no stop reason.
    Ticket.Status.APPROVED: None,
    Ticket.Status.REFUNDED: None,
    Ticket.Status.PAYMENT_FAILED: Ticket.StopReason.FAILED,
    Ticket.Status.ESCALATED: Ticket.StopReason.ESCALATED,
    Ticket.Status.DENIED: Ticket.StopReason.DENIED,
    Ticket.Status.FAILED: Ticket.StopReason.FAILED,
    Ticket.Status.CLOSED: KEEP,
}

_UNSET = object()


def ticket_transition_allowed(*, ticket: Ticket, to: str) -> bool:
    """Whether the table lets `ticket`, as read, move to `to` (what a page may offer). Only
    `ticket_transition` decides: the row may have moved since it was read."""
    return ticket.status in TRANSITIONS[to]


def ticket_transition(
    *, ticket: Ticket, to: str, detail: str | None = None, stop_reason=_UNSET, only_from=None, **fields
) -> bool:
    """Move `ticket` to status `to` by compare-and-set; True if this call moved it.

    `stop_reason` defaults to the one the status implies (`STOP_REASON_FOR_STATUS`); pass it
    to say more (e.g. `budget_exhausted` for an escalation), or `KEEP` to leave it. `detail`,
    if given, becomes the readable `stop_detail`. `only_from` narrows the allowed sources
    further (e.g. the loop only moves a ticket it holds as `running`). Other `fields` are
    written in the same UPDATE (`updated_at` too, to share one timestamp with other rows). On
    success the instance is updated in place; on failure it is left as it was.

    The customer reply follows the outcome in the same UPDATE (refundagent.replies), unless
    `customer_reply` is given (a person's closing reply); so does `awaiting_person_since`.
    """
    allowed = TRANSITIONS[to]
    if only_from is not None:
        allowed = allowed & frozenset(only_from)
    if stop_reason is _UNSET:
        stop_reason = STOP_REASON_FOR_STATUS[to]
    values = {"status": to, "updated_at": timezone.now()}
    if stop_reason is not KEEP:
        values["stop_reason"] = stop_reason
    if detail is not None:
        values["stop_detail"] = detail
    if "customer_reply" not in fields:
        reply = ticket_reply_compose(ticket=ticket, to=to)
        if reply is not None:
            values["customer_reply"] = reply
    values.update(fields)
    # The queue's clock. Only a move that may start inside the queue (escalating a failed
    # ticket) keeps it, decided from the row's own status in the UPDATE (not from a possibly
    # stale instance) and read back; every other move into the queue starts it now.
    within_queue = to in QUEUE_STATUSES and bool(allowed & frozenset(QUEUE_STATUSES))
    if to not in QUEUE_STATUSES:
        values["awaiting_person_since"] = None
    elif within_queue:
        values["awaiting_person_since"] = _awaiting_kept_or(values["updated_at"])
    else:
        values["awaiting_person_since"] = values["updated_at"]
    if not is_zendesk_ticket(ticket):
        return _apply(ticket, to, allowed, values, within_queue)
    # A ticket from Zendesk owes its account a note at each outcome (refundagent.zendesk.writeback):
    # written here, the one place every outcome passes, in the same transaction as the move.
    with transaction.atomic():
        if not _apply(ticket, to, allowed, values, within_queue):
            return False
        zendesk_outcome_record(ticket=ticket, to=to)
    return True


def _apply(ticket: Ticket, to: str, allowed, values: dict, within_queue: bool) -> bool:
    if Ticket.objects.filter(pk=ticket.pk, status__in=allowed).update(**values) != 1:
        return False
    for name, value in values.items():
        setattr(ticket, name, value)
    if within_queue:
        ticket.awaiting_person_since = (
            Ticket.objects.filter(pk=ticket.pk).values_list("awaiting_person_since", flat=True).get()
        )
    return True


def _awaiting_kept_or(now):
    """The row's clock if it already waits in the queue, else `now`."""
    return Case(
        When(status__in=QUEUE_STATUSES, awaiting_person_since__isnull=False, then=F("awaiting_person_since")),
        default=Value(now, output_field=DateTimeField()),
        output_field=DateTimeField(),
    )
