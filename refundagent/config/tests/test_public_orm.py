"""The product uses Django's public API only, on PostgreSQL only.

No product module reaches into the ORM's internals, which Django's stability promise does not
cover and which change between releases: its compilers (`get_compiler`, `query.chain`), how it
builds instances (`get_related_populators`, `ModelIterable`, `klass_info`), a queryset's private
prefetch list, or an instance's `_state` set by hand. Reading `instance._state.adding` (the
documented way to tell a new instance) is fine. Nor does any module branch on
`connection.vendor`: PostgreSQL is the only database. Tests and migrations are not product
modules here."""

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[3]
APPS = ["ledger", "approvals", "refundagent", "evals"]
INTERNALS = frozenset(
    {"get_compiler", "get_related_populators", "ModelIterable", "klass_info", "_prefetch_related_lookups"}
)


def _named(node: ast.AST, name: str) -> bool:
    return (isinstance(node, ast.Name) and node.id == name) or (isinstance(node, ast.Attribute) and node.attr == name)


def _is_state(node: ast.AST) -> bool:
    return isinstance(node, ast.Attribute) and node.attr == "_state"


def _is_connection(node: ast.AST) -> bool:
    """`connection`, `x.connection` (a schema editor's), or `connections[...]`."""
    if isinstance(node, ast.Subscript):
        return _named(node.value, "connections")
    return _named(node, "connection")


def offences(source: str) -> set[str]:
    """What of the above `source` does, by name."""
    found = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.ImportFrom):
            found |= {alias.name for alias in node.names if alias.name in INTERNALS}
        elif isinstance(node, ast.Name) and node.id in INTERNALS:
            found.add(node.id)
        elif isinstance(node, ast.Attribute):
            if node.attr in INTERNALS:
                found.add(node.attr)
            elif node.attr == "chain" and _named(node.value, "query"):
                found.add("query.chain")
            elif node.attr == "vendor" and _is_connection(node.value):
                found.add("connection.vendor")
            elif node.attr == "fields_cache" and _is_state(node.value):
                found.add("_state set by hand")
        if isinstance(node, (ast.Assign, ast.AugAssign, ast.AnnAssign)):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            for target in targets:
                for part in ast.walk(target):
                    if isinstance(part, ast.Attribute) and _is_state(part.value):
                        found.add("_state set by hand")
    return found


def product_modules():
    for app in APPS:
        for path in sorted((ROOT / app).rglob("*.py")):
            if not {"tests", "migrations"} & set(path.relative_to(ROOT).parts):
                yield path


def test_no_product_module_uses_the_orms_internals_or_branches_on_the_database():
    found = {}
    for path in product_modules():
        relative = path.relative_to(ROOT).as_posix()
        offending = offences(path.read_text())
        if offending:
            found[relative] = sorted(offending)
    assert found == {}


@pytest.mark.parametrize(
    "source,expected",
    [
        ("sql, params = queryset.query.get_compiler(using).as_sql()", {"get_compiler"}),
        ("query = rows.query.chain(sql.UpdateQuery)", {"query.chain"}),
        (
            "from django.db.models.query import ModelIterable, get_related_populators",
            {"ModelIterable", "get_related_populators"},
        ),
        ("model = compiler.klass_info['model']", {"klass_info"}),
        ("lookups = queryset._prefetch_related_lookups", {"_prefetch_related_lookups"}),
        ("instance._state.adding = False", {"_state set by hand"}),
        ("instance._state.db, other = 'default', 1", {"_state set by hand"}),
        ("entry._state.fields_cache.update(order=order)", {"_state set by hand"}),
        ("if connection.vendor == 'postgresql': pass", {"connection.vendor"}),
        ("postgres = connections[alias].vendor == 'postgresql'", {"connection.vendor"}),
        ("if schema_editor.connection.vendor != 'sqlite': pass", {"connection.vendor"}),
        # public API and look-alikes: nothing
        ("if self.pk and not self._state.adding: pass", set()),
        ("self._state = threading.local()\nsetattr(self._state, 'key', 1)", set()),
        ("queryset = Ticket.objects.select_related('order').prefetch_related('items').only('id')", set()),
        ("vendor = settings.PAYMENT_VENDOR\nchain = [1, 2]", set()),
    ],
)
def test_the_check_tells_the_internals_from_the_public_api(source, expected):
    assert offences(source) == expected
