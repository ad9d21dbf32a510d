"""Approval events that must reach their receivers: the follow-ups.

Every event of approvals.signals is sent inside the transaction that made the change, and each
receiver runs in its own savepoint, so what it writes (the ticket's status, its trace) commits
with the change. When a receiver raises, its savepoint is rolled back and the change stands
(finance's decision, the ledger write: a listener never undoes them or turns them into a 500),
but the event is not dropped: an `ApprovalFollowUp` row keeps it for that receiver, written in
the same transaction, and the error is logged at ERROR.

Order matters: a ticket that missed "approved" must not hear "verified" first (its state machine
refuses `refunded` from `approval_required`, and the ticket would stay behind its money). So
while a receiver has an event of a ticket waiting, every later event of that ticket for that
receiver queues behind it (a row with no attempt yet), and delivery goes oldest first per
receiver and ticket, stopping at the first that fails.

The periodic outbox sweep (refundagent.sweep) calls `approval_followups_deliver`: each due row in
its own transaction, locked with SKIP LOCKED (two sweeps never deliver one row twice), the
receiver in a savepoint. A failure waits APPROVAL_FOLLOWUP_RETRY_SECONDS, doubled after each
failure up to APPROVAL_FOLLOWUP_RETRY_MAX_SECONDS, and is tried again: the ticket catches up
without a person once the cause is gone, and a follow-up that keeps failing costs one attempt per
backoff, never a spin. /api/health and the operator dashboard show what waits.

A receiver is known by its dispatch_uid, else by its qualified name; one receiver connected to
several events has one queue per ticket. This module knows no listener's app: the signals
register their receivers here as they are connected.
"""

import json
import logging
from collections.abc import Callable
from datetime import timedelta

from django.apps import apps
from django.conf import settings
from django.core.serializers.json import DjangoJSONEncoder
from django.db import models, transaction
from django.utils import timezone

from ledger.retry import retry_delay

from .models import ApprovalFollowUp, ApprovalRequest

logger = logging.getLogger(__name__)

# (event name, receiver key) -> (the signal, the receiver as written, not wrapped). Filled by
# ApprovalEvent.connect in every process, so the sweep finds the receiver an event was kept for.
_RECEIVERS: dict[tuple[str, str], tuple[object, Callable]] = {}
ERROR_LENGTH = 2000


def approval_followup_receiver_key(*, receiver: Callable, dispatch_uid=None) -> str:
    return str(dispatch_uid) if dispatch_uid else f"{receiver.__module__}.{receiver.__qualname__}"


def approval_followup_receiver_register(*, signal, key: str, receiver: Callable) -> None:
    _RECEIVERS[(signal.name, key)] = (signal, receiver)


def approval_followup_receiver_unregister(*, signal, key: str) -> None:
    _RECEIVERS.pop((signal.name, key), None)


def approval_followup_retry_delay(*, attempts: int) -> timedelta:
    """How long after its `attempts`-th failure a follow-up is tried again (doubling, capped)."""
    return timedelta(
        seconds=retry_delay(
            attempts=attempts,
            first=settings.APPROVAL_FOLLOWUP_RETRY_SECONDS,
            cap=settings.APPROVAL_FOLLOWUP_RETRY_MAX_SECONDS,
        )
    )


def _ticket_queue(*, tenant_id: int, ticket_ref: int | None, request_id: int):
    """The follow-ups that share one delivery order: the ticket's (or, without a ticket, the
    request's)."""
    if ticket_ref is None:
        return ApprovalFollowUp.objects.filter(request_id=request_id, ticket_ref=None)
    return ApprovalFollowUp.objects.filter(tenant_id=tenant_id, ticket_ref=ticket_ref)


def approval_followups_waiting(*, request: ApprovalRequest) -> frozenset[str]:
    """The receivers that have an event of `request`'s ticket still waiting (one indexed read)."""
    queue = _ticket_queue(tenant_id=request.tenant_id, ticket_ref=request.ticket_ref, request_id=request.pk)
    return frozenset(queue.filter(delivered_at=None).values_list("receiver", flat=True).distinct())


def approval_followups_undelivered():
    """Every follow-up still waiting, of every tenant (health counts them; scope before showing)."""
    return ApprovalFollowUp.objects.filter(delivered_at=None)


def approval_event_deliver(*, signal, sender, key: str, receiver: Callable, waiting: frozenset, arguments: dict):
    """One receiver's delivery of an event as it is sent, inside the sender's transaction: run
    it in a savepoint, or keep the event (it failed, or an earlier one of its ticket waits)."""
    request = arguments["request"]
    if key in waiting:
        followup = _followup_record(signal=signal, key=key, arguments=arguments, failure=None)
        logger.warning(
            "%s of approval %s queued for %s behind an earlier event of ticket %s that waits (follow-up %s)",
            signal.name,
            request.pk,
            key,
            request.ticket_ref,
            followup.pk,
            extra={"approval": request.pk, "ticket": request.ticket_ref},
        )
        return None
    try:
        with transaction.atomic():
            return receiver(signal=signal, sender=sender, **arguments)
    except Exception as exc:  # noqa: BLE001 - a listener's failure must not undo the change it hears about
        followup = _followup_record(signal=signal, key=key, arguments=arguments, failure=exc)
        logger.error(
            "%s of approval %s failed in %s; its writes were rolled back and the change stands. Kept as "
            "follow-up %s, retried at %s",
            signal.name,
            request.pk,
            key,
            followup.pk,
            f"{followup.next_attempt_at:%Y-%m-%d %H:%M:%S} UTC",
            exc_info=True,
            extra={"approval": request.pk, "ticket": request.ticket_ref, "followup": followup.pk},
        )
        return None


