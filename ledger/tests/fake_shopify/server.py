"""FakeShopify: a local HTTP server speaking Shopify's Admin API 2026-04 wire format, for tests.

One server serves several shops. **The shop is the first path segment**: the product's
`SHOPIFY_API_BASE` is `fake.api_base` = `http://127.0.0.1:PORT/{shop}`, and the product replaces
the literal `{shop}` with the shop's domain where it would write `https://{shop}`:

    POST {base}/admin/oauth/access_token          client-credentials grant (form or JSON)
    POST {base}/admin/api/2026-04/graphql.json    GraphQL, header X-Shopify-Access-Token

`fake.base_for("acme.myshopify.com")` is that base for one shop.

GraphQL documents are parsed and validated with graphql-core against `admin_2026_04.graphql` (a
subset of the real schema with the real names), so a field Shopify does not have fails with
`errors`, as Shopify answers it (HTTP 200). Every answer carries `extensions.cost` from a leaky
bucket per shop (`bucket_size` points, refilled at `restore_rate` a second; cost.py says how a
query is costed); a query costing more than the bucket holds now answers `THROTTLED` and is counted
in `throttled`, one costing more than the bucket's size answers `MAX_COST_EXCEEDED`.

`refundCreate` requires `@idempotent(key:)` (mandatory from 2026-04; a runtime error without it):
the same key and input answer the first result again, the same key with another input answers
Shopify's IDEMPOTENCY_KEY_PARAMETER_MISMATCH error. refunds.py has the checks and userErrors.

Test controls: `add_shop`, `add_order`, `add_transaction`, `refund_in_admin`, `cancel_order`,
`void_transaction`, `update_order`, `expire_tokens`, `drain_bucket`, `fail_next` (500/502/503,
"drop": do the work then close the connection unanswered, "slow": answer after `seconds`,
"drain": empty the shop's bucket first), `delay` on every call;
records in `calls`, `refund_creates`, `webhooks`, `tokens_issued`, `throttled`. `send_webhook`
signs and posts a webhook as Shopify does, with REST-shaped payloads from `order_webhook_payload`
and `refund_webhook_payload`.

Bulk operations (`bulkOperationRunQuery`, `bulkOperation(id:)`, `currentBulkOperation`) are
bulk.py's, reached as `fake.bulk`; their JSONL files are served at `GET /__bulk/KEY.jsonl`, outside
any shop's path and without a token, like the signed storage URL Shopify gives.
"""

import base64
import hashlib
import hmac
import itertools
import json
import secrets
import socket
import threading
import time
import uuid
from collections import defaultdict
from datetime import UTC, datetime
from decimal import Decimal
from pathlib import Path
from urllib.parse import parse_qsl, urlsplit

import requests
from graphql import (
    GraphQLError,
    OperationDefinitionNode,
    OperationType,
    build_schema,
    execute,
    get_directive_values,
    parse,
    validate,
)
from graphql.execution.values import get_variable_values

from ledger.tests.fake_server import FakeServer, QuietHandler

from . import cost as query_costs
from .bulk import BulkOperations
from .connections import orders_connection
from .models import (
    ZERO,
    Bucket,
    Customer,
    LineItem,
    Order,
    Shop,
    Transaction,
    in_bulk,
    now_seconds,
    parse_moment,
)
from .refunds import create_from_input, make_refund, refund_errors, spread
from .webhooks import order_payload, refund_payload

API_VERSION = "2026-04"
SDL_PATH = Path(__file__).with_name("admin_2026_04.graphql")
TOKEN_TTL_SECONDS = 86399
DEFAULT_SCOPES = "read_orders,write_orders,read_customers"
INVALID_TOKEN = "[API] Invalid API key or access token (unrecognized login or wrong password)"
INVALID_CLIENT = {
    "error": "invalid_client",
    "error_description": "Client authentication failed due to unknown client, no client authentication included, "
    "or unsupported authentication method.",
}
IDEMPOTENCY_MISSING = "The @idempotent directive is required for this mutation."
IDEMPOTENCY_MISMATCH = "The same idempotency key cannot be used with different operation parameters."


