"""approval_request_transition: one compare-and-set per move, allowed by one table (that it is the
only writer of ApprovalRequest.status is checked in refundagent/config/tests/test_state_writers.py,
which knows every app)."""

import itertools

import pytest
from django.db.models import Q
from django.utils import timezone

from approvals.models import ApprovalRequest
from approvals.request_state import (
    TERMINAL,
    TRANSITIONS,
    approval_request_transition,
    approval_request_transition_allowed,
)

Status = ApprovalRequest.Status


@pytest.fixture
def request_at(file_request):
    made = file_request("120.00")

    def at(status):
        ApprovalRequest.objects.filter(pk=made.pk).update(status=status)
        made.refresh_from_db()
        return made

    return at


def _status(request) -> str:
    return ApprovalRequest.objects.filter(pk=request.pk).values_list("status", flat=True).get()


ALLOWED = [(source, to) for to, sources in TRANSITIONS.items() for source in sorted(sources)]
REFUSED = [
    (source, to) for source, to in itertools.product(list(Status), list(Status)) if source not in TRANSITIONS[to]
]


@pytest.mark.parametrize(("source", "to"), ALLOWED)
def test_every_allowed_move_is_made(request_at, source, to):
    request = request_at(source)

    moved = approval_request_transition(request=request, to=to, decision_note="moved")

    assert moved is True
    assert _status(request) == to and request.status == to and request.decision_note == "moved"


@pytest.mark.parametrize(("source", "to"), REFUSED)
def test_every_other_move_is_refused_and_writes_nothing(request_at, source, to):
    request = request_at(source)
    before = ApprovalRequest.objects.filter(pk=request.pk).values().get()

    moved = approval_request_transition(request=request, to=to, decision_note="moved")

    assert moved is False
    assert ApprovalRequest.objects.filter(pk=request.pk).values().get() == before
    assert request.status == source and request.decision_note != "moved"


def test_the_table_has_a_row_per_status_and_its_terminal_statuses_have_no_way_out():
    assert set(TRANSITIONS) == set(Status)
    assert TERMINAL == {
        Status.DENIED,
        Status.CHANGES_REQUESTED,
        Status.ESCALATED,
        Status.EXPIRED,
        Status.WITHDRAWN,
        Status.INVALIDATED,
        Status.FAILED,
        Status.PAYMENT_FAILED,
    }
    assert not any(TERMINAL & sources for sources in TRANSITIONS.values())
    # nothing moves a request back to pending: it is made so
    assert TRANSITIONS[Status.PENDING] == frozenset()


def test_from_narrows_the_table_to_what_the_caller_read(request_at):
    # given an executed request (the table lets an approved or executed one fail)
    request = request_at(Status.EXECUTED)

    # when a verifier that read it approved tries to fail it
    moved = approval_request_transition(request=request, to=Status.FAILED, from_=Status.APPROVED)

    # then it is left alone
    assert moved is False and _status(request) == Status.EXECUTED


def test_when_adds_a_condition_the_row_must_still_meet(request_at):
    request = request_at(Status.PENDING)

    assert approval_request_transition(request=request, to=Status.APPROVED, when=Q(args_hash="other")) is False
    assert _status(request) == Status.PENDING
    assert approval_request_transition(request=request, to=Status.APPROVED, when=Q(args_hash=request.args_hash))
    assert _status(request) == Status.APPROVED


def test_allowed_reads_the_table_for_the_instance_as_read(request_at):
    request = request_at(Status.APPROVED)

    assert approval_request_transition_allowed(request=request, to=Status.EXECUTED)
    assert not approval_request_transition_allowed(request=request, to=Status.DENIED)


def test_two_writers_of_one_request_never_both_win(request_at):
    # given a pending request read by two deciders
    request = request_at(Status.PENDING)
    first, second = ApprovalRequest.objects.get(pk=request.pk), ApprovalRequest.objects.get(pk=request.pk)

    # when one denies and the other, still holding the pending copy, approves
    denied = approval_request_transition(request=first, to=Status.DENIED, decided_at=timezone.now())
    approved = approval_request_transition(request=second, to=Status.APPROVED)

    # then only the first move happened
    assert (denied, approved) == (True, False)
    assert _status(request) == Status.DENIED
