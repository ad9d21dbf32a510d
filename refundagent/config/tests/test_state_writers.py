"""Each state machine has one writer: ApprovalRequest.status only approvals.request_state, a refund
entry's status only ledger_refund_record_outcome. Every product module is read (here, in the
wiring, because only it may name every app) and any other writer fails."""

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[3]
PRODUCT = ("approvals", "ledger", "refundagent", "evals")
OWNER = Path("approvals/request_state.py")


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


def _calls_of(attribute: str) -> list[str]:
    """Where a product module calls `<anything>.<attribute>(...)`, as `path:function`."""
    found = []
    for relative in _product_modules():
        tree = ast.parse((ROOT / relative).read_text())
        for function in ast.walk(tree):
            if not isinstance(function, ast.FunctionDef | ast.AsyncFunctionDef):
                continue
            for node in ast.walk(function):
                if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == attribute:
                    found.append(f"{relative}:{function.name}")
    return sorted(set(found))


def test_only_record_outcome_moves_a_refund_entrys_status():
    # The entry's rows refuse UPDATE (AppendOnlyQuerySet, and the triggers of migration 0003)
    # but for the one compare-and-set the ledger allows: it is called from one function.
    assert _calls_of("_status_compare_and_set") == ["ledger/services.py:ledger_refund_record_outcome"]
