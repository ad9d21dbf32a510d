"""The backfill: every order of a store read through one Shopify bulk operation.

A paged `orders` query with its line items, transactions and refunds costs about 14 points per
order, and the Standard plan's bucket refills 100 points a second: paged, a first sync cannot go
faster than about 7 orders a second. A bulk operation does not draw on the bucket: Shopify runs
the query in the background and hands over a JSONL file. So `shopify_sync --full` (a large
store's first import, asked for by name) is:

1. start `bulkOperationRunQuery` with `queries.BULK_ORDERS` (its id and start time are the
   connection's checkpoint, stored before anything else);
2. poll `bulkOperation(id:)` with a doubling pause until it is COMPLETED (FAILED, CANCELED or
   EXPIRED: the checkpoint is cleared and the error raised; still running after
   SHOPIFY_BULK_TIMEOUT_SECONDS: the checkpoint is kept, and the next run polls the same one);
3. stream the file: an order is its line, then its line items (`__parentId`, right after it with
   `groupObjects`); orders are applied `BATCH` at a time through `shopify_orders_apply` (a
   constant number of queries per batch), and the number of lines applied is stored in the
   batch's own transaction. A killed run resumes with the same operation after the last batch
   stored (while Shopify keeps its file, seven days); otherwise it starts a new one. Either way
   nothing is doubled: the mapping is idempotent.

What the file holds is the shop's, and may be wrong: a line that is not JSON, a line item whose
parent is not the order before it, an order the import refuses (a bad amount) become warnings,
never a stopped backfill.
"""

import json
import logging
import time
from collections.abc import Iterator
from dataclasses import dataclass

import requests
from django.conf import settings
from django.db import transaction
from django.utils import timezone

from ..exceptions import ShopifyRefused
from ..models import ShopifyConnection
from . import queries
from .client import ShopifyUnavailable
from .connection import shopify_client_for
from .mapping import SyncCounts, shopify_orders_apply
from .nested import shopify_orders_read_whole

logger = logging.getLogger(__name__)

BATCH = 250
FIRST_POLL_SECONDS = 0.5
MAX_POLL_SECONDS = 10.0
WAITING = ("CREATED", "RUNNING")
# What a stored operation may still be resumed from; any other status starts a new operation.
RESUMABLE = ("CREATED", "RUNNING", "COMPLETED")


class BulkOperationFailed(ShopifyRefused):
    """Shopify's bulk operation ended without a file (FAILED, CANCELED, EXPIRED) or was refused."""

    code = "shopify_bulk_failed"


@dataclass
class BackfillResult(SyncCounts):
    pages: int = 0  # batches applied, named as the paged sync's for the command's summary
    waits: int = 0
    calls: int = 0
    resumed: bool = False
    operation_id: str = ""
    lines: int = 0
    polls: int = 0
    reread: int = 0


def shopify_backfill(*, connection_id: int, client=None, sleep=time.sleep, batch: int = BATCH) -> BackfillResult:
    """Every order of the store through one bulk operation (the module doc). Raises
    BulkOperationFailed (checkpoint cleared: the next run starts again) or ShopifyUnavailable
    (checkpoint kept: the next run resumes)."""
    connection = ShopifyConnection.objects.select_related("tenant").get(pk=connection_id)
    client = client or shopify_client_for(connection)
    result = BackfillResult()
    operation, skip = _resumable(client, connection), connection.bulk_lines_applied
    if operation is not None:
        result.resumed = True
        started = connection.bulk_started_at or timezone.now()
    else:
        # Taken before Shopify starts: whatever changes while the operation runs is at or after it,
        # so the next (paged) sync from this bound reads it.
        started = timezone.now()
        operation, skip = _start(client), 0
        ShopifyConnection.objects.filter(pk=connection.pk).update(
            bulk_operation_id=operation["id"], bulk_started_at=started, bulk_lines_applied=0
        )
    result.operation_id = operation["id"]
    operation = _wait(client, connection, operation, sleep, result)
    if operation.get("url"):
        try:
            _apply_file(client, connection, operation["url"], skip, batch, sleep, result)
        except BulkOperationFailed:
            _checkpoint_clear(connection)  # the file is gone: only a new operation can go on
            raise
    ShopifyConnection.objects.filter(pk=connection.pk).update(
        last_synced_at=started,
        bulk_operation_id="",
        bulk_started_at=None,
        bulk_lines_applied=0,
        # A backfill covers whatever a paged run had left half done.
        sync_started_at=None,
        sync_cursor="",
        sync_since=None,
    )
    result.waits, result.calls = client.stats.waits, client.stats.calls
    logger.info(
        "shopify_backfill %s: operation=%s orders=%s created=%s updated=%s lines=%s batches=%s",
        connection.shop_domain,
        result.operation_id,
        result.orders,
        result.created,
        result.updated,
        result.lines,
        result.pages,
    )
    return result


