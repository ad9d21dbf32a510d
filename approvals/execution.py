"""Executing an approved request: the ledger write, exactly as approved and keyed by the
request's idempotency key (`pending` under the order lock), the payout at the provider outside
any lock and transaction, then the evaluator's verification (approvals.verification) once the
entry `succeeded`. The Celery task (approvals.tasks) calls this; so do the evals, synchronously.

What the provider answers:
- `succeeded`: verified now; the ticket becomes `refunded`.
- `failed` / `canceled`: recorded by the ledger, whose signal makes the request and the ticket
  `payment_failed` (approvals.payouts); the amount is refundable again.
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

from .destinations import approval_destination_resolve
from .exceptions import ApprovalConflict
from .invalidation import approval_facts_changed, approval_request_invalidate
from .locks import order_lock
from .models import ApprovalRequest
from .signals import refund_executed, refund_payment_failed, refund_verified
from .verification import approval_verify

logger = logging.getLogger(__name__)


@traced("refund.approval.execute", result=lambda r: {"refund.approval.status": r.status})
def approval_execute(*, request_id: int) -> ApprovalRequest:
    """Write the approved refund into the ledger, exactly as approved, then have it verified.

    Safe to run any number of times (task redelivery, retries, a worker killed after the ledger
    write): the request's idempotency key makes the ledger return the entry already written.
    Callable synchronously (evals run it inside a transaction where on_commit never fires)."""
    request = ApprovalRequest.objects.select_related("order", "order__customer", "order__tenant").get(pk=request_id)
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
    if RefundEntry.objects.filter(
        pk=request.ledger_entry_id, gateway=RefundEntry.Gateway.MANUAL, status=RefundStatus.PENDING
    ).exists():
        return request  # written; finance pays it by hand and records it (ledger_refund_record_paid)

    args = request.args
    try:
        if (
            canonical_hash(args) != request.args_hash
            or money_parse(args["amount"]) != request.amount
            or (args["currency"] != request.currency or args["order"] != request.order.external_id)
        ):
            raise InvalidInput("The stored args no longer match their hash or the request.", code="args_tampered")
        destination, destination_kind = approval_destination_resolve(request=request)
        replacement = None
        with transaction.atomic():
            order = order_lock(order_id=request.order_id)
            existing = RefundEntry.objects.filter(idempotency_key=request.idempotency_key).first()
            # Facts re-checked under the order lock, unless the entry was already written by an
            # earlier attempt (then the ledger replays it).
            changed = "" if existing is not None else approval_facts_changed(request=request, order=order)
            if changed:
                replacement = approval_request_invalidate(
                    request=request, reason=changed, now=timezone.now(), from_status=ApprovalRequest.Status.APPROVED
                )
            else:
                entry = ledger_refund_issue(
                    order=order,
                    amount=args["amount"],
                    currency=args["currency"],
                    idempotency_key=request.idempotency_key,
                    destination=destination,
                    destination_kind=destination_kind,
                    item_ids=list(args.get("items") or []),
                    source=RefundEntry.Source.APPROVAL,
                    approval_ref=str(request.pk),
                    reason=f"Approved request #{request.pk} under {request.policy_version}.",
                    created_by=request.decided_by,
                )
                ApprovalRequest.objects.filter(pk=request.pk, status=ApprovalRequest.Status.APPROVED).update(
                    ledger_entry=entry, updated_at=timezone.now()
                )
                request.refresh_from_db()
                refund_executed.send(
                    sender=ApprovalRequest, request=request, entry=entry, replayed=existing is not None
                )
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

    if entry.status == RefundStatus.PENDING:
        # The provider call: outside the transaction above, no row locked. The same metadata on every
        # attempt (the provider compares a retried request's parameters with the first).
        entry = ledger_refund_payout(entry_id=entry.pk, metadata=approval_payout_metadata(request=request))
    if entry.status == RefundStatus.SUCCEEDED:
        approval_verify(request_id=request.pk)
    elif entry.status in (RefundStatus.FAILED, RefundStatus.CANCELED):
        # Normally done by the ledger's signal when the refusal was recorded (approvals.payouts);
        # here too, so a request never stays approved over a refused refund.
        reason = entry.events.order_by("-id").values_list("reason", flat=True).first() or ""
        with transaction.atomic():
            approval_payment_failed(request=request, entry=entry, reason=reason)
    else:
        logger.info(
            "approval %s: refund #%s is %s; not verified yet",
            request.pk,
            entry.pk,
            entry.status,
            extra={"approval": request.pk},
        )
    request.refresh_from_db()
    return request


def approval_payout_metadata(*, request: ApprovalRequest) -> dict[str, str]:
    """What the provider's refund carries besides the ledger's own (entry, approval, tenant)."""
    return {"ticket": str(request.ticket_ref)} if request.ticket_ref is not None else {}


def approval_payment_failed(*, request: ApprovalRequest, entry: RefundEntry, reason: str) -> ApprovalRequest:
    """Mark a request whose refund the provider refused `payment_failed`, once."""
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
    updated = ApprovalRequest.objects.filter(
        pk=request.pk, status__in=(ApprovalRequest.Status.APPROVED, ApprovalRequest.Status.EXECUTED)
    ).update(status=ApprovalRequest.Status.PAYMENT_FAILED, verification=verdict, ledger_entry=entry, updated_at=now)
    request.refresh_from_db()
    if updated == 1:
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
        updated = ApprovalRequest.objects.filter(pk=request.pk, status=ApprovalRequest.Status.APPROVED).update(
            status=ApprovalRequest.Status.FAILED, verification=verdict, updated_at=timezone.now()
        )
        request.refresh_from_db()
        if updated == 1:
            logger.error(
                "approval %s execution failed: %s (%s)",
                request.pk,
                exc.message,
                exc.code,
                extra={"approval": request.pk, "verification": verdict},
            )
            refund_verified.send(sender=ApprovalRequest, request=request, verdict=verdict)
    return request
