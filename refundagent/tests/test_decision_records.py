"""Every gate decision keeps the facts it was taken on (approvals.DecisionRecord): what the order,
the ticket and the policy were then, whatever happens to them later."""

import importlib
from datetime import timedelta
from decimal import Decimal

import pytest
from django.apps import apps as django_apps
from django.db import IntegrityError, InternalError, connection, transaction
from django.utils import timezone

from approvals.models import ApprovalRequest, DecisionRecord
from ledger.models import Order
from refundagent.agent.loop import agent_run_ticket
from refundagent.agent.providers.offline import OfflineProvider
from refundagent.models import RefundDraft


@pytest.fixture
def ticket_defaults():
    return {"order": "ORD-5001", "message": "My headphones arrived broken. Please refund me."}


def run_offline(ticket):
    agent_run_ticket(ticket_id=ticket.pk, provider=OfflineProvider())
    ticket.refresh_from_db()
    return ticket


def test_the_agent_decision_records_the_facts_it_decided_on(file_ticket):
    # given an in-window ticket on ORD-5001 (120.00, 12 days old, delivered)
    ticket = file_ticket(amount="200.00")

    # when the agent runs and the gate decides
    run_offline(ticket)

    # then one record keeps the order, the request, the policy and the outcome as they were
    record = DecisionRecord.objects.get(ticket_ref=ticket.pk)
    approval = ApprovalRequest.objects.get(ticket_ref=ticket.pk)
    assert record.tenant_id == ticket.tenant_id and record.source == "agent"
    assert (record.order_external_id, record.order_status, record.order_age_days) == ("ORD-5001", "delivered", 12)
    assert (record.order_total, record.order_refunded, record.currency) == (Decimal("120.00"), Decimal("0.00"), "USD")
    assert record.requested_amount == Decimal("200.00")
    assert record.destination["kind"] == "original" and record.destination["foreign"] is False
    assert record.proposal["recommendation"] == "refund" and record.proposal["policy_version"] == "refund-policy-v4"
    assert (record.policy_version, record.outcome, record.allowed_amount) == (
        "refund-policy-v4",
        "approval_required",
        Decimal("120.00"),
    )
    assert record.required_approvals == approval.required_approvals == 1
    # the risk figures the demo policy's rules read, as the verdict had them: one open ticket on the order
    assert record.risk == RefundDraft.objects.get(ticket=ticket).gate_verdict["risk"]
    assert record.risk["open_tickets_on_order"] == 1 and "customer_refunds_in_window" in record.risk
    assert record.backfilled is False


def test_a_later_change_to_the_order_does_not_alter_the_record(file_ticket):
    # given a recorded decision on ORD-5001
    ticket = run_offline(file_ticket())
    record = DecisionRecord.objects.get(ticket_ref=ticket.pk)

    # when the order is cancelled later, and someone tries to rewrite or delete the record
    Order.objects.filter(pk=record.order_id).update(status="cancelled")
    with pytest.raises((InternalError, IntegrityError)), transaction.atomic():
        DecisionRecord.objects.filter(pk=record.pk).update(order_status="cancelled")
    with pytest.raises((InternalError, IntegrityError)), transaction.atomic():
        with connection.cursor() as cursor:
            cursor.execute("DELETE FROM approvals_decisionrecord WHERE id = %s", [record.pk])

    # then the record still says what the gate saw
    record.refresh_from_db()
    assert record.order_status == "delivered"


def test_escalations_and_denials_are_recorded_too(file_ticket):
    # given ORD-5002, 45 days old, outside the 30-day window
    ticket = run_offline(file_ticket(order="ORD-5002"))

    # then the escalation is recorded with its reason and no allowed amount
    record = DecisionRecord.objects.get(ticket_ref=ticket.pk)
    assert record.outcome == "escalated" and record.codes == ["model_recommends_escalate"]
    assert record.allowed_amount is None and record.order_age_days == 45


def test_the_backfill_rebuilds_what_old_drafts_allow_and_names_what_they_do_not(file_ticket):
    # given a draft decided (as before records were kept, its row keeps the gate's verdict)
    ticket = run_offline(file_ticket(amount="70.00"))
    live = DecisionRecord.objects.get(ticket_ref=ticket.pk)
    RefundDraft.objects.filter(ticket=ticket).update(created_at=timezone.now() - timedelta(days=2))

    # when the data migration's backfill runs (on a deployment, over a table still empty)
    migration = importlib.import_module("refundagent.migrations.0010_decision_records_backfill")
    with transaction.atomic():
        migration.backfill(django_apps, None)

    # then the draft has a record with the facts its rows kept, marked with what they did not keep
    rebuilt = DecisionRecord.objects.get(ticket_ref=ticket.pk, backfilled=True)
    assert (rebuilt.outcome, rebuilt.allowed_amount, rebuilt.policy_version) == (
        live.outcome,
        Decimal("70.00"),
        "refund-policy-v4",
    )
    assert (rebuilt.order_total, rebuilt.order_refunded, rebuilt.requested_amount) == (
        Decimal("120.00"),
        Decimal("0.00"),
        Decimal("70.00"),
    )
    assert rebuilt.order_age_days == 10  # 12 days old now, decided two days ago
    assert rebuilt.required_approvals == 1 and rebuilt.proposal["recommendation"] == "refund"
    assert set(rebuilt.missing_facts) == {"order_status", "order_lines", "order_exposure", "risk"}


def test_the_record_keeps_what_dual_control_counted_on_the_order_then(file_ticket):
    # given two tickets on ORD-5001: 50.00 asked first (its request still pending), then 30.00
    first = run_offline(file_ticket(amount="50.00"))
    second = run_offline(file_ticket(amount="30.00"))

    # then each record keeps the order's refunds plus what was in flight when it was decided,
    # leaving out the request the decision itself made
    assert DecisionRecord.objects.get(ticket_ref=first.pk).order_exposure == Decimal("0.00")
    assert DecisionRecord.objects.get(ticket_ref=second.pk).order_exposure == Decimal("50.00")
