"""Bulk query operations as Shopify runs them (shopify.dev, "Perform bulk operations with the
GraphQL Admin API"):

- `bulkOperationRunQuery(query:, groupObjects:)` checks the query against the schema and against
  the bulk rules (a query with at least one connection, at most five connections, connections
  nested at most two deep, no connection inside a list field, a parent of a nested connection
  selects its `id`; no `first`/`last` needed) and answers `userErrors` (code INVALID) otherwise;
  at most `MAX_CONCURRENT` query operations run at once per shop (2026-04 allows several);
- the operation is CREATED, then RUNNING at the first poll (`bulkOperation(id:)` or
  `currentBulkOperation`), then COMPLETED (or FAILED) after `polls_to_finish` polls; the query is
  executed when it finishes, so the file is the shop's state at that moment;
- the result is a JSONL file at `url`: one line per object; a node of a nested connection is its
  own line, after its parent, with `__parentId` (the fake always writes a parent's children right
  after it, as `groupObjects: true` promises); lists (`Order.transactions`) stay inline;
- bulk queries do not draw on the query-cost bucket: only the mutation and the polls are costed.

Test controls: `fail_next(error_code, partial=)` makes the next operation FAILED (with a
`partialDataUrl` holding its first half when `partial`); `tamper(body) -> body` rewrites the next
files (hostile data); `polls_to_finish`; downloads fail through the server's
`fail_next(on="download")` (a 5xx, or "cut": the body stops halfway and the connection closes).
"""

import itertools
import json
import secrets
from dataclasses import dataclass, field
from datetime import datetime

from graphql import (
    FieldNode,
    GraphQLError,
    OperationDefinitionNode,
    OperationType,
    get_named_type,
    get_nullable_type,
    is_list_type,
    parse,
    validate,
)

from .cost import SelectionWalker
from .models import gid, iso, now_seconds

MAX_CONCURRENT = 5
MAX_CONNECTIONS = 5
MAX_NESTING = 2
FINISHED = ("COMPLETED", "FAILED", "CANCELED", "EXPIRED")


@dataclass(eq=False)
class Operation:
    num: int
    shop_domain: str
    query: str
    document: object
    created: datetime
    status: str = "CREATED"
    error_code: str | None = None
    completed: datetime | None = None
    polls: int = 0
    object_count: int = 0
    root_object_count: int = 0
    file_key: str | None = None
    partial_key: str | None = None
    fail_with: tuple | None = None

    @property
    def id(self) -> str:
        return gid("BulkOperation", self.num)