def _snake(name: str) -> str:
    return "".join(f"_{c.lower()}" if c.isupper() else c for c in name).lstrip("_")


def _resolver(field_name: str):
    attribute = _snake(field_name)

    def resolve(source, info, **args):
        if isinstance(source, dict):
            return source.get(field_name)
        value = getattr(source, attribute, None)
        if callable(value):
            return value(info, **{_snake(k): v for k, v in args.items()})
        return value

    return resolve


def load_schema():
    """The SDL with a resolver on every field: the dict key or the snake_case attribute."""
    schema = build_schema(SDL_PATH.read_text())
    for type_ in schema.type_map.values():
        if type_.name.startswith("__") or not hasattr(type_, "fields") or hasattr(type_, "out_type"):
            continue
        for name, field in type_.fields.items():
            if hasattr(field, "resolve"):
                field.resolve = _resolver(name)
    return schema


def _format_error(error: GraphQLError) -> dict:
    """graphql-core's validation messages in the words of Shopify's server (graphql-ruby)."""
    formatted = error.formatted
    message = error.message
    if message.startswith("Cannot query field '"):
        field_name, type_name = message.split("'")[1], message.split("'")[3]
        formatted["message"] = f"Field '{field_name}' doesn't exist on type '{type_name}'"
        formatted["extensions"] = {"code": "undefinedField", "typeName": type_name, "fieldName": field_name}
    return formatted


class _Root:
    """QueryRoot and Mutation: the shop the token belongs to."""

    def __init__(self, fake: "FakeShopify", shop: Shop):
        self.fake = fake
        self.shop_ = shop

    def shop(self, info):
        return self.shop_

    def order(self, info, id):
        return self.fake._order_by_gid(self.shop_, id)

    def orders(
        self,
        info,
        first=None,
        after=None,
        last=None,
        before=None,
        query=None,
        reverse=False,
        sort_key="ID",
        saved_search_id=None,
    ):
        return orders_connection(
            self.shop_,
            first=first,
            after=after,
            last=last,
            before=before,
            query=query,
            sort_key=sort_key,
            reverse=reverse,
            bulk=in_bulk(info),
        )

    def refund_create(self, info, input):
        return self.fake._refund_create(self.shop_, info, input)

    def bulk_operation_run_query(self, info, query, group_objects=False):
        return self.fake.bulk.run(self.fake.schema, self.shop_.domain, query)

    def bulk_operation(self, info, id):
        return self.fake.bulk.by_id(self.shop_.domain, id)

    def current_bulk_operation(self, info, type="QUERY"):
        return self.fake.bulk.current(self.shop_.domain, type)


