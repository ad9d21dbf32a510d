"""The Shopify sync against the fake Shopify (ledger/tests/fake_shopify/) on the Standard plan's
bucket (1,000 points, refilled at 100 a second), and the webhook's answer time.

    DATABASE_URL=postgres://postgres@127.0.0.1:5432/refundagent python benchmarks/shopify_sync.py [--orders 10000]

Works in "<DATABASE_URL's name>_shopify" (created and migrated when missing; each run adds its
own tenant and shop, so runs never collide). Places --orders orders in the fake (one line item,
one card sale each, every tenth paid card + gift card), connects a tenant, runs `shopify_sync`
once, then delivers --webhooks signed `orders/updated` webhooks through Django's test client
with the broker set (CELERY_BROKER_URL, so the answer only stores and enqueues; the queue is
purged afterwards). Prints orders per second, database queries per order, GraphQL calls, how
often and how long the sync waited on the bucket, and the webhook answer time (median, p90).
Asserts nothing. Goals: >= 50 orders/s with a constant number of queries per page; a webhook
answered in under 50 ms at the median.
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
    domain, secret = f"bench-{run}.myshopify.com", f"shpss_{run}"
    fake.add_shop(domain, "bench-client", secret)
    placed = []
    for n in range(args.orders):
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
    tenant = Tenant.objects.create(slug=f"shopify-bench-{run}", name="Shopify bench")
    connection_row = shopify_connection_connect(
        tenant_slug=tenant.slug, shop=domain, client_id="bench-client", client_secret=secret
    )

    # Counted by a wrapper, not CaptureQueriesContext (its log keeps only the last 9,000 queries).
    executed = [0]

    def count(execute, sql, params, many, context):
        executed[0] += 1
        return execute(sql, params, many, context)

    started = time.perf_counter()
    with connection.execute_wrapper(count):
        result = shopify_sync(connection_id=connection_row.pk)
    seconds = time.perf_counter() - started
    print(f"orders={result.orders} created={result.created} pages={result.pages} seconds={seconds:.1f}")
    print(f"orders_per_second={result.orders / seconds:.1f}")
    print(
        f"db_queries={executed[0]} queries_per_order={executed[0] / max(result.orders, 1):.2f} "
        f"queries_per_page={executed[0] / max(result.pages, 1):.1f}"
    )
    print(f"graphql_and_token_calls={result.calls} waits={result.waits} throttled_at_shopify={fake.throttled}")
    print(f"orders_per_page={result.orders / max(result.pages, 1):.1f}")

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
