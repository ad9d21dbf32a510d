"""An approval event whose receiver fails is kept with the change and delivered later
(approvals.followups): with what it carried, in the order of its ticket's events, once, however
many sweeps run at once. These listeners are the tests' own (this app never imports the agent)."""

import threading
import time
from contextlib import contextmanager
from datetime import timedelta
from unittest import mock

import pytest
from django.db import connection
from django.utils import timezone

from approvals import signals
from approvals.followups import approval_followups_deliver
from approvals.models import ApprovalFollowUp, ApprovalRequest, ApprovalVote
from approvals.services.decisions import approval_request_decide
from approvals.services.execution import approval_execute
from ledger.models import RefundEntry
from tests.factories import manual_payout_record


@contextmanager
def at(moment):
    with mock.patch("django.utils.timezone.now", return_value=moment):
        yield


class Listener:
    """Connected to `events` under one dispatch_uid (one receiver: one queue per ticket); raises
    on the first `fail` calls; records what it heard."""

    def __init__(self, *events, uid: str, fail: int = 0, pause: float = 0.0):
        self.events, self.uid, self.fail, self.pause = events, uid, fail, pause
        self.heard: list[tuple] = []
        self.calls = 0

    def __call__(self, sender, signal, request, **kwargs):
        self.calls += 1
        time.sleep(self.pause)
        if self.calls <= self.fail:
            raise RuntimeError(f"{self.uid} broke")
        self.heard.append((signal.name, request.pk, {**kwargs, "sender": sender}))

    def __enter__(self):
        for event in self.events:
            event.connect(self, dispatch_uid=self.uid)
        return self

    def __exit__(self, *exc):
        for event in self.events:
            event.disconnect(dispatch_uid=self.uid)


def decide(request, user, decision, **extra):
    return approval_request_decide(
        request_id=request.pk, user=user, decision=decision, args_hash=request.args_hash, **extra
    )


@pytest.mark.django_db
def test_the_kept_event_carries_what_the_signal_carried(file_request, people):
    # given a pending request of ticket 41, and a listener of denials that fails once
    request = file_request("120.00", ticket_ref=41)
    with Listener(signals.approval_denied, uid="tests.denials", fail=1) as listener:
        # when finance denies it
        decide(request, people["finance"], "deny", note="not eligible")
        # then the denial stands, and the event is kept for the listener with its arguments by id
        request.refresh_from_db()
        assert request.status == ApprovalRequest.Status.DENIED
        kept = ApprovalFollowUp.objects.get(request=request)
        vote = ApprovalVote.objects.get(request=request)
        assert (kept.event, kept.receiver, kept.ticket_ref, kept.attempts) == (
            "approval_denied",
            "tests.denials",
            41,
            1,
        )
        assert kept.arguments == {
            "rows": {"vote": ["approvals.approvalvote", vote.pk], "actor": ["auth.user", people["finance"].pk]},
            "values": {},
        }
        # when the sweep delivers it after the backoff
        with at(timezone.now() + timedelta(seconds=61)):
            assert approval_followups_deliver() == 1
    # then the listener heard the denial with the same rows, read again
    [(event, request_id, kwargs)] = listener.heard
    assert (event, request_id) == ("approval_denied", request.pk)
    assert kwargs["vote"] == vote and kwargs["actor"] == people["finance"] and kwargs["sender"] is ApprovalRequest


@pytest.mark.django_db
def test_later_events_of_the_ticket_wait_behind_the_kept_one_for_that_receiver_only(file_request, people):
    # given a listener of approvals, executions and verdicts that fails once, and another that works
    request = file_request("120.00", ticket_ref=42)
    events = (signals.approval_approved, signals.refund_executed, signals.refund_verified)
    with Listener(*events, uid="tests.flaky", fail=1) as flaky, Listener(*events, uid="tests.steady") as steady:
        # when finance approves and the refund is executed and verified
        decide(request, people["finance"], "approve")
        approval_execute(request_id=request.pk)
        # (the manual gateway: finance records the payout made by hand; the execution runs again)
        manual_payout_record(request)
        # then the money moved, and the working listener heard everything at once
        request.refresh_from_db()
        assert request.status == ApprovalRequest.Status.EXECUTED
        assert RefundEntry.objects.filter(idempotency_key=request.idempotency_key).count() == 1
        assert [e for e, _, _ in steady.heard] == [
            "approval_approved",
            "refund_executed",
            "refund_executed",
            "refund_verified",
        ]
        # and the failing one heard nothing: its approval is kept, the three after it wait behind
        assert flaky.heard == []
        kept = ApprovalFollowUp.objects.filter(receiver="tests.flaky").order_by("id")
        assert [(f.event, f.attempts) for f in kept] == [
            ("approval_approved", 1),
            ("refund_executed", 0),
            ("refund_executed", 0),
            ("refund_verified", 0),
        ]
        assert not ApprovalFollowUp.objects.filter(receiver="tests.steady").exists()
        # when a sweep runs before the backoff is over: nothing, not even the two that are "due"
        assert approval_followups_deliver() == 0 and flaky.calls == 1
        # when one runs after it
        with at(timezone.now() + timedelta(seconds=61)):
            assert approval_followups_deliver() == 4
    # then the listener heard the four in the order they happened, with what each carried
    assert [e for e, _, _ in flaky.heard] == [
        "approval_approved",
        "refund_executed",
        "refund_executed",
        "refund_verified",
    ]
    assert flaky.heard[1][2]["entry"] == RefundEntry.objects.get(idempotency_key=request.idempotency_key)
    assert flaky.heard[3][2]["verdict"]["ok"] is True
    assert len(steady.heard) == 4


@pytest.mark.django_db
def test_a_kept_event_whose_receiver_is_gone_stays_waiting_with_the_reason(file_request, people):
    # given an event kept for a listener that is then disconnected (removed from the code)
    request = file_request("120.00", ticket_ref=43)
    with Listener(signals.approval_escalated, uid="tests.removed", fail=1):
        decide(request, people["finance"], "escalate", note="a person should look")
    # when the sweep tries it
    with at(timezone.now() + timedelta(seconds=61)):
        assert approval_followups_deliver() == 0
    # then it waits, with the reason, for the next attempt
    kept = ApprovalFollowUp.objects.get(request=request)
    assert kept.attempts == 2 and kept.delivered_at is None
    assert kept.last_error == "LookupError: no receiver 'tests.removed' is connected to approval_escalated"


@pytest.mark.django_db(transaction=True)
def test_two_sweeps_at_once_deliver_a_kept_event_once(file_request, people):
    # given a kept denial whose listener is slow (the two sweeps overlap in it)
    request = file_request("120.00", ticket_ref=44)
    with Listener(signals.approval_denied, uid="tests.slow", fail=1, pause=0.5) as listener:
        decide(request, people["finance"], "deny", note="no")
        ApprovalFollowUp.objects.filter(request=request).update(next_attempt_at=timezone.now())
        # when two sweeps run at the same moment
        barrier = threading.Barrier(2)
        delivered, errors = [], []

        def sweep():
            try:
                barrier.wait()
                delivered.append(approval_followups_deliver())
            except Exception as exc:  # noqa: BLE001
                errors.append(exc)
            finally:
                connection.close()

        threads = [threading.Thread(target=sweep) for _ in range(2)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
    # then one of them delivered it, once; the other skipped the locked row
    assert errors == [] and sorted(delivered) == [0, 1]
    assert listener.calls == 2 and len(listener.heard) == 1
    kept = ApprovalFollowUp.objects.get(request=request)
    assert kept.attempts == 2 and kept.delivered_at is not None
