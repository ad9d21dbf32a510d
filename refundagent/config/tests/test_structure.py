"""The code keeps two promises of its layout: no import hidden inside a function (so no import
cycle is dodged; AppConfig.ready, where Django wants signal receivers connected, is the one
exception), and no fault injection on the money path (the crash tests inject it from outside)."""

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]
APPS = ("ledger", "approvals", "refundagent", "evals")
# Where an import inside a function is the point, not a dodge: Django wants receivers connected in
# AppConfig.ready, and a process entry point may import models only after django.setup() ran.
BOOTSTRAP = {"ready", "refundagent/config/celery.py:_observability", "refundagent/config/healthcheck.py:main"}


def product_modules():
    return [
        p
        for app in APPS
        for p in (ROOT / app).rglob("*.py")
        if not {"tests", "migrations"} & set(p.relative_to(ROOT).parts)
    ]


def function_local_imports(path: Path) -> list[str]:
    found = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and not (
            {node.name, f"{path.relative_to(ROOT)}:{node.name}"} & BOOTSTRAP
        ):
            found += [
                f"{path.relative_to(ROOT)}:{n.lineno}"
                for n in ast.walk(node)
                if isinstance(n, (ast.Import, ast.ImportFrom))
            ]
    return found


def test_no_function_local_imports():
    modules = product_modules()
    local = [where for path in modules for where in function_local_imports(path)]
    assert len(modules) > 50 and local == []


def test_the_check_finds_a_hidden_import(tmp_path):
    planted = tmp_path / "planted.py"
    planted.write_text("def go():\n    from approvals import gate\n    return gate\n")
    global ROOT
    saved, ROOT = ROOT, tmp_path
    try:
        assert function_local_imports(planted) == ["planted.py:2"]
    finally:
        ROOT = saved


def test_no_process_killing_in_the_product():
    offenders = [p.name for p in product_modules() if "SIGKILL" in p.read_text() or "os.kill" in p.read_text()]
    assert offenders == []