class FakeShopify(FakeServer):
    def __init__(
        self,
        *,
        bucket_size: float = 1000,
        restore_rate: float = 100,
        max_query_cost: int = 1000,
        token_ttl: int = TOKEN_TTL_SECONDS,
    ):
        """A bucket of `bucket_size` points refilled at `restore_rate` a second per shop (Shopify's
        Standard plan by default); a single query may cost at most `max_query_cost`."""
        self.bucket_size = bucket_size
        self.max_query_cost = max_query_cost
        self.restore_rate = restore_rate
        self.token_ttl = token_ttl
        self.schema = load_schema()
        self.idempotent_directive = self.schema.get_directive("idempotent")
        self.shops: dict[str, Shop] = {}
        self.tokens: dict[str, tuple[str, float]] = {}
        self.calls: list[dict] = []
        self.refund_creates: list[dict] = []
        self.webhooks: list[dict] = []
        self.tokens_issued = 0
        self.throttled = 0
        self.delay = 0.0
        self.faults: list[dict] = []
        self.clock = time.monotonic
        self.lock = threading.RLock()
        self._documents: dict[str, tuple] = {}
        self._counters = defaultdict(lambda: itertools.count(1))
        self._counters["Order"] = itertools.count(1001)
        self.bulk = BulkOperations(execute=self._bulk_execute, file_url=self.bulk_file_url)
        super().__init__()

    # -- URLs (started and stopped as every fake: FakeServer) ------------------------------

    @property
    def api_base(self) -> str:
        """The value for SHOPIFY_API_BASE: replaces `https://{shop}`, `{shop}` left in for the product."""
        return self.url + "/{shop}"

    def base_for(self, domain: str) -> str:
        return self.api_base.replace("{shop}", domain)

    def graphql_url(self, domain: str) -> str:
        return f"{self.base_for(domain)}/admin/api/{API_VERSION}/graphql.json"

    def bulk_file_url(self, key: str) -> str:
        """Where a bulk operation's JSONL file is served (a signed storage URL at Shopify: no token)."""
        return f"{self.url}/__bulk/{key}.jsonl"

    def token_url(self, domain: str) -> str:
        return f"{self.base_for(domain)}/admin/oauth/access_token"

    def now(self) -> datetime:
        return now_seconds()

    def next_id(self, kind: str) -> int:
        return next(self._counters[kind])

    # -- test controls ---------------------------------------------------------------------

    def add_shop(
        self,
        domain: str,
        client_id: str,
        client_secret: str,
        *,
        name: str | None = None,
        currency: str = "USD",
        scopes: str = DEFAULT_SCOPES,
        bucket_size: float | None = None,
        restore_rate: float | None = None,
    ) -> Shop:
        with self.lock:
            bucket = Bucket(bucket_size or self.bucket_size, restore_rate or self.restore_rate, lambda: self.clock())
            shop = Shop(
                self.next_id("Shop"),
                domain,
                client_id,
                client_secret,
                name or domain.split(".")[0].replace("-", " ").title(),
                currency,
                scopes,
                bucket,
            )
            self.shops[domain] = shop
            return shop

    def shop(self, domain: str) -> Shop:
        return self.shops[domain]

    def _customer(self, shop: Shop, customer) -> Customer | None:
        if customer is None:
            return None
        if isinstance(customer, Customer):
            return customer
        email = customer.get("email")
        found = shop.customers.get((email or "").lower()) if email else None
        if found is None:
            found = Customer(
                self.next_id("Customer"), email, customer.get("first_name"), customer.get("last_name"), self.now()
            )
            if email:
                shop.customers[email.lower()] = found
        return found

    def add_order(
        self,
        domain: str,
        *,
        name: str | None = None,
        email: str | None = None,
        customer: dict | Customer | None = None,
        line_items: list[dict] | None = None,
        transactions: list[dict] | None = None,
        shipping: str | Decimal = "0.00",
        created_at=None,
        updated_at=None,
        cancelled: bool = False,
        note: str | None = None,
        tags=(),
    ) -> Order:
        """An order placed in the shop. `line_items`: [{"title" (or "name"), "sku", "quantity",
        "price"}]; `transactions`: [{"kind": "SALE", "gateway": "shopify_payments", "amount":
        "100.00", "status": "SUCCESS"}]. Without line items, one item worth what was paid; without
        transactions, one SALE on shopify_payments for the order's total. Order ids count from
        1001 in the fake (gid://shopify/Order/1001), names from #1001 in each shop."""
        with self.lock:
            shop = self.shops[domain]
            created = parse_moment(created_at) if created_at is not None else self.now()
            updated = parse_moment(updated_at) if updated_at is not None else created
            buyer = self._customer(shop, customer)
            if name is None:
                name = f"#{shop.next_order_number}"
                shop.next_order_number += 1
            order = Order(
                self.next_id("Order"),
                shop,
                name,
                email if email is not None else (buyer.email if buyer else None),
                buyer,
                created,
                updated,
                shipping=Decimal(str(shipping)),
                note=note,
                tags=list(tags),
            )
            if transactions is None:
                if line_items:
                    paid = sum((Decimal(str(i["price"])) * int(i.get("quantity", 1)) for i in line_items), ZERO)
                    paid += order.shipping
                else:
                    paid = Decimal("100.00")
                transactions = [{"kind": "SALE", "gateway": "shopify_payments", "amount": str(paid)}]
            if line_items is None:
                paid = sum(
                    (Decimal(str(t["amount"])) for t in transactions if t.get("kind", "SALE") in ("SALE", "CAPTURE")),
                    ZERO,
                )
                line_items = [{"title": "Item", "sku": "ITEM", "quantity": 1, "price": str(paid - order.shipping)}]
            for item in line_items:
                order.lines.append(
                    LineItem(
                        self.next_id("LineItem"),
                        order,
                        item.get("title") or item.get("name") or "Item",
                        item.get("sku"),
                        int(item.get("quantity", 1)),
                        Decimal(str(item["price"])),
                        item.get("variant_title"),
                    )
                )
            for txn in transactions:
                self._add_transaction(order, **txn, at=created)
            if cancelled:
                order.cancelled, order.cancel_reason = created, "CUSTOMER"
            shop.orders[order.num] = order
            shop.index(order)
            return order

    def _add_transaction(
        self,
        order,
        *,
        kind="SALE",
        gateway="shopify_payments",
        amount,
        status="SUCCESS",
        parent=None,
        at=None,
        error_code=None,
    ):
        txn = Transaction(
            self.next_id("OrderTransaction"),
            order,
            kind,
            status,
            gateway,
            Decimal(str(amount)),
            parent,
            at or self.now(),
            error_code,
        )
        if parent is not None:
            parent.children.append(txn)
        order.txns.append(txn)
        return txn

    def add_transaction(
        self, order: Order, *, kind="SALE", gateway="shopify_payments", amount, status="SUCCESS", parent=None
    ) -> Transaction:
        """A payment event on an existing order (a capture, a later sale, a failed attempt)."""
        with self.lock:
            txn = self._add_transaction(order, kind=kind, gateway=gateway, amount=amount, status=status, parent=parent)
            order.shop.touch(order)
            return txn

    def refund_in_admin(
        self,
        order: Order,
        amount,
        *,
        transaction: Transaction | None = None,
        line_items: list[tuple] = (),
        note: str | None = None,
    ):
        """A refund someone made in Shopify's admin: `amount` on `transaction`, or spread over the
        refundable transactions like a suggested refund; `line_items` [(line item, quantity)]."""
        with self.lock:
            amount = Decimal(str(amount))
            parts = [(transaction, amount)] if transaction is not None else spread(order, amount)
            if sum((part for _, part in parts), ZERO) != amount or any(part > txn.remaining for txn, part in parts):
                raise ValueError(f"cannot refund {amount} on {order.name}: more than it can return")
            return make_refund(
                self, order, parts=parts, lines=[(li, q, "NO_RESTOCK") for li, q in line_items], note=note
            )

    def cancel_order(self, order: Order, *, reason: str = "CUSTOMER", refund: bool = False):
        """Cancelled in Shopify's admin; with `refund`, everything still paid goes back too."""
        with self.lock:
            if refund and order.refundable_transactions:
                make_refund(
                    self,
                    order,
                    parts=[(t, t.remaining) for t in order.refundable_transactions],
                    lines=[(li, li.refundable_quantity, "CANCEL") for li in order.lines if li.refundable_quantity],
                )
            order.cancelled, order.cancel_reason = self.now(), reason
            order.shop.touch(order)
            return order

    def void_transaction(self, transaction: Transaction) -> Transaction:
        """A VOID on the transaction: it can return nothing any more."""
        with self.lock:
            order = transaction.order
            void = self._add_transaction(
                order, kind="VOID", gateway=transaction.gateway, amount=transaction.amount, parent=transaction
            )
            order.shop.touch(order)
            return void

    def update_order(self, order: Order, **changes) -> Order:
        """Edits in the admin (email, note, tags, customer, name); updatedAt moves on."""
        with self.lock:
            for attribute, value in changes.items():
                if attribute == "customer":
                    value = self._customer(order.shop, value)
                if not hasattr(order, attribute):
                    raise AttributeError(attribute)
                setattr(order, attribute, value)
            order.shop.touch(order)
            return order

    def drain_bucket(self, domain: str, *, left: float = 0.0):
        """Another app on the shop spent the bucket: `left` points remain, refilling as usual."""
        with self.lock:
            bucket = self.shops[domain].bucket
            bucket.refill()
            bucket.available = float(left)

    def expire_tokens(self):
        with self.lock:
            self.tokens.clear()

    def fail_next(self, n: int = 1, status=500, *, seconds: float = 5.0, on: str = "graphql"):
        """The next `n` calls to `on` fail: with HTTP `status` (500, 502, 503, ...), "drop" (the
        work is done, the connection closed unanswered), "slow" (answered after `seconds`) or
        "drain" (another app empties the shop's bucket just before the call: it is THROTTLED).
        `on`: "graphql" (any GraphQL call), "mutation" or "query" (GraphQL calls of that kind),
        "token" (the token endpoint), "download" (a bulk operation's file; status "cut" sends half
        the body, then closes the connection) or "any"."""
        if on not in ("graphql", "mutation", "query", "token", "download", "any"):
            raise ValueError(f"unknown fault target {on!r}")
        with self.lock:
            self.faults.extend({"status": status, "seconds": seconds, "on": on} for _ in range(n))

    def graphql_calls(self) -> list[dict]:
        return [c for c in self.calls if c["endpoint"] == "graphql"]

    def query_cost(self, query: str, variables: dict | None = None) -> int:
        """The requestedQueryCost the fake charges for this document."""
        document, errors = self._document(query)
        if errors:
            raise ValueError(errors)
        operation = next(d for d in document.definitions if isinstance(d, OperationDefinitionNode))
        coerced = get_variable_values(self.schema, operation.variable_definitions or [], variables or {})
        return query_costs.requested_cost(self.schema, document, operation, coerced)

    # -- webhooks ----------------------------------------------------------------------------

    def order_webhook_payload(self, order: Order) -> dict:
        with self.lock:
            return order_payload(order)

    def refund_webhook_payload(self, refund) -> dict:
        with self.lock:
            return refund_payload(refund)

    @staticmethod
    def sign(body: bytes, secret: str) -> str:
        return base64.b64encode(hmac.new(secret.encode(), body, hashlib.sha256).digest()).decode()

    def send_webhook(
        self,
        url: str,
        topic: str,
        domain: str,
        payload: dict | bytes,
        *,
        event_id: str | None = None,
        secret: str | None = None,
        hmac_override: str | None = None,
        triggered_at: str | None = None,
        headers: dict | None = None,
        timeout: float = 10,
    ) -> tuple[int, str]:
        """POST the webhook as Shopify does: the raw body signed with the app's client secret
        (`X-Shopify-Hmac-Sha256` = base64 HMAC-SHA256); `hmac_override` sends that header instead
        ("" leaves it out). Returns (status, body)."""
        body = payload if isinstance(payload, bytes) else json.dumps(payload).encode()
        if secret is None:
            secret = self.shops[domain].client_secret
        event_id = event_id or str(uuid.uuid4())
        sent = {
            "Content-Type": "application/json",
            "X-Shopify-Topic": topic,
            "X-Shopify-Shop-Domain": domain,
            "X-Shopify-Event-Id": event_id,
            "X-Shopify-Webhook-Id": str(uuid.uuid4()),
            "X-Shopify-Triggered-At": triggered_at or datetime.now(UTC).isoformat().replace("+00:00", "Z"),
            "X-Shopify-API-Version": API_VERSION,
            "X-Shopify-Hmac-Sha256": self.sign(body, secret) if hmac_override is None else hmac_override,
        }
        if hmac_override == "":
            del sent["X-Shopify-Hmac-Sha256"]
        sent.update(headers or {})
        response = requests.post(url, data=body, headers=sent, timeout=timeout)
        self.webhooks.append(
            {
                "url": url,
                "topic": topic,
                "domain": domain,
                "event_id": event_id,
                "status": response.status_code,
                "headers": sent,
                "body": body,
            }
        )
        return response.status_code, response.text

    # -- GraphQL -----------------------------------------------------------------------------

    def _order_by_gid(self, shop: Shop, order_gid: str):
        prefix = "gid://shopify/Order/"
        if not isinstance(order_gid, str) or not order_gid.startswith(prefix) or not order_gid[len(prefix) :].isdigit():
            raise GraphQLError(f"Invalid global id '{order_gid}'", extensions={"code": "argumentLiteralsIncompatible"})
        return shop.orders.get(int(order_gid[len(prefix) :]))

    def _refund_create(self, shop: Shop, info, refund_input: dict):
        key = None
        for node in info.field_nodes:
            values = get_directive_values(self.idempotent_directive, node, info.variable_values)
            if values:
                key = values["key"]
        canonical = json.dumps(refund_input, sort_keys=True, default=str)
        record = {"shop": shop.domain, "key": key, "input": refund_input, "outcome": None}
        self.refund_creates.append(record)
        if key is None:
            record["outcome"] = "missing_key"
            raise GraphQLError(IDEMPOTENCY_MISSING, extensions={"code": "BAD_REQUEST"})
        stored = shop.idempotency.get(key)
        if stored is not None:
            if stored[0] != canonical:
                record["outcome"] = "key_mismatch"
                raise GraphQLError(IDEMPOTENCY_MISMATCH, extensions={"code": "IDEMPOTENCY_KEY_PARAMETER_MISMATCH"})
            record["outcome"] = "replayed"
            return stored[1]
        order = None
        try:
            order = self._order_by_gid(shop, refund_input["orderId"])
        except GraphQLError:
            pass
        errors = refund_errors(order, refund_input)
        if errors:
            payload = {"refund": None, "order": order, "userErrors": errors}
            record["outcome"] = "user_errors"
        else:
            refund = create_from_input(self, order, refund_input)
            payload = {"refund": refund, "order": order, "userErrors": []}
            record["outcome"] = "created"
            record["refund"] = refund
        shop.idempotency[key] = (canonical, payload)
        return payload

    def _bulk_execute(self, domain: str, document):
        """A bulk operation's query on the shop, with every row of each connection."""
        result = execute(
            self.schema, document, root_value=_Root(self, self.shops[domain]), context_value={"bulk": True}
        )
        return result.data

    def _document(self, query: str):
        cached = self._documents.get(query)
        if cached is None:
            try:
                document = parse(query)
            except GraphQLError as error:
                cached = (None, [_format_error(error)])
            else:
                errors = validate(self.schema, document)
                cached = (document, [_format_error(e) for e in errors])
            if len(self._documents) > 500:
                self._documents.clear()
            self._documents[query] = cached
        return cached

    def _operation_kind(self, raw: bytes) -> str:
        """ "mutation" when the GraphQL body holds one, else "query" (also for what does not parse)."""
        try:
            document, _ = self._document(json.loads(raw)["query"])
        except (ValueError, KeyError, TypeError):
            return "query"
        if document is not None and any(
            isinstance(d, OperationDefinitionNode) and d.operation == OperationType.MUTATION
            for d in document.definitions
        ):
            return "mutation"
        return "query"

    def _graphql(self, shop: Shop, body: dict) -> dict:
        query = body.get("query")
        if not query or not isinstance(query, str):
            return {"errors": [{"message": "No query string was present"}]}
        document, errors = self._document(query)
        if errors:
            return {"errors": errors}
        operations = [d for d in document.definitions if isinstance(d, OperationDefinitionNode)]
        name = body.get("operationName")
        operation = next((o for o in operations if name is None or (o.name and o.name.value == name)), None)
        if operation is None or (name is None and len(operations) > 1):
            return {
                "errors": [
                    {"message": "An operation name is required" if operation else f'No operation named "{name}"'}
                ]
            }
        variables = body.get("variables") or {}
        coerced = get_variable_values(self.schema, operation.variable_definitions or [], variables)
        if isinstance(coerced, list):
            return {"errors": [_format_error(e) for e in coerced]}
        requested = query_costs.requested_cost(self.schema, document, operation, coerced)
        bucket = shop.bucket
        limit = min(self.max_query_cost, int(bucket.size))
        if requested > limit:
            return {
                "errors": [
                    {
                        "message": f"Query cost is {requested}, which exceeds the single query max cost limit "
                        f"({limit}).",
                        "extensions": {"code": "MAX_COST_EXCEEDED", "cost": requested, "maxCost": limit},
                    }
                ]
            }
        if bucket.refill() < requested:
            self.throttled += 1
            return {
                "errors": [
                    {
                        "message": "Throttled",
                        "extensions": {
                            "code": "THROTTLED",
                            "documentation": "https://shopify.dev/api/usage/rate-limits",
                        },
                    }
                ],
                "extensions": {
                    "cost": {
                        "requestedQueryCost": requested,
                        "actualQueryCost": None,
                        "throttleStatus": bucket.status(),
                    }
                },
            }
        bucket.available -= requested
        root = _Root(self, shop)
        result = execute(
            self.schema,
            document,
            root_value=root,
            variable_values=variables,
            operation_name=name,
        )
        actual = query_costs.actual_cost(self.schema, document, operation, coerced, result.data)
        bucket.available = min(bucket.size, bucket.available + requested - actual)
        answer = {}
        if result.errors:
            answer["errors"] = [_format_error(e) for e in result.errors]
        answer["data"] = result.data
        answer["extensions"] = {
            "cost": {"requestedQueryCost": requested, "actualQueryCost": actual, "throttleStatus": bucket.status()}
        }
        return answer

    def _token(self, shop: Shop | None, params: dict) -> tuple[int, dict]:
        if params.get("grant_type") != "client_credentials":
            return 400, {
                "error": "unsupported_grant_type",
                "error_description": "The authorization grant type is not supported by the authorization server.",
            }
        if (
            shop is None
            or not hmac.compare_digest(str(params.get("client_id", "")), shop.client_id)
            or not hmac.compare_digest(str(params.get("client_secret", "")), shop.client_secret)
        ):
            return 400, INVALID_CLIENT
        token = "shpat_" + secrets.token_hex(16)
        self.tokens[token] = (shop.domain, self.clock() + self.token_ttl)
        self.tokens_issued += 1
        return 200, {"access_token": token, "scope": shop.scopes, "expires_in": self.token_ttl}

    def _shop_for_token(self, domain: str, token: str | None) -> Shop | None:
        found = self.tokens.get(token or "")
        if found is None or found[0] != domain or found[1] <= self.clock():
            return None
        return self.shops.get(domain)

    # -- HTTP --------------------------------------------------------------------------------

    def _handler(self):
        fake = self

        class Handler(QuietHandler):
            def _send(self, status: int, body, content_type="application/json"):
                data = body if isinstance(body, bytes) else json.dumps(body).encode()
                self.send_response(status)
                self.send_header("Content-Type", f"{content_type}; charset=utf-8")
                self.send_header("Content-Length", str(len(data)))
                self.send_header("X-Request-Id", str(uuid.uuid4()))
                self.end_headers()
                self.wfile.write(data)

            def _drop(self):
                # The work is done; the answer never reaches the caller.
                self.close_connection = True
                try:
                    self.connection.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass

            def do_GET(self):
                path = urlsplit(self.path).path
                key = path.removeprefix("/__bulk/").removesuffix(".jsonl")
                with fake.lock:
                    body = fake.bulk.files.get(key) if path.startswith("/__bulk/") else None
                    fake.calls.append({"endpoint": "download", "shop": "", "path": path, "status": None})
                    fault = next((f for f in fake.faults if f["on"] in ("download", "any")), None)
                    if fault is not None and body is not None:
                        fake.faults.remove(fault)
                if body is None:
                    return self._send(404, b"<Error><Code>NoSuchKey</Code></Error>", "application/xml")
                status = fault["status"] if fault else None
                if isinstance(status, int):
                    return self._send(status, b"<Error><Code>InternalError</Code></Error>", "application/xml")
                if status == "cut":
                    # The whole length announced, half of it sent: the download dies mid-file.
                    self.send_response(200)
                    self.send_header("Content-Type", "application/jsonl")
                    self.send_header("Content-Length", str(len(body)))
                    self.end_headers()
                    self.wfile.write(body[: len(body) // 2])
                    self.wfile.flush()
                    return self._drop()
                self._send(200, body, "application/jsonl")

            def do_POST(self):
                length = int(self.headers.get("Content-Length") or 0)
                raw = self.rfile.read(length)
                path = urlsplit(self.path).path
                _, domain, rest = (path.split("/", 2) + ["", ""])[:3]
                rest = "/" + rest
                if rest == "/admin/oauth/access_token":
                    endpoint = "token"
                elif rest == f"/admin/api/{API_VERSION}/graphql.json":
                    endpoint = "graphql"
                else:
                    return self._send(404, {"errors": "Not Found"})
                call = {
                    "endpoint": endpoint,
                    "shop": domain,
                    "path": path,
                    "token": self.headers.get("X-Shopify-Access-Token"),
                    "body": raw,
                    "status": None,
                }
                with fake.lock:
                    fake.calls.append(call)
                    targets = {endpoint, "any"}
                    if endpoint == "graphql":
                        targets.add(fake._operation_kind(raw))
                    fault = next((f for f in fake.faults if f["on"] in targets), None)
                    if fault is not None:
                        fake.faults.remove(fault)
                if fake.delay:
                    time.sleep(fake.delay)
                status = fault["status"] if fault else None
                if status == "drain" and domain in fake.shops:
                    fake.drain_bucket(domain)
                if status == "slow":
                    time.sleep(fault["seconds"])
                elif isinstance(status, int):
                    call["status"] = status
                    if status >= 502:
                        return self._send(status, b"<html><body>Service unavailable</body></html>", "text/html")
                    return self._send(status, {"errors": "Internal Server Error"})
                code, answer = self._answer(endpoint, domain, raw)
                call["status"] = code if status != "drop" else "dropped"
                if status == "drop":
                    return self._drop()
                self._send(code, answer)

            def _answer(self, endpoint, domain, raw):
                content_type = self.headers.get("Content-Type") or ""
                try:
                    if "json" in content_type:
                        body = json.loads(raw or b"{}")
                    elif endpoint == "token":
                        body = dict(parse_qsl(raw.decode(), keep_blank_values=True))
                    else:
                        body = json.loads(raw or b"{}")
                    if not isinstance(body, dict):
                        raise ValueError("not an object")
                except (ValueError, UnicodeDecodeError):
                    return 400, {"errors": "Bad Request"}
                with fake.lock:
                    if endpoint == "token":
                        return fake._token(fake.shops.get(domain), body)
                    shop = fake._shop_for_token(domain, self.headers.get("X-Shopify-Access-Token"))
                    if shop is None:
                        return 401, {"errors": INVALID_TOKEN}
                    return 200, fake._graphql(shop, body)

        return Handler