def _resumable(client, connection: ShopifyConnection) -> dict | None:
    """The stored operation, when Shopify still has it in a state its file can come from."""
    if not connection.bulk_operation_id:
        return None
    operation = client.graphql(queries.BULK_OPERATION, {"id": connection.bulk_operation_id}).get("bulkOperation")
    if operation and operation.get("status") in RESUMABLE:
        return operation
    logger.info(
        "shopify_backfill %s: operation %s is %s, starting a new one",
        connection.shop_domain,
        connection.bulk_operation_id,
        (operation or {}).get("status", "gone"),
    )
    return None


def _start(client) -> dict:
    payload = client.graphql(queries.BULK_RUN, {"query": queries.BULK_ORDERS}).get("bulkOperationRunQuery") or {}
    errors = payload.get("userErrors") or []
    if errors or not payload.get("bulkOperation"):
        messages = "; ".join(f"{e.get('code') or ''} {e.get('message')}".strip() for e in errors) or "no operation"
        raise BulkOperationFailed(f"Shopify ({client.shop_domain}) refused the bulk query: {messages}")
    return payload["bulkOperation"]


def _wait(client, connection, operation: dict, sleep, result: BackfillResult) -> dict:
    """Poll until the operation is finished; the pause doubles up to MAX_POLL_SECONDS."""
    deadline = time.monotonic() + settings.SHOPIFY_BULK_TIMEOUT_SECONDS
    pause = FIRST_POLL_SECONDS
    while operation.get("status") in WAITING:
        if time.monotonic() >= deadline:
            raise ShopifyUnavailable(
                f"Shopify ({client.shop_domain}) bulk operation {operation['id']} still {operation['status']} after "
                f"{settings.SHOPIFY_BULK_TIMEOUT_SECONDS} s; run again to resume it"
            )
        sleep(pause)
        pause = min(pause * 2, MAX_POLL_SECONDS)
        result.polls += 1
        found = client.graphql(queries.BULK_OPERATION, {"id": operation["id"]}).get("bulkOperation")
        operation = found or {"id": operation["id"], "status": "GONE"}
    if operation["status"] != "COMPLETED":
        _checkpoint_clear(connection)
        code = operation.get("errorCode")
        raise BulkOperationFailed(
            f"Shopify ({client.shop_domain}) bulk operation {operation['id']} ended {operation['status']}"
            + (f" ({code})" if code else "")
            + (
                "; ACCESS_DENIED: the app lacks a scope the query needs (read_orders)"
                if code == "ACCESS_DENIED"
                else ""
            )
        )
    return operation


def _checkpoint_clear(connection: ShopifyConnection) -> None:
    """Nothing to resume from: the next run starts a new operation. What earlier batches applied
    stays (it is the shop's data, and applying it again changes nothing)."""
    ShopifyConnection.objects.filter(pk=connection.pk).update(
        bulk_operation_id="", bulk_started_at=None, bulk_lines_applied=0
    )


def _apply_file(client, connection, url: str, skip: int, batch: int, sleep, result: BackfillResult) -> None:
    pending: list[dict] = []
    reread: list[str] = []
    last_line = skip
    for last_line, order in _orders(_lines(url, skip, sleep), result):
        if not _refunds_assembled(order):
            reread.append(order["id"])
        pending.append(order)
        if len(pending) >= batch:
            _apply_batch(client, connection, pending, reread, last_line, result)
            pending, reread = [], []
    if pending:
        _apply_batch(client, connection, pending, reread, last_line, result)
    result.lines = last_line


