"""Relay connections as Shopify pages them: `first`/`after` (or `last`/`before`), at most 250 a
page, opaque cursors. Shopify's cursors are base64 JSON of the last row's id and sort value; these
are too, so a client that treats them as opaque works with both."""

import base64
import bisect
import json
import re
import sys
from datetime import datetime
from decimal import Decimal

from graphql import GraphQLError

from .models import Order, Shop, iso, parse_moment

MAX_PAGE_SIZE = 250


def encode_cursor(last_id: int, last_value=None) -> str:
    body = {"last_id": last_id, "last_value": last_value if last_value is not None else last_id}
    return base64.b64encode(json.dumps(body, separators=(",", ":")).encode()).decode()


def decode_cursor(cursor: str) -> dict:
    try:
        body = json.loads(base64.b64decode(cursor.encode(), validate=True))
        int(body["last_id"])
        return body
    except (ValueError, KeyError, TypeError) as exc:
        raise GraphQLError(
            f"Invalid cursor for current pagination sort: {cursor}", extensions={"code": "BAD_REQUEST"}
        ) from exc


def page_size(first, last, *, bulk=False) -> tuple[int, bool]:
    """How many rows and whether from the end; Shopify's errors for a missing or too large size.
    Inside a bulk operation a connection without `first`/`last` has every row."""
    if bulk and first is None and last is None:
        return sys.maxsize, False
    if first is None and last is None:
        raise GraphQLError("you must provide one of first or last", extensions={"code": "BAD_REQUEST"})
    if first is not None and last is not None:
        raise GraphQLError("providing both first and last is not supported", extensions={"code": "BAD_REQUEST"})
    size = first if first is not None else last
    if size < 0:
        raise GraphQLError("first and last must be non-negative", extensions={"code": "BAD_REQUEST"})
    if size > MAX_PAGE_SIZE:
        raise GraphQLError(
            f"The maximum number of records that can be requested is {MAX_PAGE_SIZE}.",
            extensions={"code": "MAX_PAGE_SIZE_EXCEEDED", "maximum": MAX_PAGE_SIZE},
        )
    return size, last is not None


def _connection(rows: list, keys: list, has_next: bool, has_previous: bool) -> dict:
    edges = [{"cursor": encode_cursor(*key), "node": row} for row, key in zip(rows, keys, strict=True)]
    return {
        "edges": edges,
        "nodes": rows,
        "pageInfo": {
            "hasNextPage": has_next,
            "hasPreviousPage": has_previous,
            "startCursor": edges[0]["cursor"] if edges else None,
            "endCursor": edges[-1]["cursor"] if edges else None,
        },
    }


def list_connection(items: list, *, first=None, after=None, last=None, before=None, reverse=False, bulk=False) -> dict:
    """A page of a short list of objects with a `num` (line items, a refund's transactions)."""
    size, from_end = page_size(first, last, bulk=bulk)
    rows = list(reversed(items)) if reverse else list(items)
    nums = [row.num for row in rows]
    if after:
        last_id = decode_cursor(after)["last_id"]
        rows = rows[nums.index(last_id) + 1 :] if last_id in nums else []
    if before:
        last_id = decode_cursor(before)["last_id"]
        rows = rows[: [r.num for r in rows].index(last_id)] if last_id in [r.num for r in rows] else []
    page = rows[-size:] if from_end and size else rows[:size]
    has_more = len(rows) > len(page)
    return _connection(
        page,
        [(row.num, None) for row in page],
        has_next=has_more and not from_end,
        has_previous=bool(after) or (has_more and from_end),
    )


# The search syntax of `orders(query:)`: `updated_at:>='2026-04-01T00:00:00Z' name:#1001`.
_TERM = re.compile(r"""(?P<field>\w+):(?P<op>>=|<=|>|<|=)?(?:'(?P<q1>[^']*)'|"(?P<q2>[^"]*)"|(?P<bare>\S+))""")
_DATE_FIELDS = {"updated_at": "updated", "created_at": "created", "processed_at": "created"}


