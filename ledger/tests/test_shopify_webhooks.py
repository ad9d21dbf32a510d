"""POST /webhooks/shopify: verified (HMAC of the raw body with the shop's client secret, in
constant time), stored once per event id, answered at once, its work queued; the work reads the
order again from the API, so any order of delivery ends in the same ledger state."""

import json
import uuid
from datetime import UTC, datetime, timedelta
from decimal import Decimal

import pytest
from django.test import Client

from ledger.models import Order, RefundEntry, Tenant, WebhookEvent
from ledger.shopify.sync import shopify_sync

from .shopify_helpers import SECRET, connect

DOMAIN = "acme.myshopify.com"


def now_iso(delta=timedelta(0)):
    return (datetime.now(UTC) - delta).isoformat().replace("+00:00", "Z")


@pytest.fixture
def deliver(fake_shopify, django_capture_on_commit_callbacks):
    """deliver(topic, payload, ...) -> the response; signed as Shopify signs, the work run after commit."""

    def send(
        topic, payload, *, domain=DOMAIN, event_id=None, secret=SECRET, signature=None, triggered_at=None, raw=None
    ):
        body = raw if raw is not None else json.dumps(payload).encode()
        headers = {
            "HTTP_X_SHOPIFY_TOPIC": topic,
            "HTTP_X_SHOPIFY_SHOP_DOMAIN": domain,
            "HTTP_X_SHOPIFY_EVENT_ID": event_id or str(uuid.uuid4()),
            "HTTP_X_SHOPIFY_TRIGGERED_AT": triggered_at or now_iso(),
            "HTTP_X_SHOPIFY_API_VERSION": "2026-04",
        }
        mac = fake_shopify.sign(body, secret) if signature is None else signature
        if mac:
            headers["HTTP_X_SHOPIFY_HMAC_SHA256"] = mac
        with django_capture_on_commit_callbacks(execute=True):
            return Client().post("/webhooks/shopify", data=body, content_type="application/json", **headers)

    return send


@pytest.fixture
def store(fake_shopify, tenant):
    return connect(fake_shopify, tenant)


def test_an_order_webhook_is_stored_once_and_its_order_read_from_the_api(fake_shopify, store, tenant, deliver):
    # given an order placed in the shop
    placed = fake_shopify.add_order(DOMAIN, email="ada@example.com")

    # when its orders/create webhook arrives
    response = deliver("orders/create", fake_shopify.order_webhook_payload(placed), event_id="evt-1")

    # then it is answered 200, stored once, processed, and the order is in the tenant's ledger
    assert response.status_code == 200 and response.json() == {"received": True, "duplicate": False}
    event = WebhookEvent.objects.get(provider="shopify")
    assert event.processed_at is not None and event.tenant == tenant and event.type == "orders/create"
    assert Order.objects.get(tenant=tenant).external_id == "#1001"
    reads = [c for c in fake_shopify.graphql_calls() if b"query Order(" in c["body"]]
    assert len(reads) == 1 and placed.id.encode() in reads[0]["body"]  # the order was read from the API
    # when the same event is delivered again: 200, nothing new
    again = deliver("orders/create", fake_shopify.order_webhook_payload(placed), event_id="evt-1")
    assert again.status_code == 200 and again.json()["duplicate"] is True
    assert WebhookEvent.objects.count() == 1 and Order.objects.count() == 1


@pytest.mark.parametrize(
    "tamper,status",
    [
        ({"signature": ""}, 401),
        ({"signature": "d3JvbmcK"}, 401),
        ({"secret": "not-the-secret"}, 401),
        ({"domain": "unknown.myshopify.com"}, 401),
        ({"triggered_at": now_iso(timedelta(days=2))}, 401),
        ({"triggered_at": "yesterday"}, 401),
        ({"raw": b"{not json"}, 400),
        ({"raw": b"[1, 2]"}, 400),
        ({"raw": b'{"id": "x"}'}, 400),
    ],
)
def test_a_missing_or_wrong_hmac_an_unknown_shop_a_stale_replay_or_a_bad_body_stores_nothing(
    fake_shopify, store, tenant, deliver, tamper, status
):
    placed = fake_shopify.add_order(DOMAIN, email="ada@example.com")
    response = deliver("orders/create", fake_shopify.order_webhook_payload(placed), **tamper)
    assert response.status_code == status
    assert SECRET not in response.content.decode()
    assert not WebhookEvent.objects.exists() and not Order.objects.exists()


def test_other_topics_are_answered_200_and_ignored(fake_shopify, store, deliver):
    response = deliver("products/update", {"id": 1})
    assert response.status_code == 200 and response.json()["ignored"] is True
    assert not WebhookEvent.objects.exists()


def test_reversed_and_duplicated_deliveries_end_in_the_state_of_a_sync(fake_shopify, store, tenant, deliver):
    # given an order created, refunded in the admin, then cancelled in the shop
    placed = fake_shopify.add_order(DOMAIN, email="ada@example.com")
    created_payload = fake_shopify.order_webhook_payload(placed)
    refund = fake_shopify.refund_in_admin(placed, "20.00")
    refund_payload = fake_shopify.refund_webhook_payload(refund)
    fake_shopify.cancel_order(placed)
    cancelled_payload = fake_shopify.order_webhook_payload(placed)

    # when the webhooks arrive last first, twice over
    for topic, payload, event in [
        ("orders/cancelled", cancelled_payload, "e3"),
        ("refunds/create", refund_payload, "e2"),
        ("orders/create", created_payload, "e1"),
        ("refunds/create", refund_payload, "e2"),
        ("orders/create", created_payload, "e1-redelivered-as-new-event"),
    ]:
        assert deliver(topic, payload, event_id=event).status_code == 200

    # then the order is cancelled with its admin refund recorded once
    order = Order.objects.get(tenant=tenant)
    state = (order.status, list(RefundEntry.objects.filter(order=order).values_list("amount", "status")))
    assert state == ("cancelled", [(Decimal("20.00"), "external")])
    # and a full sync afterwards finds nothing to change
    result = shopify_sync(connection_id=store.pk)
    assert (result.created, result.updated) == (0, 0)
    assert RefundEntry.objects.filter(order=order).count() == 1


