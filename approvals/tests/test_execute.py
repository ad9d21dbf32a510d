"""Execution of an approved request into the ledger, the evaluator, and the expiry sweep.
Every test builds its own shop, people and orders (not the demo's)."""

import logging
import threading
from datetime import timedelta
from decimal import Decimal

import pytest
from django.db import connection
from django.utils import timezone
from django_celery_beat.models import PeriodicTask

from approvals.exceptions import ApprovalConflict
from approvals.models import ApprovalRequest, ApprovalVote
from approvals.services.decisions import approval_request_decide
from approvals.services.execution import approval_execute
from approvals.services.requests import approval_requests_expire
from approvals.services.verification import approval_verify
from approvals.tasks import approval_execute_task, approval_requests_expire_task
from ledger.models import Order, PaymentMethod, RefundEntry
from ledger.services import ledger_refund_correct, ledger_refund_issue
from tests.factories import manual_payout_record

pytestmark = pytest.mark.django_db


@pytest.fixture
def approved(file_request, people, django_capture_on_commit_callbacks):
    """approved("120.00", **make) -> an approved request for that order whose execution task was enqueued
    but has not run."""

    def make(total, **kwargs):
        request = file_request(total, **kwargs)
        with django_capture_on_commit_callbacks(execute=False) as callbacks:
            approval_request_decide(
                request_id=request.pk, user=people["finance"], decision="approve", args_hash=request.args_hash
            )
        assert len(callbacks) == 1
        request.refresh_from_db()
        assert request.status == "approved"
        return request

    return make


def test_the_execution_task_run_twice_writes_one_entry(approved):
    # given an approved request
    request = approved("120.00")
    # when its task runs twice (a redelivery, a retry)
    approval_execute_task.delay(request.pk)
    approval_execute_task.delay(request.pk)
    # then one ledger entry, waiting for finance to pay it by hand (the manual gateway)
    assert RefundEntry.objects.filter(idempotency_key=request.idempotency_key).count() == 1
    request.refresh_from_db()
    assert request.status == "approved"
    # and once the payout is recorded, executed and verified
    request = manual_payout_record(request)
    assert request.status == "executed" and request.verification["ok"]


def test_a_redelivery_after_the_ledger_write_replays_the_entry(approved):
    # given an execution that wrote the ledger but died before the request recorded the outcome
    request = approved("120.00")
    approval_execute(request_id=request.pk)
    manual_payout_record(request)
    entry = RefundEntry.objects.get(idempotency_key=request.idempotency_key)
    ApprovalRequest.objects.filter(pk=request.pk).update(status="approved", ledger_entry=None, verification=None)
    # when the task is delivered again
    approval_execute_task.delay(request.pk)
    # then the ledger replays the same entry: still one, and the request is executed
    assert list(RefundEntry.objects.filter(order_id=request.order_id, source="approval")) == [entry]
    request.refresh_from_db()
    assert request.status == "executed" and request.ledger_entry_id == entry.pk


def test_execute_uses_exactly_the_approved_args(approved, gift_card):
    # given an approved item refund of one pair of socks to the customer's gift card
    request = approved("200.00", items=["ITEM-6"], refund_to=gift_card.external_id)
    assert request.amount == Decimal("25.00")
    # when it executes
    approval_execute(request_id=request.pk)
    # then the entry is exactly that: amount, currency, item, destination, approval reference
    entry = RefundEntry.objects.get(idempotency_key=request.idempotency_key)
    assert (entry.amount, entry.currency, entry.destination_kind) == (Decimal("25.00"), "USD", "gift_card")
    assert entry.destination.kind == PaymentMethod.Kind.GIFT_CARD
    assert [i.order_item.item_id for i in entry.items.all()] == ["ITEM-6"]
    assert entry.approval_ref == str(request.pk)
    request.refresh_from_db()
    assert request.status == "executed", request.verification


def test_facts_changed_after_approval_are_not_executed(approved):
    # given an approved 120.00 request, then the shop records a 100.00 refund on the order
    request = approved("120.00")
    order = Order.objects.get(pk=request.order_id)
    ledger_refund_issue(order=order, amount="100.00", currency="USD", idempotency_key="shop:late", source="import")
    # when the execution runs
    approval_execute(request_id=request.pk)
    # then nothing is written under the key; the request is invalidated and replaced for 20.00
    assert not RefundEntry.objects.filter(idempotency_key=request.idempotency_key).exists()
    request.refresh_from_db()
    assert request.status == "invalidated"
    assert request.replaced_by.amount == Decimal("20.00")
    assert request.decided_by.username == "finance"


