"""The Shopify sync against the fake Shopify (ledger/tests/fake_shopify/) on the Standard plan's
bucket (1,000 points, refilled at 100 a second), and the webhook's answer time.

    DATABASE_URL=postgres://postgres@127.0.0.1:5432/refundagent python benchmarks/shopify_sync.py \
        [--orders 10000] [--paged-orders N]

Works in "<DATABASE_URL's name>_shopify" (created and migrated when missing; each run adds its
own tenants and shops, so runs never collide). Places --orders orders in each of two shops of the
fake (one line item, one card sale each, every tenth paid card + gift card; --paged-orders for
the second, default the same), connects a tenant to each, and reads them side by side: the first
through the backfill's bulk operation (`shopify_sync --full`), the second through paged `orders`
queries. Then delivers --webhooks signed `orders/updated` webhooks through Django's test client
with the broker set (CELERY_BROKER_URL, so the answer only stores and enqueues; the queue is
purged afterwards). Prints, for each path, orders per second, database queries per order and per
batch or page, GraphQL calls, how often and how long it waited (on the bucket, or polling the
operation); then the webhook answer time (median, p90). Asserts nothing. Goals: >= 50 orders/s
for 10,000 orders with a constant number of queries per page; a webhook answered in under 50 ms
at the median.
"""

import argparse
import json
import statistics
import sys
import time
import uuid
from datetime import UTC, datetime
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _bench import database_ensure, database_url, db_name, django_setup, p90, url_with_db  # noqa: E402


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--orders", type=int, default=10_000)
    parser.add_argument("--paged-orders", type=int, default=None, help="orders read by pages (default: --orders)")
    parser.add_argument("--webhooks", type=int, default=200)
    args = parser.parse_args()
    base = database_url()
    url = url_with_db(base, db_name(base) + "_shopify")
    database_ensure(url)
    django_setup(url)

    from django.conf import settings
    from django.db import connection
    from django.test import Client

    from ledger.models import Tenant
    from ledger.shopify.connection import shopify_connection_connect
    from ledger.shopify.sync import shopify_sync
    from ledger.tests.fake_shopify import FakeShopify

    fake = FakeShopify(bucket_size=1000, restore_rate=100).start()
    settings.SHOPIFY_API_BASE = fake.api_base
    run = uuid.uuid4().hex[:8]

    def store(label: str, orders: int):
        domain, secret = f"bench-{label}-{run}.myshopify.com", f"shpss_{run}"
        fake.add_shop(domain, "bench-client", secret)
        placed = []
        for n in range(orders):
            transactions = [{"kind": "SALE", "gateway": "shopify_payments", "amount": "50.00"}]
            if n % 10 == 0:
                transactions.append({"kind": "SALE", "gateway": "gift_card", "amount": "10.00"})
            placed.append(
                fake.add_order(
                    domain,
                    email=f"customer{n % 3000}@example.com",
                    line_items=[{"title": "Item", "sku": f"SKU-{n % 50}", "quantity": 1, "price": "50.00"}],
                    transactions=transactions,
                )
            )
        tenant = Tenant.objects.create(slug=f"shopify-bench-{label}-{run}", name=f"Shopify bench {label}")
        row = shopify_connection_connect(
            tenant_slug=tenant.slug, shop=domain, client_id="bench-client", client_secret=secret
        )
        return domain, secret, placed, row

    # Counted by a wrapper, not CaptureQueriesContext (its log keeps only the last 9,000 queries).
    executed = [0]

    def count(execute, sql, params, many, context):
        executed[0] += 1
        return execute(sql, params, many, context)

    def measure(label: str, row, **options):
        executed[0] = 0
        throttled = fake.throttled
        started = time.perf_counter()
        with connection.execute_wrapper(count):
            result = shopify_sync(connection_id=row.pk, **options)
        seconds = time.perf_counter() - started
        unit = "batches" if label == "bulk" else "pages"
        waited = f"polls={result.polls}" if label == "bulk" else f"bucket_waits={result.waits}"
        print(f"[{label}] orders={result.orders} created={result.created} {unit}={result.pages} seconds={seconds:.1f}")
        print(f"[{label}] orders_per_second={result.orders / seconds:.1f}")
        print(
            f"[{label}] db_queries={executed[0]} queries_per_order={executed[0] / max(result.orders, 1):.2f} "
            f"queries_per_{unit[:-1] if unit == 'pages' else 'batch'}={executed[0] / max(result.pages, 1):.1f} "
            f"orders_per_{unit[:-1] if unit == 'pages' else 'batch'}={result.orders / max(result.pages, 1):.1f}"
        )
        print(
            f"[{label}] graphql_and_token_calls={result.calls} {waited} "
            f"throttled_at_shopify={fake.throttled - throttled}"
        )
        return result.orders / seconds

    bulk_store = store("bulk", args.orders)
    paged_store = store("paged", args.paged_orders or args.orders)
    bulk_rate = measure("bulk", bulk_store[3], full=True)
    # A bound makes it the paged sync (never synced and no bound would be the backfill).
    paged_rate = measure("paged", paged_store[3], since=datetime(2000, 1, 1, tzinfo=UTC))
    print(f"bulk_vs_paged={bulk_rate / paged_rate:.1f}x")
    domain, secret, placed, _ = bulk_store

    # Webhooks: answered by storing and enqueueing (a broker set), never by doing the work inline.
    from refundagent.config.celery import app

    app.conf.task_always_eager = False
    timings = []
    client = Client()
    for n in range(args.webhooks):
        order = placed[n % len(placed)]
        body = json.dumps(fake.order_webhook_payload(order)).encode()
        t0 = time.perf_counter()
        response = client.post(
            "/webhooks/shopify",
            data=body,
            content_type="application/json",
            secure=True,
            HTTP_X_SHOPIFY_TOPIC="orders/updated",
            HTTP_X_SHOPIFY_SHOP_DOMAIN=domain,
            HTTP_X_SHOPIFY_EVENT_ID=f"{run}-{n}",
            HTTP_X_SHOPIFY_TRIGGERED_AT=datetime.now(UTC).isoformat(),
            HTTP_X_SHOPIFY_HMAC_SHA256=fake.sign(body, secret),
        )
        timings.append((time.perf_counter() - t0) * 1000)
        assert response.status_code == 200, response.content
    purged = app.control.purge() if settings.CELERY_BROKER_URL else 0
    print(
        f"webhook_answer_ms median={statistics.median(timings):.1f} p90={p90(timings):.1f} "
        f"n={len(timings)} broker={'set' if settings.CELERY_BROKER_URL else 'eager'} purged={purged}"
    )
    fake.stop()


if __name__ == "__main__":
    main()