def parse_search(query: str | None) -> tuple[list, list]:
    """(date bounds [(attribute, op, datetime)], other predicates); unknown fields are ignored, as
    Shopify ignores them (it warns in `extensions.search`)."""
    bounds, predicates, ignored = [], [], []
    for match in _TERM.finditer(query or ""):
        name, op = match["field"].lower(), match["op"] or "="
        value = next(v for v in (match["q1"], match["q2"], match["bare"]) if v is not None)
        if name in _DATE_FIELDS:
            try:
                moment = parse_moment(value)
            except ValueError as exc:
                raise GraphQLError(f"Invalid date in search: {value}", extensions={"code": "BAD_REQUEST"}) from exc
            bounds.append((_DATE_FIELDS[name], op, moment))
        elif name == "name":
            wanted = value if value.startswith("#") else f"#{value}"
            predicates.append(lambda order, wanted=wanted: order.name == wanted)
        elif name == "email":
            wanted = value.lower()
            predicates.append(lambda order, wanted=wanted: (order.email or "").lower() == wanted)
        elif name == "id":
            predicates.append(_compare_num(op, int(value.rsplit("/", 1)[-1])))
        elif name == "status":
            wanted = value.lower()
            predicates.append(lambda order, wanted=wanted: {"cancelled": order.cancelled is not None}.get(wanted, True))
        else:
            ignored.append(name)
    return bounds, predicates


def _compare_num(op, value):
    return {
        ">": lambda order: order.num > value,
        ">=": lambda order: order.num >= value,
        "<": lambda order: order.num < value,
        "<=": lambda order: order.num <= value,
        "=": lambda order: order.num == value,
    }[op]


def _in_bound(moment: datetime, op: str, limit: datetime) -> bool:
    return {
        ">": moment > limit,
        ">=": moment >= limit,
        "<": moment < limit,
        "<=": moment <= limit,
        "=": moment == limit,
    }[op]


_SORT_VALUES = {
    "UPDATED_AT": lambda order: order.updated,
    "CREATED_AT": lambda order: order.created,
    "PROCESSED_AT": lambda order: order.created,
    "TOTAL_PRICE": lambda order: order.total,
}


def _cursor_value(value):
    if isinstance(value, datetime):
        return iso(value)
    if isinstance(value, Decimal):
        return str(value)
    return value


def _value_from_cursor(sort_key: str, value):
    if sort_key in ("UPDATED_AT", "CREATED_AT", "PROCESSED_AT"):
        return parse_moment(value)
    if sort_key == "TOTAL_PRICE":
        return Decimal(str(value))
    return int(value)


def orders_connection(
    shop: Shop,
    *,
    first=None,
    after=None,
    last=None,
    before=None,
    query=None,
    sort_key="ID",
    reverse=False,
    bulk=False,
) -> dict:
    """A page of the shop's orders. Sorted by UPDATED_AT it bisects the shop's index, so a page
    costs what the page holds, not what the shop holds; other sort keys sort on each call."""
    size, from_end = page_size(first, last, bulk=bulk)
    if from_end:
        # `last` pages from the end: the same as `first` on the reversed order.
        reverse, after = not reverse, before
    bounds, predicates = parse_search(query)
    value_of = _SORT_VALUES.get(sort_key, lambda order: order.num)
    if sort_key == "UPDATED_AT":
        keys = shop.by_updated
    else:
        keys = sorted((value_of(order), order.num) for order in shop.orders.values())
    lo, hi = 0, len(keys)
    for attribute, op, limit in bounds:
        if attribute == "updated" and sort_key == "UPDATED_AT":
            if op in (">=", "="):
                lo = max(lo, bisect.bisect_left(keys, (limit, -1)))
            if op == ">":
                lo = max(lo, bisect.bisect_right(keys, (limit, float("inf"))))
            if op in ("<=", "="):
                hi = min(hi, bisect.bisect_right(keys, (limit, float("inf"))))
            if op == "<":
                hi = min(hi, bisect.bisect_left(keys, (limit, -1)))
        else:
            predicates.append(lambda order, a=attribute, o=op, m=limit: _in_bound(getattr(order, a), o, m))
    if after:
        cursor = decode_cursor(after)
        position = (_value_from_cursor(sort_key, cursor["last_value"]), int(cursor["last_id"]))
        if reverse:
            hi = min(hi, bisect.bisect_left(keys, position))
        else:
            lo = max(lo, bisect.bisect_right(keys, position))
    indices = range(hi - 1, lo - 1, -1) if reverse else range(lo, hi)
    page, page_keys, has_more = [], [], False
    for index in indices:
        value, num = keys[index]
        order: Order = shop.orders[num]
        if not all(predicate(order) for predicate in predicates):
            continue
        if len(page) == size:
            has_more = True
            break
        page.append(order)
        page_keys.append((num, _cursor_value(value)))
    if from_end:
        page.reverse()
        page_keys.reverse()
        return _connection(page, page_keys, has_next=bool(after), has_previous=has_more)
    return _connection(page, page_keys, has_next=has_more, has_previous=bool(after))
