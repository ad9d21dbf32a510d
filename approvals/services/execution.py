"""Executing an approved request: the ledger write, exactly as approved, one entry per tender leg
(all in one transaction, `pending` under the order lock; leg 0 keyed by the request's idempotency
key, leg n by `<key>:leg<n>`), the payout of each leg at the provider outside any lock and
transaction, then the evaluator's verification (approvals.services.verification) once every leg
`succeeded`. The Celery task (approvals.tasks) calls this; so do the evals, synchronously.

What the provider answers:
- `succeeded`: verified now; the ticket becomes `refunded`.
- `failed` / `canceled`: recorded by the ledger, whose signal makes the request and the ticket
  `payment_failed` (approvals.ledger_events); that leg's amount is refundable again, the other legs
  stand (never re-routed).
- `pending`: the request stays `approved`; a webhook, the reconciliation or the sweep's next
  execution (same key, same refund) records the answer.
- unreachable: `PaymentProviderUnavailable` propagates; the task retries with backoff.
"""

import logging

from django.db import transaction
from django.utils import timezone

from ledger.exceptions import DomainError, InvalidInput
from ledger.models import RefundEntry, RefundStatus
from ledger.money import money_parse
from ledger.payouts import ledger_refund_payout
from ledger.services import canonical_hash, ledger_refund_issue
from ledger.telemetry import traced

from ..destinations import approval_legs_resolve, approval_request_entries
from ..exceptions import ApprovalConflict
from ..locks import order_lock
from ..models import ApprovalRequest
from ..request_state import approval_request_transition
from ..signals import refund_executed, refund_payment_failed, refund_verified
from .invalidation import approval_facts_changed, approval_request_invalidate
from .verification import approval_verify

logger = logging.getLogger(__name__)


