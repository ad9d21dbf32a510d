"""Imports point one way: ledger <- approvals <- refundagent <- evals. A lower layer never
imports a higher one (it notifies through signals instead), not even by a dotted string
("evals.urls", "approvals.api.router") that Django or ninja import for it.

Above them all is the wiring, refundagent.config (settings, urls, the API root, the Celery
app): the only code that may know every app. No domain module imports it."""

import ast
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[3]
LAYERS = ["ledger", "approvals", "refundagent", "evals"]
WIRING = "refundagent.config"
WIRING_DIR = ROOT / "refundagent" / "config"
# The package __init__ loads the Celery app so that @shared_task binds to it and
# `celery -A refundagent` finds it; Python runs that __init__ before any wiring module anyway.
ALLOWED = {"refundagent/__init__.py": {WIRING}}
# A string that names a module, an object in one ("approvals.api.router") or a URL namespace
# ("evals:dashboard"): identifiers joined by dots or a colon, nothing else.
DOTTED = re.compile(r"[A-Za-z_]\w*(?:[.:][A-Za-z_]\w*)*")


def module_name(path: Path, root: Path = ROOT) -> str:
    parts = list(path.relative_to(root).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def owner(name: str) -> str | None:
    """The layer (or the wiring) a dotted name belongs to, or None for anything else."""
    if name == WIRING or name.startswith((WIRING + ".", WIRING + ":")):
        return WIRING
    first = re.split(r"[.:]", name, maxsplit=1)[0]
    return first if first in LAYERS else None


def referenced_apps(path: Path, root: Path = ROOT) -> set[str]:
    """Every layer (and the wiring) the module imports, relatively or not, or names by string."""
    tree = ast.parse(path.read_text(), filename=str(path))
    module = module_name(path, root)
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    names = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names.extend(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = ".".join(package.split(".")[: len(package.split(".")) - node.level + 1])
                base = ".".join(p for p in (base, node.module) if p)
            else:
                base = node.module or ""
            names.append(base)
            # `from refundagent import config` imports the wiring as much as `import refundagent.config`.
            names.extend(f"{base}.{alias.name}" for alias in node.names)
        elif isinstance(node, ast.Constant) and isinstance(node.value, str) and DOTTED.fullmatch(node.value):
            names.append(node.value)
    return {o for o in map(owner, names) if o is not None}


def domain_modules(layer: str):
    for path in sorted((ROOT / layer).rglob("*.py")):
        if not path.is_relative_to(WIRING_DIR):
            yield path


@pytest.mark.parametrize("layer", LAYERS)
def test_no_layer_imports_or_names_a_higher_one_or_the_wiring(layer):
    forbidden = set(LAYERS[LAYERS.index(layer) + 1 :]) | {WIRING}
    offenders = {}
    for path in domain_modules(layer):
        relative = path.relative_to(ROOT).as_posix()
        found = (referenced_apps(path) & forbidden) - ALLOWED.get(relative, set())
        if found:
            offenders[relative] = sorted(found)
    assert offenders == {}


def test_the_wiring_is_where_every_app_is_named():
    named = set().union(*(referenced_apps(path) for path in WIRING_DIR.glob("*.py")))
    assert set(LAYERS) <= named


def test_the_check_would_catch_an_upward_import(tmp_path):
    bad = tmp_path / "bad.py"
    bad.write_text("from refundagent.models import Ticket\nimport evals.runner\n")
    assert referenced_apps(bad, tmp_path) == {"refundagent", "evals"}


def test_the_check_would_catch_an_app_named_by_string(tmp_path):
    bad = tmp_path / "bad.py"
    bad.write_text(
        'urlpatterns = [path("evals/", include("evals.urls"))]\n'
        'api.add_router("/approvals", "approvals.api.router")\n'
        'INSTALLED_APPS = ["ledger"]\n'
        '"""Prose that mentions evals is not a reference."""\n'
    )
    assert referenced_apps(bad, tmp_path) == {"evals", "approvals", "ledger"}


def test_the_check_would_catch_a_domain_module_importing_the_wiring(tmp_path):
    (tmp_path / "refundagent" / "agent").mkdir(parents=True)
    relative = tmp_path / "refundagent" / "services.py"
    relative.write_text("from .config.settings import DEBUG\n")
    parent = tmp_path / "refundagent" / "agent" / "loop.py"
    parent.write_text("from .. import config\n")
    absolute = tmp_path / "refundagent" / "tasks.py"
    absolute.write_text("from refundagent.config.celery import app\n")
    by_string = tmp_path / "refundagent" / "views.py"
    by_string.write_text('ROOT_URLCONF = "refundagent.config.urls"\n')
    for bad in (relative, parent, absolute, by_string):
        assert WIRING in referenced_apps(bad, tmp_path), bad.name


def test_cent_and_zero_are_defined_once():
    """Money's constants live in ledger.money with its one parser: no other product module defines
    CENT or ZERO, or writes Decimal("0.01") / Decimal("0.00") of its own."""
    money = ROOT / "ledger" / "money.py"
    offenders = []
    for layer in LAYERS:
        for path in (ROOT / layer).rglob("*.py"):
            if path == money or {"tests", "migrations"} & set(path.relative_to(ROOT).parts):
                continue
            for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
                defined = isinstance(node, ast.Assign) and any(
                    isinstance(target, ast.Name) and target.id in ("CENT", "ZERO") for target in node.targets
                )
                literal = (
                    isinstance(node, ast.Call)
                    and getattr(node.func, "id", None) == "Decimal"
                    and [getattr(arg, "value", None) for arg in node.args] in (["0.01"], ["0.00"])
                )
                if defined or literal:
                    offenders.append(f"{path.relative_to(ROOT).as_posix()}:{node.lineno}")
    assert offenders == []