def approval_followups_deliver(*, limit: int = 200) -> int:
    """Deliver the follow-ups that are due, oldest first per receiver and ticket (the outbox
    sweep). Returns how many were delivered; a failure is kept for its next attempt."""
    due = (
        approval_followups_undelivered()
        .filter(next_attempt_at__lte=timezone.now())
        .order_by("id")
        .values_list("pk", flat=True)[:limit]
    )
    stopped: set[tuple] = set()  # queues whose head failed or is not due: the rest of them waits
    return sum(_followup_deliver(followup_id=followup_id, stopped=stopped) for followup_id in list(due))


def _followup_deliver(*, followup_id: int, stopped: set[tuple]) -> bool:
    with transaction.atomic():
        followup = (
            ApprovalFollowUp.objects.select_for_update(skip_locked=True)
            .filter(pk=followup_id, delivered_at=None)
            .first()
        )
        if followup is None:
            return False  # delivered meanwhile, or another sweep holds it
        queue = (
            followup.receiver,
            followup.tenant_id,
            followup.ticket_ref,
            followup.ticket_ref is None and followup.request_id,
        )
        earlier = _ticket_queue(
            tenant_id=followup.tenant_id, ticket_ref=followup.ticket_ref, request_id=followup.request_id
        ).filter(receiver=followup.receiver, delivered_at=None, pk__lt=followup.pk)
        if queue in stopped or earlier.exists():
            stopped.add(queue)
            return False
        followup.attempts += 1
        now = timezone.now()
        try:
            with transaction.atomic():
                signal, receiver = _receiver_of(followup)
                request = ApprovalRequest.objects.select_related("order").get(pk=followup.request_id)
                receiver(signal=signal, sender=ApprovalRequest, request=request, **_arguments_load(followup.arguments))
        except Exception as exc:  # noqa: BLE001 - kept, and tried again after the backoff
            followup.last_error = _error_text(exc)
            followup.next_attempt_at = now + approval_followup_retry_delay(attempts=followup.attempts)
            followup.save(update_fields=["attempts", "last_error", "next_attempt_at"])
            stopped.add(queue)
            logger.error(
                "follow-up %s (%s of approval %s for %s) failed again, attempt %s; retried at %s",
                followup.pk,
                followup.event,
                followup.request_id,
                followup.receiver,
                followup.attempts,
                f"{followup.next_attempt_at:%Y-%m-%d %H:%M:%S} UTC",
                exc_info=True,
                extra={"approval": followup.request_id, "ticket": followup.ticket_ref, "followup": followup.pk},
            )
            return False
        followup.delivered_at = now
        followup.save(update_fields=["attempts", "delivered_at"])
    logger.warning(
        "follow-up %s (%s of approval %s for %s) delivered at attempt %s",
        followup.pk,
        followup.event,
        followup.request_id,
        followup.receiver,
        followup.attempts,
        extra={"approval": followup.request_id, "ticket": followup.ticket_ref, "followup": followup.pk},
    )
    return True


def _receiver_of(followup: ApprovalFollowUp) -> tuple[object, Callable]:
    try:
        return _RECEIVERS[(followup.event, followup.receiver)]
    except KeyError:
        raise LookupError(f"no receiver {followup.receiver!r} is connected to {followup.event}") from None


def _followup_record(*, signal, key: str, arguments: dict, failure: Exception | None) -> ApprovalFollowUp:
    request = arguments["request"]
    now = timezone.now()
    return ApprovalFollowUp.objects.create(
        tenant_id=request.tenant_id,
        request_id=request.pk,
        ticket_ref=request.ticket_ref,
        event=signal.name,
        receiver=key[:200],
        arguments=_arguments_dump({name: value for name, value in arguments.items() if name != "request"}),
        attempts=0 if failure is None else 1,
        last_error="" if failure is None else _error_text(failure),
        created_at=now,
        next_attempt_at=now if failure is None else now + approval_followup_retry_delay(attempts=1),
    )


class _Encoder(DjangoJSONEncoder):
    def default(self, o):
        try:
            return super().default(o)
        except TypeError:
            return repr(o)  # kept readable; a receiver that needs it fails visibly at its retry


def _arguments_dump(arguments: dict) -> dict:
    """The signal's arguments as JSON: rows by their model and id (read again at delivery, as
    they are then), everything else as is."""
    rows = {
        name: [value._meta.label_lower, value.pk]
        for name, value in arguments.items()
        if isinstance(value, models.Model)
    }
    values = {name: value for name, value in arguments.items() if name not in rows}
    return {"rows": rows, "values": json.loads(json.dumps(values, cls=_Encoder))}


def _arguments_load(stored: dict) -> dict:
    arguments = dict(stored.get("values") or {})
    for name, (label, pk) in (stored.get("rows") or {}).items():
        arguments[name] = apps.get_model(label)._default_manager.get(pk=pk)
    return arguments


def _error_text(exc: Exception) -> str:
    return f"{type(exc).__name__}: {exc}"[:ERROR_LENGTH]