def test_a_webhook_of_shop_a_never_touches_tenant_b(fake_shopify, store, tenant, deliver):
    # given two tenants whose stores both have an order #1001
    other = Tenant.objects.create(slug="other", name="Other")
    connect(fake_shopify, other, "globex.myshopify.com", client_id="client-2", secret="shpss_other")
    mine = fake_shopify.add_order(DOMAIN, email="ada@example.com")
    theirs = fake_shopify.add_order("globex.myshopify.com", email="ada@example.com")
    deliver(
        "orders/create", fake_shopify.order_webhook_payload(theirs), domain="globex.myshopify.com", secret="shpss_other"
    )
    their_order = Order.objects.get(tenant=other)

    # when shop A cancels its #1001 and its webhook arrives
    fake_shopify.cancel_order(mine)
    assert deliver("orders/cancelled", fake_shopify.order_webhook_payload(mine)).status_code == 200

    # then tenant A has its cancelled #1001 and tenant B's #1001 is untouched
    assert Order.objects.get(tenant=tenant).status == "cancelled"
    their_order.refresh_from_db()
    assert their_order.status != "cancelled" and their_order.tenant == other
    # and shop A's payload sent as shop B, signed with A's secret, is refused
    spoof = deliver("orders/cancelled", fake_shopify.order_webhook_payload(mine), domain="globex.myshopify.com")
    assert spoof.status_code == 401


def test_a_stored_event_whose_publish_was_lost_is_processed_by_the_sweep(fake_shopify, store, tenant, monkeypatch):
    from ledger import views
    from ledger.sweep import webhook_events_republish

    # given a delivery stored while the broker was down
    placed = fake_shopify.add_order(DOMAIN, email="ada@example.com")
    body = json.dumps(fake_shopify.order_webhook_payload(placed)).encode()

    def broker_down(event_id):
        raise ConnectionError("broker down")

    monkeypatch.setattr(views.webhook_event_process_task, "delay", broker_down)
    response = Client().post(
        "/webhooks/shopify",
        data=body,
        content_type="application/json",
        HTTP_X_SHOPIFY_TOPIC="orders/create",
        HTTP_X_SHOPIFY_SHOP_DOMAIN=DOMAIN,
        HTTP_X_SHOPIFY_EVENT_ID="evt-lost",
        HTTP_X_SHOPIFY_TRIGGERED_AT=now_iso(),
        HTTP_X_SHOPIFY_HMAC_SHA256=fake_shopify.sign(body, SECRET),
    )
    assert response.status_code == 200
    assert WebhookEvent.objects.get().processed_at is None and not Order.objects.exists()

    # when the sweep runs (the broker back)
    monkeypatch.undo()
    assert webhook_events_republish(older_than=timedelta(0)) == 1

    # then the order is in
    assert WebhookEvent.objects.get().processed_at is not None
    assert Order.objects.get(tenant=tenant).external_id == "#1001"


@pytest.mark.django_db(transaction=True)
def test_concurrent_duplicate_deliveries_over_http_are_processed_once(fake_shopify, tenant, live_server):
    import threading

    # given a connected store and an order, and its webhook sent five times at once by the fake
    connect(fake_shopify, tenant)
    placed = fake_shopify.add_order(DOMAIN, email="ada@example.com")
    payload = fake_shopify.order_webhook_payload(placed)
    barrier = threading.Barrier(5)
    statuses = []

    def send():
        barrier.wait()
        statuses.append(
            fake_shopify.send_webhook(
                f"{live_server.url}/webhooks/shopify", "orders/create", DOMAIN, payload, event_id="same"
            )[0]
        )

    threads = [threading.Thread(target=send) for _ in range(5)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=60)

    # then every delivery is answered 200, and the event is stored and processed once
    assert statuses == [200] * 5
    [event] = WebhookEvent.objects.filter(provider="shopify")
    assert event.processed_at is not None
    assert Order.objects.filter(tenant=tenant).count() == 1


def test_a_capture_after_the_authorisation_arrives_by_orders_updated_as_a_payment(fake_shopify, store, tenant, deliver):
    # given an order only authorised when it was synced
    lines = [{"title": "Tent", "sku": "TENT-1", "quantity": 1, "price": "80.00"}]
    placed = fake_shopify.add_order(
        DOMAIN, email="ada@example.com", line_items=lines, transactions=[{"kind": "AUTHORIZATION", "amount": "80.00"}]
    )
    shopify_sync(connection_id=store.pk)
    order = Order.objects.get(tenant=tenant, external_id=placed.name)
    assert not order.payments.exists()

    # when it is captured in Shopify and its orders/updated webhook delivered (twice, two event ids)
    capture = fake_shopify.add_transaction(placed, kind="CAPTURE", amount="80.00", parent=placed.txns[0])
    for event_id in ("evt-cap-1", "evt-cap-2"):
        assert (
            deliver("orders/updated", fake_shopify.order_webhook_payload(placed), event_id=event_id).status_code == 200
        )

    # then the capture is the order's one payment
    assert [(p.payment_ref, p.amount) for p in order.payments.all()] == [(capture.id, Decimal("80.00"))]
