"""Query cost as Shopify calculates it (shopify.dev, "GraphQL Admin API rate limits"), simplified:

- a scalar or enum field costs 0, an object field 1 plus its selection;
- a connection (`...Connection`) costs 2 plus, per node, 1 plus the node's selection: requested
  with `first`/`last` nodes, actual with the nodes returned;
- a plain list of objects (`Order.transactions`, `Order.refunds`) counts `first` items requested
  (1 without `first`) and the items returned actually;
- a mutation's root field costs 10 plus its payload's selection (the payload itself is free).

`requestedQueryCost` is what the bucket must hold before the query runs; after it runs the bucket
gets back the difference to `actualQueryCost`, as Shopify refunds it.
"""

from graphql import (
    DocumentNode,
    FieldNode,
    FragmentDefinitionNode,
    FragmentSpreadNode,
    GraphQLSchema,
    OperationDefinitionNode,
    OperationType,
    get_named_type,
    get_nullable_type,
    is_leaf_type,
    is_list_type,
)
from graphql.execution.values import get_argument_values

MUTATION_COST = 10
_MISSING = object()


class SelectionWalker:
    def __init__(self, schema: GraphQLSchema, document: DocumentNode, variables: dict):
        self.schema = schema
        self.variables = variables
        self.fragments = {d.name.value: d for d in document.definitions if isinstance(d, FragmentDefinitionNode)}

    def fields(self, selection_set, parent_type):
        for selection in selection_set.selections if selection_set else ():
            if isinstance(selection, FieldNode):
                yield selection, parent_type
            else:
                if isinstance(selection, FragmentSpreadNode):
                    fragment = self.fragments[selection.name.value]
                else:
                    fragment = selection
                condition = fragment.type_condition
                fragment_type = self.schema.get_type(condition.name.value) if condition else parent_type
                yield from self.fields(fragment.selection_set, fragment_type)

    def object_fields(self, selection_set, parent_type):
        """(field node, schema field, named type) of each selected field with a selection of its
        own: scalars, enums and introspection left out."""
        for node, owner in self.fields(selection_set, parent_type):
            name = node.name.value
            if name.startswith("__"):
                continue
            field = owner.fields[name]
            named = get_named_type(field.type)
            if not is_leaf_type(named):
                yield node, field, named

    def cost(self, selection_set, parent_type, data=_MISSING) -> int:
        """Requested cost when `data` is missing, else the actual cost of `data` (the result)."""
        actual = data is not _MISSING
        total = 0
        for node, field, named in self.object_fields(selection_set, parent_type):
            value = None
            if actual:
                key = node.alias.value if node.alias else node.name.value
                value = data.get(key) if isinstance(data, dict) else None
                if value is None:
                    continue
            if named.name.endswith("Connection"):
                total += self._connection(node, field, named, value, actual)
            elif is_list_type(get_nullable_type(field.type)):
                if actual:
                    total += sum(1 + self.cost(node.selection_set, named, item) for item in value if item is not None)
                else:
                    args = get_argument_values(field, node, self.variables)
                    total += (args.get("first") or 1) * (1 + self.cost(node.selection_set, named))
            else:
                total += 1 + (
                    self.cost(node.selection_set, named, value) if actual else self.cost(node.selection_set, named)
                )
        return total

    def _connection(self, node, field, connection_type, value, actual) -> int:
        node_type = get_named_type(connection_type.fields["nodes"].type)
        edge_type = get_named_type(connection_type.fields["edges"].type)
        # Where the nodes are selected: `nodes { ... }` and/or `edges { node { ... } }`.
        paths = []
        for sub, _ in self.fields(node.selection_set, connection_type):
            key = sub.alias.value if sub.alias else sub.name.value
            if sub.name.value == "nodes":
                paths.append((sub.selection_set, key, None))
            elif sub.name.value == "edges":
                for inner, _ in self.fields(sub.selection_set, edge_type):
                    if inner.name.value == "node":
                        paths.append((inner.selection_set, key, inner.alias.value if inner.alias else "node"))
        if not actual:
            args = get_argument_values(field, node, self.variables)
            count = args.get("first") or args.get("last") or 0
            per_node = max((self.cost(selection, node_type) for selection, _, _ in paths), default=0)
            return 2 + count * (1 + per_node)
        best = 0
        for selection, key, node_key in paths:
            items = value.get(key) or []
            if node_key is not None:
                items = [edge.get(node_key) for edge in items if edge]
            best = max(best, sum(1 + self.cost(selection, node_type, item) for item in items if item is not None))
        return 2 + best


def _root(schema: GraphQLSchema, operation: OperationDefinitionNode):
    return schema.mutation_type if operation.operation == OperationType.MUTATION else schema.query_type


def requested_cost(schema, document, operation, variables) -> int:
    walker = SelectionWalker(schema, document, variables)
    if operation.operation == OperationType.MUTATION:
        return sum(
            MUTATION_COST + walker.cost(node.selection_set, get_named_type(owner.fields[node.name.value].type))
            for node, owner in walker.fields(operation.selection_set, _root(schema, operation))
            if not node.name.value.startswith("__")
        )
    return walker.cost(operation.selection_set, _root(schema, operation))


def actual_cost(schema, document, operation, variables, data) -> int:
    walker = SelectionWalker(schema, document, variables)
    if data is None:
        return 0
    if operation.operation == OperationType.MUTATION:
        total = 0
        for node, owner in walker.fields(operation.selection_set, _root(schema, operation)):
            if node.name.value.startswith("__"):
                continue
            payload = data.get(node.alias.value if node.alias else node.name.value)
            payload_type = get_named_type(owner.fields[node.name.value].type)
            total += MUTATION_COST + (walker.cost(node.selection_set, payload_type, payload) if payload else 0)
        return total
    return walker.cost(operation.selection_set, _root(schema, operation), data)