def test_tampered_args_are_not_executed(approved, caplog):
    request = approved("120.00")
    ApprovalRequest.objects.filter(pk=request.pk).update(args={**request.args, "amount": "1.00"})
    with caplog.at_level(logging.ERROR, logger="approvals"):
        approval_execute(request_id=request.pk)
    request.refresh_from_db()
    assert request.status == "failed"
    assert request.verification["stage"] == "execute" and request.verification["error"] == "args_tampered"
    assert not RefundEntry.objects.filter(idempotency_key=request.idempotency_key).exists()
    assert any(r.levelno == logging.ERROR for r in caplog.records)


def test_the_evaluator_catches_a_ledger_that_disagrees(approved, caplog):
    # given an executed, verified refund of 120.00
    request = approved("120.00")
    approval_execute(request_id=request.pk)
    manual_payout_record(request)
    entry = RefundEntry.objects.get(idempotency_key=request.idempotency_key)
    # when the ledger entry is later corrected to another amount and the evaluator re-reads it
    ledger_refund_correct(entry=entry, new_amount="100.00", reason="operator correction")
    with caplog.at_level(logging.ERROR, logger="approvals"):
        verdict = approval_verify(request_id=request.pk)
    # then the verdict is a failure with the evidence, stored on the request and logged at ERROR
    assert verdict["ok"] is False
    assert "amount_exact" in verdict["failed"]
    amount_check = next(c for c in verdict["checks"] if c["name"] == "amount_exact")
    assert (amount_check["expected"], amount_check["actual"]) == ("120.00", "100.00")
    request.refresh_from_db()
    assert request.status == "failed" and request.verification["failed"] == verdict["failed"]
    assert any(r.levelno == logging.ERROR and "failed verification" in r.getMessage() for r in caplog.records)


def test_the_evaluator_reports_a_missing_entry(file_request):
    request = file_request("120.00")
    verdict = approval_verify(request_id=request.pk)
    assert verdict["ok"] is False and "one_entry_under_key" in verdict["failed"]
    assert ApprovalRequest.objects.get(pk=request.pk).status == "pending"  # only read


def test_only_an_approved_request_is_executed(file_request):
    request = file_request("120.00")
    with pytest.raises(ApprovalConflict) as exc:
        approval_execute(request_id=request.pk)
    assert exc.value.status_code == 409
    assert not RefundEntry.objects.filter(idempotency_key=request.idempotency_key).exists()


def test_the_sweep_expires_overdue_pending_requests(file_request):
    overdue = file_request("120.00")
    fresh = file_request("50.00")
    ApprovalRequest.objects.filter(pk=overdue.pk).update(expires_at=timezone.now() - timedelta(minutes=5))
    assert approval_requests_expire_task.delay().get() == 1
    assert ApprovalRequest.objects.get(pk=overdue.pk).status == "expired"
    assert ApprovalRequest.objects.get(pk=fresh.pk).status == "pending"
    assert approval_requests_expire() == 0


def test_the_sweep_is_a_periodic_task_operators_can_edit(db):
    task = PeriodicTask.objects.get(task="approvals.tasks.approval_requests_expire_task")
    assert task.enabled
    assert (task.interval.every, task.interval.period) == (5, "minutes")


@pytest.mark.django_db(transaction=True)
def test_two_executions_at_once_write_one_entry(file_request, people):
    # given an approved request whose execution has not run (built directly: on a transactional
    # test database the on-commit execution would run at once)
    request = file_request("120.00")
    ApprovalVote.objects.create(
        request=request, approver=people["finance"], decision="approve", args_hash=request.args_hash
    )
    ApprovalRequest.objects.filter(pk=request.pk).update(status="approved", decided_by=people["finance"])
    # when two workers execute it at the same moment
    barrier = threading.Barrier(2)
    errors = []

    def run():
        try:
            barrier.wait()
            approval_execute(request_id=request.pk)
        except Exception as exc:  # noqa: BLE001
            errors.append(exc)
        finally:
            connection.close()

    threads = [threading.Thread(target=run) for _ in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    # then one entry, waiting for finance to pay it by hand (the manual gateway)
    assert errors == []
    assert RefundEntry.objects.filter(idempotency_key=request.idempotency_key).count() == 1
    assert ApprovalRequest.objects.get(pk=request.pk).status == "approved"
    assert RefundEntry.objects.get(idempotency_key=request.idempotency_key).status == "pending"
