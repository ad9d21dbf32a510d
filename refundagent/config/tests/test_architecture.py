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
    names = []
    for node, imported in import_nodes(path, root):
        if imported is not None:
            names.extend(imported)
        elif isinstance(node, ast.Constant) and isinstance(node.value, str) and DOTTED.fullmatch(node.value):
            names.append(node.value)
    return {o for o in map(owner, names) if o is not None}


def import_nodes(path: Path, root: Path = ROOT):
    """Every node of the module (top level or inside a function), with the absolute names an
    import statement imports (relative ones resolved; `from a import b` gives `a` and `a.b`, as
    `from refundagent import config` imports the wiring as much as `import refundagent.config`),
    or None for any other node."""
    module = module_name(path, root)
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
        if isinstance(node, ast.Import):
            yield node, [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = ".".join(package.split(".")[: len(package.split(".")) - node.level + 1])
                base = ".".join(p for p in (base, node.module) if p)
            else:
                base = node.module or ""
            yield node, [base, *(f"{base}.{alias.name}" for alias in node.names)]
        else:
            yield node, None


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


# --- No import circle -------------------------------------------------------------------------
# A circle of imports works only while something happens to import its modules in a good order
# (an app's ready()); imported first, a module of it fails with "partially initialized module".
# Function-local imports count: one that exists only to dodge a circle is the circle.
ASIDE = {"tests", "migrations", "benchmarks"}


def product_modules(root: Path = ROOT) -> dict[str, Path]:
    """Every product module by dotted name (the wiring included), tests, migrations and benchmarks aside."""
    found = {}
    for layer in LAYERS:
        for path in sorted((root / layer).rglob("*.py")):
            if not ASIDE & set(path.relative_to(root).parts):
                found[module_name(path, root)] = path
    return found


def imported_modules(path: Path, modules: dict[str, Path], root: Path = ROOT) -> set[str]:
    """The product modules `path` imports anywhere in it (top level or inside a function), each
    import resolved to the deepest product module it names (`from a.b import c` is `a.b.c` when
    that is a module, else `a.b`)."""
    module = module_name(path, root)

    def deepest(name: str) -> str | None:
        parts = name.split(".")
        for end in range(len(parts), 0, -1):
            if ".".join(parts[:end]) in modules:
                return ".".join(parts[:end])
        return None

    names = [name for _, imported in import_nodes(path, root) if imported for name in imported]
    return {target for target in map(deepest, names) if target is not None} - {module}


def import_cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan's algorithm, iterative:
    written here because it is twenty lines and the test needs no graph library)."""
    index, low, stack, on_stack, cycles = {}, {}, [], set(), []
    for start in sorted(graph):
        if start in index:
            continue
        work = [(start, iter(sorted(graph[start])))]
        index[start] = low[start] = len(index)
        stack.append(start)
        on_stack.add(start)
        while work:
            node, edges = work[-1]
            for target in edges:
                if target not in index:
                    index[target] = low[target] = len(index)
                    stack.append(target)
                    on_stack.add(target)
                    work.append((target, iter(sorted(graph.get(target, ())))))
                    break
                if target in on_stack:
                    low[node] = min(low[node], index[target])
            else:
                work.pop()
                if work:
                    low[work[-1][0]] = min(low[work[-1][0]], low[node])
                if low[node] == index[node]:
                    component = []
                    while True:
                        member = stack.pop()
                        on_stack.discard(member)
                        component.append(member)
                        if member == node:
                            break
                    if len(component) > 1:
                        cycles.append(sorted(component))
    return cycles


def import_graph(root: Path = ROOT) -> dict[str, set[str]]:
    modules = product_modules(root)
    return {name: imported_modules(path, modules, root) for name, path in modules.items()}


def test_no_product_module_is_in_an_import_circle():
    graph = import_graph()
    cycles = [" -> ".join(f"{m} (imports {sorted(graph[m] & set(c))})" for m in c) for c in import_cycles(graph)]
    assert cycles == [], "import circles:\n" + "\n".join(cycles)


def test_the_check_would_catch_a_circle_through_a_function_local_import(tmp_path):
    package = tmp_path / "refundagent"
    (package / "agent").mkdir(parents=True)
    (package / "__init__.py").write_text("")
    (package / "agent" / "__init__.py").write_text("")
    (package / "selectors.py").write_text("from .emails import SENDABLE\n")
    (package / "emails.py").write_text("def publish():\n    from refundagent import tasks\n")
    (package / "tasks.py").write_text("import refundagent.agent.loop\n")
    (package / "agent" / "loop.py").write_text("from ..selectors import ticket_get\n")
    (package / "models.py").write_text("from refundagent.selectors import x\n")

    cycles = import_cycles(import_graph(tmp_path))

    assert cycles == [["refundagent.agent.loop", "refundagent.emails", "refundagent.selectors", "refundagent.tasks"]]


# The apps' ready() imports receivers, tasks and checks, and the admin's ready() every admin
# module, which load most modules in an order that happens to work; switched off here, so that
# each module below is the first one imported.
IMPORT_FIRST = """
import importlib, os, sys
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "refundagent.config.settings")
import django
from django.apps import AppConfig
from django.contrib.admin.apps import AdminConfig
AdminConfig.ready = lambda self: None
for label in ("ledger", "approvals", "refundagent", "evals"):
    for config in vars(importlib.import_module(label + ".apps")).values():
        if isinstance(config, type) and issubclass(config, AppConfig) and config is not AppConfig:
            config.ready = lambda self: None
django.setup()
importlib.import_module(sys.argv[1])
"""


@pytest.mark.parametrize(
    "module",
    [
        "refundagent.agent.decision",
        "refundagent.selectors",
        "refundagent.emails",
        "refundagent.tasks",
        "refundagent.agent.loop",
        "refundagent.replies_send",
        "refundagent.outbox",
        "refundagent.sweep",
        "refundagent.receivers",
    ],
)
def test_a_module_imports_first_in_a_fresh_interpreter(module):
    import subprocess
    import sys

    result = subprocess.run(
        [sys.executable, "-c", IMPORT_FIRST, module], cwd=ROOT, capture_output=True, text=True, timeout=120
    )
    assert result.returncode == 0, result.stderr[-2000:]
