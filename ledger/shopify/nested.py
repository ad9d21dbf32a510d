"""An order read whole. A page asks for the first few of each order's nested lists (their cost
is charged per order on every page, queries.py); an order with more is read again here, before
it is applied, so no line item, transaction or refund is dropped without a word:

- line items page on their own connection (`lineItems(after:)`) until `hasNextPage` is false;
- transactions and refunds are plain lists in Shopify's schema (no cursor): they are asked for
  again with a larger `first`; an order that fills even that is refused, as is a refund spread
  over more transactions than a refund is read with.

A refusal (ShopifyOrderRefused) names the order; the sync skips it with a warning and goes on.
Network calls only, outside any transaction."""

from ..exceptions import ShopifyOrderRefused
from . import queries

# Line item pages one order may take (100 each): past that the order is refused, not cut.
MAX_LINE_ITEM_PAGES = 50


def _dict(value) -> dict:
    return value if isinstance(value, dict) else {}


def _list(value) -> list:
    return value if isinstance(value, list) else []


def shown(text: str, limit: int = 500) -> str:
    """Shop text as a warning, a log line or the admin shows it: what does not print escaped
    (a newline cannot forge a log line), cut short."""
    return "".join(c if c.isprintable() else repr(c)[1:-1] for c in text[:limit])


def order_label(node) -> str:
    """How a warning names an order from Shopify (its name, else its gid); shop text, shown."""
    node = _dict(node)
    name = node.get("name") if isinstance(node.get("name"), str) else ""
    gid = node.get("id") if isinstance(node.get("id"), str) else ""
    return shown(f"{name} ({gid})" if name and gid else name or gid or "an order without an id", 160)


def shopify_orders_read_whole(*, client, nodes: list) -> tuple[list[dict], list[tuple[dict, str]]]:
    """(the nodes read whole, [(node, reason)] of those that could not be)."""
    whole, refused = [], []
    for node in nodes:
        try:
            whole.append(shopify_order_read_whole(client=client, node=node))
        except ShopifyOrderRefused as exc:
            refused.append((node, exc.message))
    return whole, refused


def shopify_order_read_whole(*, client, node: dict) -> dict:
    """`node` with all of its line items, transactions and refunds (the same node when the page
    held them all). Raises ShopifyOrderRefused when it cannot be read whole."""
    node = _dict(node)
    gid = node.get("id")
    whole = dict(node)
    lines = _dict(node.get("lineItems"))
    if _dict(lines.get("pageInfo")).get("hasNextPage"):
        whole["lineItems"] = {"nodes": _line_items_rest(client, node, lines), "pageInfo": {"hasNextPage": False}}
    if len(_list(node.get("transactions"))) >= queries.TRANSACTIONS_FIRST:
        whole["transactions"] = _plain_list(
            client, node, queries.ORDER_TRANSACTIONS, "transactions", queries.ORDER_TRANSACTIONS_FIRST
        )
    if len(_list(node.get("refunds"))) >= queries.REFUNDS_FIRST:
        whole["refunds"] = _plain_list(
            client, node, queries.ORDER_REFUND_LIST, "refunds", queries.ORDER_REFUND_LIST_FIRST
        )
    for refund in _list(whole.get("refunds")):
        if _dict(_dict(_dict(refund).get("transactions")).get("pageInfo")).get("hasNextPage"):
            raise ShopifyOrderRefused(
                f"{order_label(node)}: refund {_dict(refund).get('id')} spreads over more than "
                f"{queries.REFUND_TRANSACTIONS_FIRST} transactions; refused rather than read in part",
                details={"order": gid},
            )
    return whole


def _read_order(client, node: dict, document: str, variables: dict) -> dict:
    order = _dict(client.graphql(document, {"id": node.get("id"), **variables}).get("order"))
    if not order:
        raise ShopifyOrderRefused(
            f"{order_label(node)}: no longer readable in Shopify", details={"order": node.get("id")}
        )
    return order


def _line_items_rest(client, node: dict, first_page: dict) -> list:
    items = list(_list(first_page.get("nodes")))
    info = _dict(first_page.get("pageInfo"))
    for _ in range(MAX_LINE_ITEM_PAGES):
        if not info.get("hasNextPage"):
            return items
        page = _dict(
            _read_order(client, node, queries.ORDER_LINE_ITEMS, {"after": info.get("endCursor")}).get("lineItems")
        )
        items += _list(page.get("nodes"))
        info = _dict(page.get("pageInfo"))
    raise ShopifyOrderRefused(
        f"{order_label(node)}: more than {len(items)} line items; refused rather than read in part",
        details={"order": node.get("id")},
    )


def _plain_list(client, node: dict, document: str, field: str, most: int) -> list:
    found = _list(_read_order(client, node, document, {}).get(field))
    if len(found) >= most:
        raise ShopifyOrderRefused(
            f"{order_label(node)}: {most} {field} or more; refused rather than read in part",
            details={"order": node.get("id")},
        )
    return found