@traced("refund.approval.execute", result=lambda r: {"refund.approval.status": r.status})
def approval_execute(*, request_id: int) -> ApprovalRequest:
    """Write the approved refund into the ledger, exactly as approved, then have it verified.

    Safe to run any number of times (task redelivery, retries, a worker killed after the ledger
    write): the request's idempotency key makes the ledger return the entry already written.
    Callable synchronously (evals run it inside a transaction where on_commit never fires)."""
    request = ApprovalRequest.objects.select_related("order", "order__customer", "order__tenant").get(pk=request_id)
    if request.status == ApprovalRequest.Status.PAYMENT_FAILED:
        # One leg was refused; legs written with it and not yet sent (the provider was unreachable
        # when the refusal came) are still paid as approved, under their own keys.
        metadata = approval_payout_metadata(request=request)
        for entry in (
            approval_request_entries(request=request)
            .filter(status=RefundStatus.PENDING)
            .exclude(gateway=RefundEntry.Gateway.MANUAL)
        ):
            ledger_refund_payout(entry_id=entry.pk, metadata=metadata)
        return request
    if request.status in (
        ApprovalRequest.Status.EXECUTED,
        ApprovalRequest.Status.FAILED,
        ApprovalRequest.Status.PAYMENT_FAILED,
        # Held after approval, before its execution ran (a dispute opened): nothing to pay.
        ApprovalRequest.Status.INVALIDATED,
    ):
        return request  # done before: executing again changes nothing
    if request.status != ApprovalRequest.Status.APPROVED:
        raise ApprovalConflict(f"Request #{request.pk} is {request.status}; only an approved request is executed.")
    if (
        approval_request_entries(request=request)
        .filter(gateway=RefundEntry.Gateway.MANUAL, status=RefundStatus.PENDING)
        .exists()
    ):
        return request  # written; finance pays it by hand and records it (ledger_refund_record_paid)

    args = request.args
    try:
        if (
            canonical_hash(args) != request.args_hash
            or money_parse(args["amount"]) != request.amount
            or (args["currency"] != request.currency or args["order"] != request.order.external_id)
        ):
            raise InvalidInput("The stored args no longer match their hash or the request.", code="args_tampered")
        legs = approval_legs_resolve(request=request)
        replacement = None
        with transaction.atomic():
            order = order_lock(order_id=request.order_id)
            # Entries an earlier attempt wrote (all legs or none: one transaction), by leg key.
            written = {entry.idempotency_key: entry for entry in approval_request_entries(request=request)}
            # Facts re-checked under the order lock, unless the legs were already written by an
            # earlier attempt (then the ledger replays them).
            changed = "" if written else approval_facts_changed(request=request, order=order)
            if changed:
                replacement = approval_request_invalidate(
                    request=request, reason=changed, now=timezone.now(), from_status=ApprovalRequest.Status.APPROVED
                )
            else:
                # Every leg in this one transaction: a leg the ledger refuses (its payment can no
                # longer return it) undoes the others, and the request fails with the reason.
                entries = [
                    written.get(leg.key)
                    or ledger_refund_issue(
                        order=order,
                        amount=leg.amount,
                        currency=args["currency"],
                        idempotency_key=leg.key,
                        destination=leg.method,
                        destination_kind=leg.kind,
                        item_ids=list(args.get("items") or []) if leg.index == 0 else [],
                        source=RefundEntry.Source.APPROVAL,
                        approval_ref=str(request.pk),
                        reason=f"Approved request #{request.pk} under {request.policy_version}"
                        + (f", leg {leg.index + 1} of {len(legs)}." if len(legs) > 1 else "."),
                        created_by=request.decided_by,
                        payment=leg.payment,
                    )
                    for leg in legs
                ]
                entry = entries[0]
                ApprovalRequest.objects.filter(pk=request.pk, status=ApprovalRequest.Status.APPROVED).update(
                    ledger_entry=entry, updated_at=timezone.now()
                )
                request.refresh_from_db()
                refund_executed.send(sender=ApprovalRequest, request=request, entry=entry, replayed=bool(written))
        if changed:
            logger.warning(
                "approval %s not executed: %s (replacement %s)",
                request.pk,
                changed,
                replacement.pk if replacement else None,
            )
            request.refresh_from_db()
            return request
    except DomainError as exc:
        return _approval_execution_failed(request=request, exc=exc)

    # The provider calls: outside the transaction above, no row locked, one per leg still pending,
    # each under its own leg's key. The same metadata on every attempt (the provider compares a
    # retried request's parameters with the first). A leg the provider refuses stands alone: the
    # others are still paid as approved, never re-routed.
    metadata = approval_payout_metadata(request=request)
    entries = [
        ledger_refund_payout(entry_id=entry.pk, metadata=metadata) if entry.status == RefundStatus.PENDING else entry
        for entry in entries
    ]
    refused = [entry for entry in entries if entry.status in (RefundStatus.FAILED, RefundStatus.CANCELED)]
    if refused:
        # One owner, approval_payment_failed: the receiver of the ledger's signal called it when the
        # refusal was recorded (approvals.ledger_events); called again here for the case that receiver
        # failed, so a request never stays approved over a refused refund. A second call for the
        # same entry finds the request moved and changes nothing.
        entry = refused[0]
        reason = entry.events.order_by("-id").values_list("reason", flat=True).first() or ""
        with transaction.atomic():
            approval_payment_failed(request=request, entry=entry, reason=reason)
    elif all(entry.status == RefundStatus.SUCCEEDED for entry in entries):
        approval_verify(request_id=request.pk)
    else:
        logger.info(
            "approval %s: refunds %s are %s; not verified yet",
            request.pk,
            ", ".join(f"#{entry.pk}" for entry in entries),
            ", ".join(entry.status for entry in entries),
            extra={"approval": request.pk},
        )
    request.refresh_from_db()
    return request


def approval_payout_metadata(*, request: ApprovalRequest) -> dict[str, str]:
    """What the provider's refund carries besides the ledger's own (entry, approval, tenant)."""
    return {"ticket": str(request.ticket_ref)} if request.ticket_ref is not None else {}


