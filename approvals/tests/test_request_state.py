"""approval_request_transition: one compare-and-set per move, allowed by one table, and the only
writer of ApprovalRequest.status in the product."""

import ast
import itertools
from pathlib import Path

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
ROOT = Path(__file__).resolve().parents[2]
PRODUCT = ("approvals", "ledger", "refundagent", "evals")
OWNER = Path("approvals/request_state.py")


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


# --- the only writer ---------------------------------------------------------------------------


def _mentions_approval_request(node: ast.AST) -> bool:
    return any(
        (isinstance(n, ast.Name) and n.id == "ApprovalRequest")
        or (isinstance(n, ast.Attribute) and n.attr == "approval_requests")
        for n in ast.walk(node)
    )


def _writes_status(call: ast.Call) -> bool:
    if any(keyword.arg == "status" for keyword in call.keywords):
        return True
    for keyword in call.keywords:  # update_or_create(defaults={"status": ...})
        if keyword.arg in ("defaults", "create_defaults") and isinstance(keyword.value, ast.Dict):
            if any(isinstance(key, ast.Constant) and key.value == "status" for key in keyword.value.keys):
                return True
    return False


def status_writers(source: str, filename: str = "<src>") -> list[str]:
    """Where `source` writes ApprovalRequest.status: `.update(status=...)`, `status=` (or
    `defaults={"status": ...}`) in `create` / `get_or_create` / `update_or_create` on a chain that
    names ApprovalRequest, and `<request>.status = ...` (or setattr) on a name that says it is a
    request or a value that names ApprovalRequest."""
    found = []
    for node in ast.walk(ast.parse(source, filename)):
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
            method = node.func.attr
            if method in ("update", "create", "get_or_create", "update_or_create", "bulk_update"):
                if method == "bulk_update":
                    writes = any(isinstance(n, ast.Constant) and n.value == "status" for n in ast.walk(node))
                else:
                    writes = _writes_status(node)
                if writes and _mentions_approval_request(node.func.value):
                    found.append(f"{filename}:{node.lineno}: {method}(status=...)")
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "setattr":
            args = node.args
            if len(args) >= 2 and isinstance(args[1], ast.Constant) and args[1].value == "status":
                if _names_a_request(args[0]) or (len(args) > 2 and _mentions_approval_request(args[2])):
                    found.append(f"{filename}:{node.lineno}: setattr(..., 'status', ...)")
        if isinstance(node, ast.Assign | ast.AugAssign | ast.AnnAssign):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            for target in targets:
                if isinstance(target, ast.Attribute) and target.attr == "status":
                    if _names_a_request(target.value) or (
                        node.value is not None and _mentions_approval_request(node.value)
                    ):
                        found.append(f"{filename}:{node.lineno}: .status = ...")
    return found


def _names_a_request(node: ast.AST) -> bool:
    name = node.id if isinstance(node, ast.Name) else node.attr if isinstance(node, ast.Attribute) else ""
    return "request" in name.lower() or "approval" in name.lower() or name in ("refile", "replacement")


def _product_modules():
    for package in PRODUCT:
        for path in sorted((ROOT / package).rglob("*.py")):
            relative = path.relative_to(ROOT)
            if {"tests", "migrations"} & set(relative.parts) or relative == OWNER:
                continue
            yield relative


def test_only_request_state_writes_an_approval_requests_status():
    writers = [
        found
        for relative in _product_modules()
        for found in status_writers((ROOT / relative).read_text(), str(relative))
    ]

    assert writers == [], "write ApprovalRequest.status only through approvals.request_state: " + "; ".join(writers)


@pytest.mark.parametrize(
    "source",
    [
        "ApprovalRequest.objects.filter(pk=1).update(status='denied')",
        "ApprovalRequest.objects.for_tenant(t).filter(pk=1).update(status=ApprovalRequest.Status.DENIED, note='')",
        "ApprovalRequest.objects.update_or_create(pk=1, defaults={'status': 'denied'})",
        "ApprovalRequest.objects.create(order=o, status='approved')",
        "tenant.approval_requests.filter(pk=1).update(status='denied')",
        "request.status = 'approved'\nrequest.save()",
        "replacement.status = ApprovalRequest.Status.APPROVED",
        "row.status = ApprovalRequest.Status.APPROVED",
        "setattr(request, 'status', 'denied')",
        "ApprovalRequest.objects.bulk_update(rows, ['status'])",
    ],
)
def test_the_check_finds_each_way_of_writing_the_status(source):
    assert status_writers(source) != []


@pytest.mark.parametrize(
    "source",
    [
        "Ticket.objects.filter(pk=1).update(status='closed')",
        "replica.status = RefundPolicy.Status.PUBLISHED",
        "ApprovalRequest.objects.filter(status='pending').update(note='x')",
        "PolicyReplay.objects.filter(pk=1).update(status='running')",
    ],
)
def test_the_check_leaves_other_models_and_reads_alone(source):
    assert status_writers(source) == []
