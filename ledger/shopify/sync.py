"""`shopify_sync`: the store's orders, in pages sorted by update time, into the ledger.

The run's lower bound and the cursor after each stored page are the connection's checkpoint,
written in the page's own transaction: a run killed at any point resumes after the last page it
stored, and a page applied twice changes nothing (the mapping is idempotent). Waiting on the
bucket is the client's (ledger/shopify/client.py). A page is applied with a constant number of
queries whatever its size (bulk reads and writes in the import)."""

import logging
from dataclasses import dataclass
from datetime import datetime, timedelta

from django.conf import settings
from django.db import transaction
from django.utils import timezone

from ..models import ShopifyConnection
from . import queries
from .bulk import BackfillResult, shopify_backfill
from .connection import shopify_client_for
from .mapping import SyncCounts, shopify_orders_apply
from .nested import shopify_orders_read_whole

logger = logging.getLogger(__name__)

MAX_PAGE = 250
FIRST_PAGE = 5
# Keep a page's requested cost under this share of the bucket, so it never waits for a full bucket.
BUCKET_SHARE = 0.9


@dataclass
class SyncResult(SyncCounts):
    pages: int = 0
    waits: int = 0
    calls: int = 0
    resumed: bool = False


def _page_size(client, last_size: int) -> int:
    """As many orders as fit the bucket: the requested cost per order, learned from the last page."""
    cost = client.stats.costs.get(queries.ORDERS_PAGE)
    if not cost or not client.bucket.maximum:
        return last_size
    per_order = max(cost / max(last_size, 1), 1.0)
    return max(1, min(MAX_PAGE, int(client.bucket.maximum * BUCKET_SHARE / per_order)))


def shopify_sync(
    *, connection_id: int, since: datetime | None = None, client=None, full: bool = False
) -> SyncResult | BackfillResult:
    """Read every order updated since `since` (default: the last complete sync, less an overlap;
    never synced: everything). An unfinished run for the same bound resumes at its cursor.

    `full` (or a `full` backfill under way) goes through a bulk operation (bulk.py): it does not
    draw on the query-cost bucket, which holds a paged read of nested orders near 7 a second on
    the Standard plan. Everything else, a first sync included, is the paged read the command
    promises: an operator asks for a bulk operation by name, since it is a separate Shopify
    feature with its own limits (one file, polled, five at a time per shop), and a window after
    the last sync is a handful of orders where its start, polls and file would cost more."""
    connection = ShopifyConnection.objects.select_related("tenant").get(pk=connection_id)
    if full or (since is None and connection.bulk_operation_id):
        return shopify_backfill(connection_id=connection.pk, client=client)
    client = client or shopify_client_for(connection)
    if since is None and connection.last_synced_at is not None:
        since = connection.last_synced_at - timedelta(seconds=settings.SHOPIFY_SYNC_OVERLAP_SECONDS)
    result = SyncResult()
    cursor = ""
    if connection.sync_started_at is not None and connection.sync_since == since:
        cursor, result.resumed = connection.sync_cursor, True
        started = connection.sync_started_at
    else:
        started = timezone.now()
        ShopifyConnection.objects.filter(pk=connection.pk).update(
            sync_since=since, sync_cursor="", sync_started_at=started
        )
    search = f"updated_at:>='{since.isoformat()}'" if since else None
    size = FIRST_PAGE
    while True:
        data = client.graphql(queries.ORDERS_PAGE, {"first": size, "after": cursor or None, "query": search})
        page = data.get("orders") or {}
        nodes = page.get("nodes") or []
        info = page.get("pageInfo") or {}
        # An order refused (here or by the mapping) is skipped with a warning, never the page:
        # the cursor moves past it, and the next run meets it again without looping on it.
        nodes, refused = shopify_orders_read_whole(client=client, nodes=nodes)
        with transaction.atomic():
            counts = shopify_orders_apply(connection=connection, nodes=nodes, refused=refused)
            cursor = info.get("endCursor") or cursor
            ShopifyConnection.objects.filter(pk=connection.pk).update(sync_cursor=cursor)
        result.pages += 1
        result.add(counts)
        if not info.get("hasNextPage"):
            break
        size = _page_size(client, size)
    ShopifyConnection.objects.filter(pk=connection.pk).update(
        last_synced_at=started, sync_started_at=None, sync_cursor="", sync_since=None
    )
    result.waits, result.calls = client.stats.waits, client.stats.calls
    logger.info(
        "shopify_sync %s: orders=%s created=%s updated=%s skipped=%s pages=%s waits=%s",
        connection.shop_domain,
        result.orders,
        result.created,
        result.updated,
        result.skipped,
        result.pages,
        result.waits,
    )
    return result


def shopify_sync_all() -> list[int]:
    """Beat: every connected store from its last sync (missed webhooks). Returns the ids synced."""
    return list(ShopifyConnection.objects.order_by("id").values_list("pk", flat=True))


def shopify_order_refresh(*, connection_id: int, order_gid: str, client=None) -> SyncCounts:
    """Read one order again from the API and apply it (what a webhook's work does)."""
    connection = ShopifyConnection.objects.select_related("tenant").get(pk=connection_id)
    client = client or shopify_client_for(connection)
    node = client.graphql(queries.ORDER, {"id": order_gid}).get("order")
    if not node:
        return SyncCounts()
    nodes, refused = shopify_orders_read_whole(client=client, nodes=[node])
    return shopify_orders_apply(connection=connection, nodes=nodes, refused=refused)
