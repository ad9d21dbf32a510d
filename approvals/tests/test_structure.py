"""The approvals layer's code keeps two promises of its layout: no import hidden inside a
function (so no cycle is dodged), and no fault injection on the money path."""

import ast
from pathlib import Path

APPROVALS = Path(__file__).resolve().parent.parent


def product_modules():
    return [p for p in APPROVALS.rglob("*.py") if "tests" not in p.relative_to(APPROVALS).parts
            and "migrations" not in p.relative_to(APPROVALS).parts]


def test_no_function_local_imports():
    local = []
    for path in product_modules():
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                local += [f"{path.name}:{n.lineno}" for n in ast.walk(node) if isinstance(n, (ast.Import, ast.ImportFrom))]
    assert product_modules() and local == []


def test_no_process_killing_in_the_product():
    offenders = [p.name for p in product_modules() if "SIGKILL" in p.read_text() or "os.kill" in p.read_text()]
    assert offenders == []
