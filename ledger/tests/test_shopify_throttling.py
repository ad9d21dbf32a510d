"""THROTTLED although the client waits on the bucket (another app on the shop drained it): the
client waits the time the bucket needs and asks the same query again, a bounded number of times
(SHOPIFY_MAX_ATTEMPTS), never forever. Against the fake Shopify over HTTP; each test has a hard
timeout so a regression fails instead of hanging the suite."""

import time

import pytest

from ledger.models import Order
from ledger.shopify import queries
from ledger.shopify.client import ShopifyUnavailable
from ledger.shopify.connection import shopify_client_for
from ledger.shopify.sync import shopify_sync

from .shopify_helpers import connect

pytestmark = [pytest.mark.django_db, pytest.mark.timeout(60)]
DOMAIN = "acme.myshopify.com"


@pytest.fixture
def store(fake_shopify, tenant):
    # A bucket that refills in about a second: the waits stay short and the test quick.
    return connect(fake_shopify, tenant, bucket_size=1000, restore_rate=1000)


def test_a_bucket_drained_by_another_app_is_waited_for_and_the_query_asked_again(fake_shopify, store, tenant):
    # given 6 orders, and another app that empties the bucket just before the sync's second query
    for n in range(6):
        fake_shopify.add_order(DOMAIN, email=f"t{n}@example.com")
    client = shopify_client_for(store)
    client.graphql(queries.SHOP)  # the client now believes the bucket is full
    fake_shopify.fail_next(1, status="drain", on="query")

    # when the store is synced
    started = time.monotonic()
    result = shopify_sync(connection_id=store.pk, client=client)

    # then Shopify answered THROTTLED once, the client waited for the bucket and asked again
    assert fake_shopify.throttled == 1 and client.stats.throttled == 1
    assert client.stats.waits >= 1 and 0 < client.stats.waited_seconds < 2
    pages = [c for c in fake_shopify.graphql_calls() if b"OrdersPage" in c["body"]]
    assert pages[0]["body"] == pages[1]["body"]  # the same query, asked again
    # and nothing was lost, in about the time the bucket needed
    assert (result.orders, result.created) == (6, 6) and Order.objects.count() == 6
    assert time.monotonic() - started < 10


def test_a_bucket_drained_at_every_attempt_gives_up_after_the_attempts_not_never(fake_shopify, store, tenant, settings):
    # given a store whose bucket another app empties before every call
    settings.SHOPIFY_MAX_ATTEMPTS = 3
    fake_shopify.add_order(DOMAIN, email="t@example.com")
    fake_shopify.fail_next(10, status="drain", on="query")

    # when the store is synced
    started = time.monotonic()
    with pytest.raises(ShopifyUnavailable, match="after 3 attempts: THROTTLED"):
        shopify_sync(connection_id=store.pk)

    # then it asked exactly 3 times, waiting for the bucket between them, and stopped
    assert fake_shopify.throttled == 3
    assert time.monotonic() - started < 10
    assert Order.objects.count() == 0
    # and the next run, with the bucket left alone, stores the order
    fake_shopify.faults.clear()
    assert shopify_sync(connection_id=store.pk).created == 1
