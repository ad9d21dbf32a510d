"""One log line per decision that moves or refuses money (docs/operations.md, "Logs").

Logger `money` (ledger.telemetry.money_log), at INFO (whatever the root level), field `event`: an approval
decided (approved, denied, changes requested, escalated, expired, invalidated), a refund written
to the ledger, its verification; a failure at ERROR with the reason. They listen to the
approvals layer's signals, so they run inside the request or task that decided, and the log
context (request id, task id, trace id) is that one's.
"""

from django.dispatch import receiver

from approvals.signals import (
    approval_approved,
    approval_changes_requested,
    approval_denied,
    approval_escalated,
    approval_expired,
    approval_invalidated,
    approval_vote_recorded,
    refund_executed,
    refund_verified,
)
from ledger.telemetry import money_log as log


def _request_fields(request) -> dict:
    return {
        "tenant": request.tenant_id,
        "ticket": request.ticket_ref or "",
        # The request keeps its ticket's trace id (a UUID string): the hex form OpenTelemetry uses.
        "ticket_trace_id": (request.trace_id or "").replace("-", ""),
        "approval": request.pk,
        "amount": str(request.amount),
        "currency": request.currency,
        "approval_status": request.status,
    }


# One signal per event (approvals/signals.py); the line names the decision each stands for.
DECISION_OF_EVENT = {
    approval_vote_recorded: "approve_vote",
    approval_approved: "approve",
    approval_denied: "deny",
    approval_changes_requested: "request_changes",
    approval_escalated: "escalate",
    approval_expired: "expire",
    approval_invalidated: "invalidate",
}


def _log_approval_decided(sender, request, actor=None, *, signal, **kwargs):
    decision = DECISION_OF_EVENT[signal]
    fields = _request_fields(request)
    fields.update(event="approval.decided", decision=decision, actor=getattr(actor, "pk", None))
    if kwargs.get("reason"):
        fields["reason"] = kwargs["reason"]
    log.info("approval %s %s -> %s", request.pk, decision, request.status, extra=fields)


for _event in DECISION_OF_EVENT:
    _event.connect(_log_approval_decided, dispatch_uid=f"observability_{DECISION_OF_EVENT[_event]}")


@receiver(refund_executed, dispatch_uid="observability_refund_executed")
def _log_refund_executed(sender, request, entry, replayed=False, **kwargs):
    fields = _request_fields(request)
    fields.update(event="refund.executed", ledger_entry=entry.pk, replayed=replayed)
    log.info(
        "refund %s of approval %s written to the ledger%s",
        entry.pk,
        request.pk,
        " (replayed)" if replayed else "",
        extra=fields,
    )


@receiver(refund_verified, dispatch_uid="observability_refund_verified")
def _log_refund_verified(sender, request, verdict, **kwargs):
    fields = _request_fields(request)
    fields.update(event="refund.verified", ok=bool(verdict.get("ok")), stage=verdict.get("stage"))
    if verdict.get("ok"):
        log.info("approval %s verified against the ledger", request.pk, extra=fields)
    else:
        reason = verdict.get("detail") or ", ".join(verdict.get("failed") or []) or verdict.get("error", "")
        log.error(
            "approval %s failed at %s: %s", request.pk, verdict.get("stage"), reason, extra={**fields, "reason": reason}
        )
