"""Backfill the decision records (approvals.DecisionRecord) from the drafts decided before they
were kept. A draft keeps the gate's verdict (outcome, allowed amount, what was still refundable,
the destination, the items, the codes, the policy version) and its ticket the request; the
order keeps its total and when it was placed, so its age at the decision is known too.

What the old rows do not keep, and the record lists in `missing_facts` (docs/replay.md):
- `order_status`: the status at the decision; the order's status now stands in for it.
- `order_lines`: the units of each line already refunded then; the lines are left empty, so a
  replay of an item refund sees what was refundable on the order, not per item.
- `order_exposure`: requests in flight then; the refunded amount stands in for it.
- `risk`: no risk figures were kept.
"""

from decimal import Decimal

from django.db import migrations

MISSING = ["order_status", "order_lines", "order_exposure", "risk"]


def backfill(apps, schema_editor):
    RefundDraft = apps.get_model("refundagent", "RefundDraft")
    DecisionRecord = apps.get_model("approvals", "DecisionRecord")
    RefundPolicy = apps.get_model("approvals", "RefundPolicy")
    ApprovalRequest = apps.get_model("approvals", "ApprovalRequest")
    drafts = RefundDraft.objects.select_related("ticket", "ticket__order", "ticket__tenant").order_by("id")
    batch = []
    for draft in drafts.iterator(chunk_size=2000):
        ticket, verdict = draft.ticket, draft.gate_verdict or {}
        if not verdict.get("outcome"):
            continue
        order = ticket.order
        version = verdict.get("policy_version") or ""
        policy = RefundPolicy.objects.filter(tenant_id=ticket.tenant_id, version=version).first() if version else None
        approval = ApprovalRequest.objects.filter(
            idempotency_key=f"refund:{ticket.tenant.slug}:ticket-{ticket.pk}:draft-{draft.pk}"
        ).first()
        allowed = verdict.get("allowed_amount")
        refundable = verdict.get("refundable")
        fields = {}
        if order is not None:
            refunded = order.total - Decimal(refundable) if refundable is not None else None
            fields = dict(
                order=order,
                order_external_id=order.external_id,
                order_status=order.status,
                order_placed_at=order.placed_at,
                order_age_days=(draft.created_at - order.placed_at).days,
                order_total=order.total,
                order_refunded=refunded,
                order_exposure=refunded,
            )
        batch.append(
            DecisionRecord(
                tenant_id=ticket.tenant_id,
                ticket_ref=ticket.pk,
                source="agent",
                decided_at=draft.created_at,
                currency=verdict.get("currency") or ticket.currency,
                requested_amount=ticket.requested_amount,
                requested_currency=ticket.currency or "",
                item_ids=list(verdict.get("item_ids") or ticket.items or []),
                destination={
                    "kind": verdict.get("destination") or "original",
                    "method": verdict.get("destination_method"),
                    "method_kind": verdict.get("destination_method_kind"),
                    "foreign": "foreign_destination" in (verdict.get("codes") or []),
                },
                proposal={
                    "recommendation": draft.recommendation,
                    "amount": None if draft.amount is None else str(draft.amount),
                    "policy_version": draft.policy_version,
                    "destination": None,
                    "customer_reply": draft.customer_reply,
                },
                policy=policy,
                policy_version=version,
                outcome=verdict["outcome"],
                allowed_amount=Decimal(allowed) if allowed and verdict["outcome"] == "approval_required" else None,
                codes=list(verdict.get("codes") or []),
                required_approvals=approval.required_approvals if approval is not None else 0,
                backfilled=True,
                missing_facts=MISSING,
                **fields,
            )
        )
        if len(batch) >= 2000:
            DecisionRecord.objects.bulk_create(batch)
            batch = []
    DecisionRecord.objects.bulk_create(batch)


class Migration(migrations.Migration):
    dependencies = [
        ("refundagent", "0009_traceevent_at_when_recorded"),
        ("approvals", "0016_decision_record_policy_replay"),
    ]

    # Backwards: the records stay (append-only); the approvals migration that made the table drops it.
    operations = [migrations.RunPython(backfill, migrations.RunPython.noop)]