def _lines(url: str, skip: int, sleep) -> Iterator[tuple[int, bytes]]:
    """(line number, raw line) of the file after line `skip`. A 5xx or a download cut short starts
    it again, past the lines already read. No Shopify token goes with it: the URL is signed, and
    points at storage, not at the shop."""
    read = skip
    pause = FIRST_POLL_SECONDS
    for attempt in range(1, settings.SHOPIFY_MAX_ATTEMPTS + 1):
        try:
            with requests.get(url, stream=True, timeout=settings.SHOPIFY_TIMEOUT_SECONDS) as response:
                if response.status_code == 429 or response.status_code >= 500:
                    raise requests.ConnectionError(f"HTTP {response.status_code}")
                if response.status_code != 200:
                    raise BulkOperationFailed(
                        f"Shopify's bulk file answered HTTP {response.status_code} (expired after seven days?)"
                    )
                number = 0
                for raw in response.iter_lines():
                    if not raw.strip():
                        continue
                    number += 1
                    if number > read:
                        read = number
                        yield number, raw
                return
        except requests.RequestException as exc:
            if attempt == settings.SHOPIFY_MAX_ATTEMPTS:
                raise ShopifyUnavailable(
                    f"Shopify's bulk file after {attempt} attempts: {exc}; run again to resume after line {read}"
                ) from None
            logger.warning("shopify_backfill: bulk file download failed after line %s (%s), again", read, exc)
            sleep(pause)
            pause *= 2


def _orders(lines, result: BackfillResult) -> Iterator[tuple[int, dict]]:
    """(number of the order's last line, the order with its `lineItems`) in the file's order."""
    current: dict | None = None
    last = 0
    for number, raw in lines:
        try:
            line = json.loads(raw)
            if not isinstance(line, dict) or not isinstance(line.get("id"), str):
                raise ValueError("not an object with an id")
        except ValueError as exc:
            result.warnings.append(f"bulk line {number}: skipped, not a Shopify object ({exc})")
            last = number
            continue
        parent = line.pop("__parentId", None)
        if parent is None:
            if current is not None:
                yield last, current
            current = {**line, "lineItems": {"nodes": []}}
        elif current is not None and parent == current["id"] and line["id"].startswith("gid://shopify/LineItem/"):
            current["lineItems"]["nodes"].append(line)
        else:
            result.warnings.append(
                f"bulk line {number}: {line['id']} skipped, its parent {parent} is not the order before it"
            )
        last = number
    if current is not None:
        yield last, current


def _refunds_assembled(order: dict) -> bool:
    """Put the order's REFUND transactions under its refund, where the mapping reads them. With
    several refunds the file does not say which refund returned which transaction (the bulk
    query cannot select them per refund): False, and the order is read again on its own."""
    refunds = [r for r in order.get("refunds") or [] if isinstance(r, dict)]
    returned = [t for t in order.get("transactions") or [] if isinstance(t, dict) and t.get("kind") == "REFUND"]
    if len(refunds) > 1 and returned:
        return False
    for refund in refunds:
        refund["transactions"] = {"nodes": returned}
    return True


def _apply_batch(client, connection, orders: list[dict], reread: list[str], last_line: int, result) -> None:
    refused = []
    if reread:
        # Through the bucket, one order at a time: rare (orders refunded more than once). Read
        # whole as a page's orders are; one that cannot be is skipped with a warning.
        found = [client.graphql(queries.ORDER, {"id": gid}).get("order") for gid in reread]
        whole, refused = shopify_orders_read_whole(client=client, nodes=[n for n in found if n])
        fresh = {n["id"]: n for n in whole} | {n["id"]: None for n, _ in refused}
        orders = [fresh.get(o["id"], o) for o in orders if fresh.get(o["id"], o) is not None]
        result.reread += len(reread)
    with transaction.atomic():
        # An order the mapping refuses is skipped with a warning (the mapping's), not the batch.
        counts = shopify_orders_apply(connection=connection, nodes=orders, refused=refused)
        ShopifyConnection.objects.filter(pk=connection.pk).update(bulk_lines_applied=last_line)
    result.pages += 1
    result.add(counts)