@dataclass
class BulkOperations:
    """The bulk operations of every shop of one fake. `execute(shop_domain, document)` runs a
    query and returns its data; `file_url(key)` is where the server serves a file."""

    execute: object
    file_url: object
    polls_to_finish: int = 2
    operations: dict = field(default_factory=dict)
    files: dict = field(default_factory=dict)
    failures: list = field(default_factory=list)
    runs: list = field(default_factory=list)
    tamper: object = None
    _ids: object = field(default_factory=lambda: itertools.count(1))

    def fail_next(self, error_code: str = "INTERNAL_SERVER_ERROR", *, partial: bool = False) -> None:
        self.failures.append((error_code, partial))

    # -- the API ---------------------------------------------------------------------------

    def run(self, schema, shop_domain: str, query: str) -> dict:
        self.runs.append({"shop": shop_domain, "query": query})
        try:
            document = parse(query)
        except GraphQLError as error:
            return _refused(f"Invalid bulk query: {error.message}")
        errors = validate(schema, document) or bulk_rule_errors(schema, document)
        if errors:
            return _refused("; ".join(getattr(e, "message", str(e)) for e in errors))
        running = [o for o in self.operations.values() if o.shop_domain == shop_domain and o.status not in FINISHED]
        if len(running) >= MAX_CONCURRENT:
            return _refused(
                f"A shop can run at most {MAX_CONCURRENT} bulk query operations at once.", code="LIMIT_REACHED"
            )
        operation = Operation(next(self._ids), shop_domain, query, document, now_seconds())
        if self.failures:
            operation.fail_with = self.failures.pop(0)
        self.operations[operation.id] = operation
        return {"bulkOperation": self.view(operation), "userErrors": []}

    def by_id(self, shop_domain: str, operation_id: str) -> dict | None:
        operation = self.operations.get(operation_id)
        if operation is None or operation.shop_domain != shop_domain:
            return None
        return self.view(self._advance(operation))

    def current(self, shop_domain: str, kind: str = "QUERY") -> dict | None:
        if kind != "QUERY":
            return None
        mine = [o for o in self.operations.values() if o.shop_domain == shop_domain]
        return self.view(self._advance(mine[-1])) if mine else None

    def view(self, operation: Operation) -> dict:
        data = self.files.get(operation.file_key) if operation.file_key else None
        return {
            "id": operation.id,
            "status": operation.status,
            "errorCode": operation.error_code,
            "createdAt": iso(operation.created),
            "completedAt": iso(operation.completed),
            "objectCount": str(operation.object_count),
            "rootObjectCount": str(operation.root_object_count),
            "fileSize": str(len(data)) if data is not None else None,
            "url": self.file_url(operation.file_key) if operation.file_key else None,
            "partialDataUrl": self.file_url(operation.partial_key) if operation.partial_key else None,
            "query": operation.query,
            "type": "QUERY",
        }

    # -- running ---------------------------------------------------------------------------

    def _advance(self, operation: Operation) -> Operation:
        if operation.status in FINISHED:
            return operation
        operation.polls += 1
        operation.status = "RUNNING"
        if operation.polls >= self.polls_to_finish:
            self._finish(operation)
        return operation

    def _finish(self, operation: Operation) -> None:
        data = self.execute(operation.shop_domain, operation.document)
        lines, roots = jsonl_lines(data)
        body = b"".join(json.dumps(line, separators=(",", ":")).encode() + b"\n" for line in lines)
        if self.tamper is not None:
            body = self.tamper(body)
        operation.completed = now_seconds()
        operation.object_count, operation.root_object_count = len(lines), roots
        if operation.fail_with is not None:
            operation.status, operation.error_code = "FAILED", operation.fail_with[0]
            if operation.fail_with[1] and lines:
                half = b"".join(body.splitlines(keepends=True)[: max(len(lines) // 2, 1)])
                operation.partial_key = self._store(half)
            return
        operation.status = "COMPLETED"
        if lines:
            # Shopify answers `url: null` for an operation that found nothing.
            operation.file_key = self._store(body)

    def _store(self, body: bytes) -> str:
        key = secrets.token_urlsafe(16)
        self.files[key] = body
        return key


def _refused(message: str, code: str = "INVALID") -> dict:
    return {"bulkOperation": None, "userErrors": [{"code": code, "field": ["query"], "message": message}]}


def bulk_rule_errors(schema, document) -> list[str]:
    """Shopify's restrictions on a bulk query, beyond the schema's own validation."""
    operations = [d for d in document.definitions if isinstance(d, OperationDefinitionNode)]
    if len(operations) != 1 or operations[0].operation != OperationType.QUERY:
        return ["Bulk queries must contain exactly one query operation."]
    errors: list[str] = []
    connections = []
    # The cost walker's traversal: fragments and inline fragments are followed like fields.
    walker = SelectionWalker(schema, document, {})

    def walk(selection_set, parent_type, depth, in_list):
        selects_id = any(s.name.value == "id" for s, _ in walker.fields(selection_set, parent_type))
        for node, field_, named in walker.object_fields(selection_set, parent_type):
            name = node.name.value
            if not named.name.endswith("Connection"):
                walk(node.selection_set, named, depth, in_list or is_list_type(get_nullable_type(field_.type)))
                continue
            connections.append(name)
            if in_list:
                errors.append(
                    f"Queries that contain a connection field within a list field are not supported ({name})."
                )
            if depth + 1 > MAX_NESTING:
                errors.append(f"Bulk queries cannot nest connections more than {MAX_NESTING} levels deep ({name}).")
            if depth >= 1 and not selects_id:
                errors.append(f"The parent of the nested connection {name} must select `id`.")
            edge_type = get_named_type(named.fields["edges"].type)
            for sub, _ in walker.fields(node.selection_set, named):
                if sub.name.value == "nodes":
                    walk(sub.selection_set, get_named_type(named.fields["nodes"].type), depth + 1, in_list)
                elif sub.name.value == "edges":
                    for inner, _ in walker.fields(sub.selection_set, edge_type):
                        if inner.name.value == "node":
                            walk(inner.selection_set, get_named_type(edge_type.fields["node"].type), depth + 1, in_list)

    walk(operations[0].selection_set, schema.query_type, 0, False)
    top = [s.name.value for s in operations[0].selection_set.selections if isinstance(s, FieldNode)]
    if any(name in ("node", "nodes") for name in top):
        errors.append("The top-level node and nodes fields can't be used in bulk queries.")
    if not connections:
        errors.append("Bulk queries must contain at least one connection.")
    if len(connections) > MAX_CONNECTIONS:
        errors.append(f"Bulk queries cannot contain more than {MAX_CONNECTIONS} connections.")
    return errors


def _is_connection(value) -> bool:
    return isinstance(value, dict) and ("edges" in value or "nodes" in value)


def _nodes(connection: dict) -> list:
    if "nodes" in connection:
        return list(connection["nodes"] or [])
    return [edge["node"] for edge in connection.get("edges") or [] if edge and edge.get("node")]


def jsonl_lines(data: dict | None) -> tuple[list[dict], int]:
    """The lines of the result file and how many are root objects: every node of a connection is
    one line; a nested connection's nodes follow their parent, each with `__parentId`."""
    lines: list[dict] = []

    def emit(node: dict, parent_id: str | None) -> None:
        line = {k: v for k, v in node.items() if not _is_connection(v)}
        if parent_id is not None:
            line["__parentId"] = parent_id
        lines.append(line)
        for value in node.values():
            if _is_connection(value):
                for child in _nodes(value):
                    emit(child, node.get("id"))

    roots = 0
    for value in (data or {}).values():
        if _is_connection(value):
            for node in _nodes(value):
                roots += 1
                emit(node, None)
    return lines, roots