def approval_payment_failed(*, request: ApprovalRequest, entry: RefundEntry, reason: str) -> ApprovalRequest:
    """Mark a request whose refund the provider refused `payment_failed`, once.

    A refund paid in legs can lose a second leg later (a card refund fails days after it was
    paid), when the request is already `payment_failed` for the first: that leg's failure is added
    to the request's verification and its ticket is told all the same, so no ticket says
    `refunded` for money that did not move (refundagent.ticket_events). If the request was already
    filed again for the first leg and that refile is not in the ledger yet, the refile is withdrawn
    (invalidated, no replacement) and a person proposes the whole amount owed; if it is, it stands
    and a person proposes the failed part."""
    if request.status == ApprovalRequest.Status.PAYMENT_FAILED and entry.pk != request.ledger_entry_id:
        return _approval_leg_failed_later(request=request, entry=entry, reason=reason)
    now = timezone.now()
    verdict = {
        "ok": False,
        "stage": "payment",
        "error": entry.status,
        "detail": reason or f"The provider reported the refund {entry.status}.",
        "entry": entry.pk,
        "provider_ref": entry.provider_ref,
        "checks": [
            {
                "name": "provider_paid",
                "ok": False,
                "expected": RefundStatus.SUCCEEDED,
                "actual": f"{entry.status}: {reason}".strip(": "),
            }
        ],
        "verified_at": now.isoformat(),
    }
    moved = approval_request_transition(
        request=request,
        to=ApprovalRequest.Status.PAYMENT_FAILED,
        verification=verdict,
        ledger_entry=entry,
        updated_at=now,
    )
    request.refresh_from_db()
    if moved:
        logger.error(
            "approval %s: the provider refused refund #%s (%s): %s",
            request.pk,
            entry.pk,
            entry.status,
            reason,
            extra={"approval": request.pk, "verification": verdict},
        )
        refund_payment_failed.send(sender=ApprovalRequest, request=request, entry=entry, reason=verdict["detail"])
    return request


def _approval_leg_failed_later(*, request: ApprovalRequest, entry: RefundEntry, reason: str) -> ApprovalRequest:
    """Another leg of a `payment_failed` request was refused: recorded on the request (its
    verification gains the leg's check) and announced, once per leg (the ledger changes an
    entry's status once)."""
    verification = dict(request.verification or {})
    check = {
        "name": "provider_paid",
        "ok": False,
        "entry": entry.pk,
        "expected": RefundStatus.SUCCEEDED,
        "actual": f"{entry.status}: {reason}".strip(": "),
    }
    verification["checks"] = [*verification.get("checks", []), check]
    now = timezone.now()
    ApprovalRequest.objects.filter(pk=request.pk).update(verification=verification, updated_at=now)
    request.refresh_from_db()
    refile = request.replaced_by
    if (
        refile is not None
        and refile.status in (ApprovalRequest.Status.PENDING, ApprovalRequest.Status.APPROVED)
        and not approval_request_entries(request=refile).exists()
    ):
        # Under the order's lock (the ledger's record of the failure holds it): no execution is
        # writing the refile meanwhile. Its ticket goes to a person with the reason.
        approval_request_invalidate(
            request=refile,
            reason=(
                f"{entry.amount} {request.currency} of request #{request.pk} (ledger entry #{entry.pk}) also failed at "
                f"the provider after #{request.pk} was filed again as #{refile.pk}: a person proposes the whole "
                "refund still owed"
            ),
            now=now,
            from_status=refile.status,
            replace=False,
        )
        return request
    logger.error(
        "approval %s: the provider refused another leg, refund #%s (%s): %s",
        request.pk,
        entry.pk,
        entry.status,
        reason,
        extra={"approval": request.pk, "entry": entry.pk},
    )
    refund_payment_failed.send(
        sender=ApprovalRequest,
        request=request,
        entry=entry,
        reason=reason or f"The provider reported it {entry.status}.",
    )
    return request


def _approval_execution_failed(*, request: ApprovalRequest, exc: DomainError) -> ApprovalRequest:
    verdict = {
        "ok": False,
        "stage": "execute",
        "error": exc.code,
        "detail": exc.message,
        "checks": [
            {
                "name": "ledger_write",
                "ok": False,
                "expected": f"{request.amount} {request.currency}",
                "actual": exc.message,
            }
        ],
        "verified_at": timezone.now().isoformat(),
    }
    with transaction.atomic():
        moved = approval_request_transition(
            request=request,
            to=ApprovalRequest.Status.FAILED,
            from_=ApprovalRequest.Status.APPROVED,
            verification=verdict,
            updated_at=timezone.now(),
        )
        request.refresh_from_db()
        if moved:
            logger.error(
                "approval %s execution failed: %s (%s)",
                request.pk,
                exc.message,
                exc.code,
                extra={"approval": request.pk, "verification": verdict},
            )
            refund_verified.send(sender=ApprovalRequest, request=request, verdict=verdict)
    return request
