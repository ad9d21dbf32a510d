"""Imports point one way: ledger <- approvals <- refundagent <- evals. A lower layer never
imports a higher one (it notifies through signals instead)."""

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
LAYERS = ["ledger", "approvals", "refundagent", "evals"]


def imported_apps(path: Path) -> set[str]:
    tree = ast.parse(path.read_text(), filename=str(path))
    names = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names.update(alias.name.split(".")[0] for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names.add(node.module.split(".")[0])
    return names & set(LAYERS)


@pytest.mark.parametrize("layer", LAYERS)
def test_no_layer_imports_a_higher_one(layer):
    higher = set(LAYERS[LAYERS.index(layer) + 1:])
    offenders = {
        str(path.relative_to(ROOT)): sorted(imported_apps(path) & higher)
        for path in (ROOT / layer).rglob("*.py")
        if imported_apps(path) & higher
    }
    assert offenders == {}


def test_the_check_would_catch_an_upward_import(tmp_path):
    bad = tmp_path / "bad.py"
    bad.write_text("from refundagent.models import Ticket\nimport evals.runner\n")
    assert imported_apps(bad) == {"refundagent", "evals"}
