"""The fake Shopify itself, driven over HTTP with `requests` as the product drives it: its token
flow, its GraphQL validation, pages, bucket, refunds and webhooks behave as Shopify's do, so the
connector's tests can trust what it answers."""

import base64
import hashlib
import hmac
import json
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
import requests

SHOP = "acme.myshopify.com"
OTHER = "other.myshopify.com"
INVALID_TOKEN = "[API] Invalid API key or access token (unrecognized login or wrong password)"

ORDER_QUERY = """
query Order($id: ID!) {
  order(id: $id) {
    id name createdAt updatedAt processedAt cancelledAt displayFinancialStatus
    displayFulfillmentStatus currencyCode email
    customer { id email firstName lastName displayName }
    totalPriceSet { shopMoney { amount currencyCode } presentmentMoney { amount currencyCode } }
    totalRefundedSet { shopMoney { amount currencyCode } }
    lineItems(first: 20) {
      nodes { id name sku quantity currentQuantity refundableQuantity
              originalUnitPriceSet { shopMoney { amount currencyCode } } }
    }
    transactions(first: 10) {
      id kind status gateway amountSet { shopMoney { amount currencyCode } }
      parentTransaction { id } processedAt createdAt
    }
    refunds(first: 5) {
      id createdAt note totalRefundedSet { shopMoney { amount currencyCode } }
      transactions(first: 10) {
        nodes { id kind status gateway amountSet { shopMoney { amount } } parentTransaction { id } }
      }
      refundLineItems(first: 10) { nodes { lineItem { id } quantity } }
    }
  }
}
"""

ORDERS_PAGE = """
query Orders($first: Int!, $after: String, $query: String) {
  orders(first: $first, after: $after, query: $query, sortKey: UPDATED_AT) {
    edges { cursor node { id name updatedAt } }
    pageInfo { hasNextPage endCursor }
  }
}
"""

REFUND_CREATE = """
mutation Refund($input: RefundInput!, $key: String!) {
  refundCreate(input: $input) @idempotent(key: $key) {
    refund { id totalRefundedSet { shopMoney { amount currencyCode } } }
    order { id displayFinancialStatus totalRefundedSet { shopMoney { amount } } }
    userErrors { field message }
  }
}
"""

SUGGESTED = """
query Suggest($id: ID!, $lines: [RefundLineItemInput!]) {
  order(id: $id) {
    suggestedRefund(refundLineItems: $lines, suggestFullRefund: false) {
      amountSet { shopMoney { amount } }
      suggestedTransactions {
        amountSet { shopMoney { amount } } gateway kind parentTransaction { id }
        maximumRefundableSet { shopMoney { amount } }
      }
      refundLineItems { lineItem { id } quantity }
    }
  }
}
"""


@pytest.fixture
def shopify(fake_shopify):
    fake_shopify.add_shop(SHOP, "client-acme", "secret-acme", name="Acme Outfitters")
    fake_shopify.add_shop(OTHER, "client-other", "secret-other")
    return fake_shopify


def take_token(fake, shop=SHOP, client_id="client-acme", client_secret="secret-acme", as_json=False):
    body = {"grant_type": "client_credentials", "client_id": client_id, "client_secret": client_secret}
    if as_json:
        return requests.post(fake.token_url(shop), json=body, timeout=5)
    return requests.post(fake.token_url(shop), data=body, timeout=5)


class Client:
    """What the product does: a token, then GraphQL documents over POST."""

    def __init__(self, fake, shop=SHOP, client_id="client-acme", client_secret="secret-acme"):
        self.fake, self.shop = fake, shop
        self.token = take_token(fake, shop, client_id, client_secret).json()["access_token"]

    def post(self, query, variables=None, timeout=10):
        return requests.post(
            f"{self.fake.base_for(self.shop)}/admin/api/2026-04/graphql.json",
            json={"query": query, "variables": variables or {}},
            headers={"X-Shopify-Access-Token": self.token},
            timeout=timeout,
        )

    def query(self, query, variables=None):
        response = self.post(query, variables)
        assert response.status_code == 200, response.text
        return response.json()


def split_order(fake, shop=SHOP, **fields):
    """$120: $100 by card and $20 by gift card, for two mugs at $60."""
    return fake.add_order(
        shop,
        email="ann@example.com",
        customer={"email": "ann@example.com", "first_name": "Ann", "last_name": "Lee"},
        line_items=[{"title": "Mug", "sku": "MUG-1", "quantity": 2, "price": "60.00"}],
        transactions=[
            {"kind": "SALE", "gateway": "shopify_payments", "amount": "100.00"},
            {"kind": "SALE", "gateway": "gift_card", "amount": "20.00"},
        ],
        **fields,
    )


def refund_input(order, *parts, **extra):
    """A RefundInput returning (transaction, amount) parts."""
    return {
        "orderId": order.id,
        "notify": False,
        "transactions": [
            {"orderId": order.id, "parentId": txn.id, "gateway": txn.gateway, "kind": "REFUND", "amount": amount}
            for txn, amount in parts
        ],
        **extra,
    }


# -- token and authentication -----------------------------------------------------------------


def test_client_credentials_grant_answers_a_token_for_a_day(shopify):
    # when the app's own credentials ask for a token, as a form and as JSON
    as_form = take_token(shopify)
    as_json = take_token(shopify, as_json=True)

    # then each is a new access token with the app's scopes, valid about 24 hours
    assert as_form.status_code == as_json.status_code == 200
    body = as_form.json()
    assert set(body) == {"access_token", "scope", "expires_in"}
    assert body["expires_in"] == 86399
    assert body["scope"] == "read_orders,write_orders,read_customers"
    assert body["access_token"] != as_json.json()["access_token"]
    assert shopify.tokens_issued == 2


@pytest.mark.parametrize(
    "shop,client_id,client_secret",
    [
        (SHOP, "client-acme", "wrong"),
        (SHOP, "client-other", "secret-other"),  # another shop's app
        ("nowhere.myshopify.com", "client-acme", "secret-acme"),
    ],
)
def test_wrong_credentials_get_shopifys_400_and_no_token(shopify, shop, client_id, client_secret):
    # when the grant carries credentials this shop does not know
    response = take_token(shopify, shop, client_id, client_secret)

    # then Shopify's OAuth error, and nothing issued
    assert response.status_code == 400
    assert response.json()["error"] == "invalid_client"
    assert shopify.tokens_issued == 0


def test_other_grant_types_are_refused(shopify):
    response = requests.post(
        shopify.token_url(SHOP),
        data={"grant_type": "authorization_code", "client_id": "client-acme", "client_secret": "secret-acme"},
        timeout=5,
    )

    assert response.status_code == 400
    assert response.json()["error"] == "unsupported_grant_type"


def test_graphql_without_a_valid_token_is_401(shopify):
    # given a client with a good token for acme
    client = Client(shopify)
    assert client.post("{ shop { name } }").status_code == 200

    # when the token is missing, unknown, used on another shop, or expired
    url = shopify.graphql_url(SHOP)
    missing = requests.post(url, json={"query": "{ shop { name } }"}, timeout=5)
    unknown = requests.post(url, json={"query": "{ shop { name } }"}, headers={"X-Shopify-Access-Token": "shpat_x"})
    elsewhere = requests.post(
        shopify.graphql_url(OTHER),
        json={"query": "{ shop { name } }"},
        headers={"X-Shopify-Access-Token": client.token},
    )
    shopify.expire_tokens()
    expired = client.post("{ shop { name } }")

    # then each is Shopify's 401
    for response in (missing, unknown, elsewhere, expired):
        assert response.status_code == 401
        assert response.json() == {"errors": INVALID_TOKEN}


def test_a_token_expires_after_its_lifetime(fake_shopify):
    # given tokens that last one second
    fake_shopify.token_ttl = 1
    fake_shopify.add_shop(SHOP, "client-acme", "secret-acme")
    client = Client(fake_shopify)
    assert client.post("{ shop { name } }").status_code == 200

    # when the second has passed
    time.sleep(1.1)

    # then the token is refused
    assert client.post("{ shop { name } }").status_code == 401


# -- queries ----------------------------------------------------------------------------------


def test_shop_answers_with_cost_extensions(shopify):
    answer = Client(shopify).query("{ shop { id name currencyCode myshopifyDomain } }")

    assert answer["data"]["shop"] == {
        "id": "gid://shopify/Shop/1",
        "name": "Acme Outfitters",
        "currencyCode": "USD",
        "myshopifyDomain": SHOP,
    }
    cost = answer["extensions"]["cost"]
    assert cost["requestedQueryCost"] == cost["actualQueryCost"] == 1
    assert cost["throttleStatus"] == {"maximumAvailable": 1000.0, "currentlyAvailable": 999, "restoreRate": 100.0}


def test_order_reads_back_in_shopifys_shapes(shopify):
    # given a split-tender order with a refund made in Shopify's admin
    order = split_order(shopify)
    card, gift = order.txns
    shopify.refund_in_admin(order, "30.00", transaction=card, note="damaged")

    # when the product reads it
    answer = Client(shopify).query(ORDER_QUERY, {"id": order.id})

    # then ids are gids, names as the customer knows them, amounts Decimal strings
    read = answer["data"]["order"]
    assert read["id"] == "gid://shopify/Order/1001"
    assert read["name"] == "#1001"
    assert read["email"] == "ann@example.com"
    assert read["customer"]["displayName"] == "Ann Lee"
    assert read["displayFinancialStatus"] == "PARTIALLY_REFUNDED"
    assert read["totalPriceSet"]["shopMoney"] == {"amount": "120.0", "currencyCode": "USD"}
    assert read["totalRefundedSet"]["shopMoney"] == {"amount": "30.0", "currencyCode": "USD"}
    assert [(t["kind"], t["gateway"], t["amountSet"]["shopMoney"]["amount"]) for t in read["transactions"]] == [
        ("SALE", "shopify_payments", "100.0"),
        ("SALE", "gift_card", "20.0"),
        ("REFUND", "shopify_payments", "30.0"),
    ]
    assert read["transactions"][2]["parentTransaction"] == {"id": card.id}
    [refund] = read["refunds"]
    assert refund["note"] == "damaged"
    assert refund["transactions"]["nodes"][0]["parentTransaction"] == {"id": card.id}
    assert read["lineItems"]["nodes"][0]["refundableQuantity"] == 2
    assert gift.remaining == 20


def test_an_order_of_another_shop_is_not_found(shopify):
    # given two shops with an order each, both named #1001
    mine = split_order(shopify)
    theirs = split_order(shopify, shop=OTHER)
    assert mine.name == theirs.name == "#1001"

    # when acme asks for the other shop's order
    answer = Client(shopify).query(ORDER_QUERY, {"id": theirs.id})

    # then it does not exist for acme
    assert answer["data"]["order"] is None


def test_a_field_shopify_does_not_have_fails_validation(shopify):
    client = Client(shopify)
    order = split_order(shopify)

    # when a query asks for a field not in the Admin API
    answer = client.query("query($id: ID!) { order(id: $id) { id totalPrice { amount } } }", {"id": order.id})

    # then Shopify's validation error, no data, nothing charged
    assert "data" not in answer
    [error] = answer["errors"]
    assert error["message"] == "Field 'totalPrice' doesn't exist on type 'Order'"
    assert error["extensions"]["code"] == "undefinedField"
    assert shopify.shop(SHOP).bucket.refill() == 1000


@pytest.mark.parametrize(
    "query",
    [
        "{ shop { name ",  # syntax
        "{ order(id: true) { id } }",  # an argument of the wrong type
        "query($id: ID!) { order(id: $id) { id } }",  # a variable left out
        "",
    ],
)
def test_malformed_documents_answer_errors(shopify, query):
    answer = Client(shopify).query(query)

    assert answer["errors"] and answer["errors"][0]["message"]
    assert not answer.get("data")


# -- pagination -------------------------------------------------------------------------------


def read_all_orders(client, first=250, query=None):
    seen, after, pages = [], None, 0
    while True:
        answer = client.query(ORDERS_PAGE, {"first": first, "after": after, "query": query})
        connection = answer["data"]["orders"]
        seen += [edge["node"] for edge in connection["edges"]]
        pages += 1
        if not connection["pageInfo"]["hasNextPage"]:
            return seen, pages
        after = connection["pageInfo"]["endCursor"]


def test_orders_page_by_update_time_with_opaque_cursors(shopify):
    # given 600 orders, updated over time (many in the same second)
    for i in range(600):
        shopify.add_order(SHOP, created_at=f"2026-04-01T10:{i // 60:02d}:{i % 60:02d}Z")
    split_order(shopify, shop=OTHER)
    client = Client(shopify)

    # when the product pages through them 250 at a time
    seen, pages = read_all_orders(client)

    # then every order once, in update order, in three pages
    assert pages == 3
    assert len(seen) == len({o["id"] for o in seen}) == 600
    assert [o["updatedAt"] for o in seen] == sorted(o["updatedAt"] for o in seen)


def test_orders_filtered_by_updated_at_and_a_changed_order_moves_to_the_end(shopify):
    # given orders updated at 10:00, 10:01, 10:02, 10:03
    orders = [shopify.add_order(SHOP, created_at=f"2026-04-01T10:0{i}:00Z") for i in range(4)]

    # when the first is changed now and the product asks for what changed since 10:02
    shopify.update_order(orders[0], note="gift wrap")
    seen, _ = read_all_orders(Client(shopify), first=2, query="updated_at:>='2026-04-01T10:02:00Z'")

    # then the two late ones and the changed one, the changed one last
    assert [o["name"] for o in seen] == [orders[2].name, orders[3].name, orders[0].name]


def test_update_moves_updated_at_on_every_change(shopify):
    order = split_order(shopify)
    before = order.updated_at

    shopify.update_order(order, note="a")
    shopify.update_order(order, note="b")

    assert before < order.updated_at
    assert len(shopify.shop(SHOP).by_updated) == 1


def test_more_than_250_a_page_is_refused(shopify):
    answer = Client(shopify).query(ORDERS_PAGE, {"first": 251})

    assert answer["errors"][0]["extensions"]["code"] == "MAX_PAGE_SIZE_EXCEEDED"
    assert answer["data"] is None


# -- the bucket -------------------------------------------------------------------------------


def test_a_query_costing_more_than_is_available_is_throttled_then_refills(fake_shopify):
    # given a bucket of 60 points refilling at 20 a second
    fake_shopify.add_shop(SHOP, "client-acme", "secret-acme", bucket_size=60, restore_rate=20)
    for _ in range(30):
        fake_shopify.add_order(SHOP)
    client = Client(fake_shopify)
    page = "{ orders(first: 25) { nodes { id } } }"  # requested 2 + 25 = 27
    assert fake_shopify.query_cost(page) == 27

    # when it is asked three times at once
    answers = [client.query(page) for _ in range(3)]

    # then the third is throttled, charged nothing, and counted
    assert [bool(a.get("data")) for a in answers] == [True, True, False]
    throttled = answers[2]
    assert throttled["errors"] == [
        {
            "message": "Throttled",
            "extensions": {"code": "THROTTLED", "documentation": "https://shopify.dev/api/usage/rate-limits"},
        }
    ]
    assert throttled["extensions"]["cost"]["requestedQueryCost"] == 27
    assert throttled["extensions"]["cost"]["actualQueryCost"] is None
    assert throttled["extensions"]["cost"]["throttleStatus"]["currentlyAvailable"] < 27
    assert fake_shopify.throttled == 1

    # and once the bucket refilled (6 left + 20 a second), the same query runs
    time.sleep(1.5)
    assert client.query(page)["data"]["orders"]["nodes"]


def test_actual_cost_is_refunded_to_the_bucket(shopify):
    # given 3 orders; a page of 100 requests 2 + 100 but returns 3
    for _ in range(3):
        shopify.add_order(SHOP)

    answer = Client(shopify).query("{ orders(first: 100) { nodes { id } } }")

    cost = answer["extensions"]["cost"]
    assert cost["requestedQueryCost"] == 102
    assert cost["actualQueryCost"] == 5
    assert cost["throttleStatus"]["currentlyAvailable"] >= 995


def test_a_query_above_the_single_query_limit_is_refused(shopify):
    query = "{ orders(first: 250) { nodes { id lineItems(first: 250) { nodes { id } } } } }"

    answer = Client(shopify).query(query)

    assert answer["errors"][0]["extensions"]["code"] == "MAX_COST_EXCEEDED"
    assert shopify.throttled == 0


# -- suggestedRefund and refundCreate -----------------------------------------------------------


def test_suggested_refund_spreads_over_what_each_payment_can_still_return(shopify):
    # given a $120 split order whose card already returned $90 in the admin
    order = split_order(shopify)
    card, gift = order.txns
    shopify.refund_in_admin(order, "90.00", transaction=card)

    # when a refund of both mugs ($120) is suggested
    answer = Client(shopify).query(
        SUGGESTED, {"id": order.id, "lines": [{"lineItemId": order.lines[0].id, "quantity": 2}]}
    )

    # then what is left: $10 on the card, $20 on the gift card
    suggested = answer["data"]["order"]["suggestedRefund"]
    assert suggested["amountSet"]["shopMoney"]["amount"] == "30.0"
    assert [
        (t["parentTransaction"]["id"], t["gateway"], t["amountSet"]["shopMoney"]["amount"], t["kind"])
        for t in suggested["suggestedTransactions"]
    ] == [(card.id, "shopify_payments", "10.0", "SUGGESTED_REFUND"), (gift.id, "gift_card", "20.0", "SUGGESTED_REFUND")]
    assert suggested["refundLineItems"] == [{"lineItem": {"id": order.lines[0].id}, "quantity": 2}]


def test_the_spread_of_a_suggestion_can_put_a_gateway_first(shopify):
    # given a shop whose suggestions take the gift card first
    order = split_order(shopify)
    card, gift = order.txns
    shopify.shop(SHOP).suggestion_order = ("gift_card",)

    # when one mug ($60) is suggested
    answer = Client(shopify).query(
        SUGGESTED, {"id": order.id, "lines": [{"lineItemId": order.lines[0].id, "quantity": 1}]}
    )

    # then the gift card's $20 first, then $40 of the card
    suggested = answer["data"]["order"]["suggestedRefund"]["suggestedTransactions"]
    assert [(t["parentTransaction"]["id"], t["amountSet"]["shopMoney"]["amount"]) for t in suggested] == [
        (gift.id, "20.0"),
        (card.id, "40.0"),
    ]


def test_refund_create_makes_one_refund_per_key(shopify):
    # given a split order and a refund of the gift card leg
    order = split_order(shopify)
    gift = order.txns[1]
    client = Client(shopify)
    variables = {"input": refund_input(order, (gift, "20.00")), "key": "approval-1"}

    # when the same refundCreate is sent twice with one key
    first = client.query(REFUND_CREATE, variables)["data"]["refundCreate"]
    again = client.query(REFUND_CREATE, variables)["data"]["refundCreate"]

    # then one refund, answered twice
    assert first["userErrors"] == []
    assert first["refund"]["totalRefundedSet"]["shopMoney"] == {"amount": "20.0", "currencyCode": "USD"}
    assert again["refund"]["id"] == first["refund"]["id"]
    assert len(order.refund_list) == 1
    assert order.refunded == 20
    assert [c["outcome"] for c in shopify.refund_creates] == ["created", "replayed"]
    assert shopify.refund_creates[0]["key"] == "approval-1"


def test_refund_create_with_a_used_key_and_other_input_is_refused(shopify):
    order = split_order(shopify)
    card = order.txns[0]
    client = Client(shopify)
    client.query(REFUND_CREATE, {"input": refund_input(order, (card, "10.00")), "key": "approval-1"})

    # when the key comes back with another amount
    answer = client.query(REFUND_CREATE, {"input": refund_input(order, (card, "11.00")), "key": "approval-1"})

    # then Shopify's idempotency error, and still one refund
    assert answer["data"] == {"refundCreate": None}
    [error] = answer["errors"]
    assert error["extensions"]["code"] == "IDEMPOTENCY_KEY_PARAMETER_MISMATCH"
    assert error["message"] == "The same idempotency key cannot be used with different operation parameters."
    assert len(order.refund_list) == 1


def test_refund_create_without_the_idempotent_directive_is_refused(shopify):
    order = split_order(shopify)
    mutation = REFUND_CREATE.replace(" @idempotent(key: $key)", "").replace(", $key: String!", "")

    answer = Client(shopify).query(mutation, {"input": refund_input(order, (order.txns[0], "10.00"))})

    assert answer["data"] == {"refundCreate": None}
    assert answer["errors"][0]["message"] == "The @idempotent directive is required for this mutation."
    assert order.refund_list == []
    assert shopify.refund_creates[0]["outcome"] == "missing_key"


def test_refund_create_user_errors(shopify):
    # given two orders of the shop; the second's card already fully refunded
    order = split_order(shopify)
    card, gift = order.txns
    other = split_order(shopify)
    client = Client(shopify)

    cases = {
        "more than the card can return": (
            refund_input(order, (card, "100.01")),
            ["transactions", "0", "amount"],
        ),
        "two legs on one payment, together too much": (
            refund_input(order, (gift, "15.00"), (gift, "15.00")),
            ["transactions", "1", "amount"],
        ),
        "a parent from another order": (
            {
                **refund_input(order, (card, "5.00")),
                "transactions": [
                    {
                        "orderId": order.id,
                        "parentId": other.txns[0].id,
                        "gateway": "shopify_payments",
                        "kind": "REFUND",
                        "amount": "5.00",
                    }
                ],
            },
            ["transactions", "0", "parentId"],
        ),
        "the gift card leg through the card's gateway": (
            {
                **refund_input(order),
                "transactions": [
                    {
                        "orderId": order.id,
                        "parentId": gift.id,
                        "gateway": "shopify_payments",
                        "kind": "REFUND",
                        "amount": "5.00",
                    }
                ],
            },
            ["transactions", "0", "gateway"],
        ),
        "more mugs than were bought": (
            refund_input(order, refundLineItems=[{"lineItemId": order.lines[0].id, "quantity": 3}]),
            ["refundLineItems", "0", "quantity"],
        ),
        "a zero amount": (refund_input(order, (card, "0")), ["transactions", "0", "amount"]),
        "a third decimal": (refund_input(order, (card, "1.005")), ["transactions", "0", "amount"]),
        "no such order": ({**refund_input(order), "orderId": "gid://shopify/Order/999999"}, ["orderId"]),
    }
    for i, (case, (bad_input, field)) in enumerate(cases.items()):
        # when it is sent
        payload = client.query(REFUND_CREATE, {"input": bad_input, "key": f"k{i}"})["data"]["refundCreate"]

        # then a userError on that field, no refund
        assert payload["refund"] is None, case
        assert [e["field"] for e in payload["userErrors"]] == [field], case
        assert payload["userErrors"][0]["message"], case
    assert order.refund_list == other.refund_list == []


def test_a_voided_payment_returns_nothing(shopify):
    order = split_order(shopify)
    card = order.txns[0]
    shopify.void_transaction(card)

    payload = Client(shopify).query(REFUND_CREATE, {"input": refund_input(order, (card, "1.00")), "key": "k"})

    assert payload["data"]["refundCreate"]["userErrors"][0]["field"] == ["transactions", "0", "amount"]
    assert order.refund_list == []


def test_a_lost_answer_then_a_retry_make_one_refund(shopify):
    # given Shopify makes the refund but the answer is lost
    order = split_order(shopify)
    client = Client(shopify)
    variables = {"input": refund_input(order, (order.txns[0], "40.00")), "key": "approval-7"}
    shopify.fail_next(status="drop")

    with pytest.raises(requests.ConnectionError):
        client.post(REFUND_CREATE, variables)
    assert len(order.refund_list) == 1  # made, unanswered

    # when the product retries with the same key
    retry = client.query(REFUND_CREATE, variables)["data"]["refundCreate"]

    # then the first refund is answered; there is still one
    assert retry["refund"]["id"] == order.refund_list[0].id
    assert len(order.refund_list) == 1
    assert order.refunded == 40
    assert [c["status"] for c in shopify.graphql_calls()] == ["dropped", 200]


@pytest.mark.parametrize("status", [500, 502, 503])
def test_a_server_error_does_nothing(shopify, status):
    order = split_order(shopify)
    client = Client(shopify)
    shopify.fail_next(status=status)

    response = client.post(REFUND_CREATE, {"input": refund_input(order, (order.txns[0], "5.00")), "key": "k"})

    assert response.status_code == status
    assert order.refund_list == []
    assert client.post("{ shop { name } }").status_code == 200


def test_a_slow_answer_times_the_client_out_but_the_work_is_done(shopify):
    order = split_order(shopify)
    client = Client(shopify)
    shopify.fail_next(status="slow", seconds=1.0)

    with pytest.raises(requests.Timeout):
        client.post(REFUND_CREATE, {"input": refund_input(order, (order.txns[0], "5.00")), "key": "k"}, timeout=0.3)

    deadline = time.monotonic() + 5
    while not order.refund_list and time.monotonic() < deadline:
        time.sleep(0.05)
    assert len(order.refund_list) == 1


def test_token_faults_are_separate(shopify):
    shopify.fail_next(status=503, on="token")

    assert take_token(shopify).status_code == 503
    assert take_token(shopify).status_code == 200


# -- webhooks ---------------------------------------------------------------------------------


class Receiver:
    """A local endpoint that keeps what was posted to it."""

    def __init__(self, status=200):
        self.received = []
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args):
                pass

            def do_POST(self):
                body = self.rfile.read(int(self.headers["Content-Length"]))
                receiver.received.append((dict(self.headers), body))
                self.send_response(status)
                self.send_header("Content-Length", "2")
                self.end_headers()
                self.wfile.write(b"ok")

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        threading.Thread(target=self.server.serve_forever, daemon=True).start()
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/webhooks/shopify"

    def close(self):
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def receiver():
    endpoint = Receiver()
    yield endpoint
    endpoint.close()


def test_webhooks_are_signed_with_the_apps_client_secret(shopify, receiver):
    order = split_order(shopify)

    status, body = shopify.send_webhook(
        receiver.url, "orders/updated", SHOP, shopify.order_webhook_payload(order), event_id="evt-1"
    )

    assert (status, body) == (200, "ok")
    [(headers, raw)] = receiver.received
    expected = base64.b64encode(hmac.new(b"secret-acme", raw, hashlib.sha256).digest()).decode()
    assert headers["X-Shopify-Hmac-Sha256"] == expected
    assert headers["X-Shopify-Topic"] == "orders/updated"
    assert headers["X-Shopify-Shop-Domain"] == SHOP
    assert headers["X-Shopify-Event-Id"] == "evt-1"
    assert headers["X-Shopify-API-Version"] == "2026-04"
    assert headers["X-Shopify-Webhook-Id"] and headers["X-Shopify-Triggered-At"]
    assert json.loads(raw)["admin_graphql_api_id"] == order.id


def test_webhook_signature_can_be_forged_or_left_out(shopify, receiver):
    payload = shopify.order_webhook_payload(split_order(shopify))

    shopify.send_webhook(receiver.url, "orders/create", SHOP, payload, secret="not-the-secret")
    shopify.send_webhook(receiver.url, "orders/create", SHOP, payload, hmac_override="AAAA")
    shopify.send_webhook(receiver.url, "orders/create", SHOP, payload, hmac_override="")

    good = base64.b64encode(hmac.new(b"secret-acme", receiver.received[0][1], hashlib.sha256).digest()).decode()
    signatures = [headers.get("X-Shopify-Hmac-Sha256") for headers, _ in receiver.received]
    assert signatures[0] != good
    assert signatures[1:] == ["AAAA", None]


def test_webhook_payloads_have_shopifys_rest_shapes(shopify):
    order = split_order(shopify)
    refund = shopify.refund_in_admin(order, "20.00", transaction=order.txns[1], line_items=[(order.lines[0], 1)])

    order_body = shopify.order_webhook_payload(order)
    refund_body = shopify.refund_webhook_payload(refund)

    assert order_body["id"] == 1001
    assert order_body["admin_graphql_api_id"] == "gid://shopify/Order/1001"
    assert order_body["name"] == "#1001"
    assert order_body["total_price"] == "120.00"
    assert order_body["currency"] == "USD"
    assert order_body["financial_status"] == "partially_refunded"
    assert order_body["customer"]["email"] == "ann@example.com"
    assert order_body["line_items"][0]["current_quantity"] == 1
    assert order_body["refunds"] == [refund_body]
    assert refund_body["order_id"] == 1001
    assert refund_body["transactions"][0]["kind"] == "refund"
    assert refund_body["transactions"][0]["parent_id"] == order.txns[1].num
    assert refund_body["transactions"][0]["amount"] == "20.00"
    assert refund_body["refund_line_items"][0]["line_item_id"] == order.lines[0].num


# -- admin changes ----------------------------------------------------------------------------


def test_admin_changes_show_in_the_order(shopify):
    order = split_order(shopify)
    client = Client(shopify)
    before = order.updated_at

    shopify.cancel_order(order, refund=True)
    read = client.query(ORDER_QUERY, {"id": order.id})["data"]["order"]

    assert read["cancelledAt"] is not None
    assert read["displayFinancialStatus"] == "REFUNDED"
    assert read["totalRefundedSet"]["shopMoney"]["amount"] == "120.0"
    assert read["updatedAt"] > before


# -- scale ------------------------------------------------------------------------------------


@pytest.mark.serial  # a wall-clock bound
def test_ten_thousand_orders_are_quick_to_build_and_to_page(fake_shopify):
    # given a bucket that never throttles, so only the fake's own work is timed
    fake_shopify.max_query_cost = 100_000
    fake_shopify.add_shop(SHOP, "client-acme", "secret-acme", bucket_size=100_000, restore_rate=100_000)

    started = time.perf_counter()
    for _ in range(10_000):
        split_order(fake_shopify)
    built = time.perf_counter() - started

    client = Client(fake_shopify)
    started = time.perf_counter()
    answer = client.query(
        """{ orders(first: 250, sortKey: UPDATED_AT, query: "updated_at:>='2020-01-01'") {
              nodes { id name updatedAt totalPriceSet { shopMoney { amount } }
                      transactions(first: 5) { id kind gateway amountSet { shopMoney { amount } } } }
              pageInfo { hasNextPage endCursor } } }"""
    )
    paged = time.perf_counter() - started

    assert len(answer["data"]["orders"]["nodes"]) == 250
    assert built < 5, built
    assert paged < 2, paged


# -- more edges -------------------------------------------------------------------------------


def test_the_same_refund_sent_at_once_from_many_threads_is_one_refund(shopify):
    # given five workers holding the same approved refund
    order = split_order(shopify)
    variables = {"input": refund_input(order, (order.txns[0], "25.00")), "key": "approval-9"}
    clients = [Client(shopify) for _ in range(5)]
    barrier = threading.Barrier(5)
    answers = [None] * 5

    def send(i):
        barrier.wait()
        answers[i] = clients[i].query(REFUND_CREATE, variables)["data"]["refundCreate"]

    # when they all send it together
    threads = [threading.Thread(target=send, args=(i,)) for i in range(5)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(10)

    # then one refund, the same answer to all
    assert len(order.refund_list) == 1
    assert {a["refund"]["id"] for a in answers} == {order.refund_list[0].id}
    assert sorted(c["outcome"] for c in shopify.refund_creates) == ["created"] + ["replayed"] * 4


def test_orders_page_backwards_and_from_the_end(shopify):
    orders = [shopify.add_order(SHOP, created_at=f"2026-04-01T10:00:0{i}Z") for i in range(5)]
    client = Client(shopify)
    newest_first = """query($after: String) { orders(first: 2, after: $after, sortKey: UPDATED_AT, reverse: true) {
        nodes { name } pageInfo { hasNextPage endCursor } } }"""
    last_two = "{ orders(last: 2, sortKey: CREATED_AT) { nodes { name } pageInfo { hasPreviousPage } } }"

    first = client.query(newest_first)["data"]["orders"]
    second = client.query(newest_first, {"after": first["pageInfo"]["endCursor"]})["data"]["orders"]
    tail = client.query(last_two)["data"]["orders"]

    names = [o.name for o in orders]
    assert [n["name"] for n in first["nodes"] + second["nodes"]] == names[::-1][:4]
    assert second["pageInfo"]["hasNextPage"] is True
    assert [n["name"] for n in tail["nodes"]] == names[3:]
    assert tail["pageInfo"]["hasPreviousPage"] is True


def test_a_page_size_is_required(shopify):
    answer = Client(shopify).query("{ orders { nodes { id } } }")

    assert answer["errors"][0]["message"] == "you must provide one of first or last"


def test_a_cursor_that_is_not_shopifys_is_refused(shopify):
    answer = Client(shopify).query(ORDERS_PAGE, {"first": 5, "after": "not-a-cursor"})

    assert answer["errors"][0]["message"].startswith("Invalid cursor")


def test_admin_refund_without_a_payment_spreads_like_a_suggestion(shopify):
    order = split_order(shopify)
    card, gift = order.txns

    refund = shopify.refund_in_admin(order, "110.00")

    assert [(t.parent, t.amount) for t in refund.txns] == [(card, 100), (gift, 10)]
    assert (card.remaining, gift.remaining) == (0, 10)
    with pytest.raises(ValueError):
        shopify.refund_in_admin(order, "10.01")


def test_customers_are_one_per_email_in_a_shop(shopify):
    first = split_order(shopify)
    second = split_order(shopify)
    elsewhere = split_order(shopify, shop=OTHER)

    assert first.customer is second.customer
    assert elsewhere.customer is not first.customer


def test_amounts_keep_the_shops_currency(fake_shopify):
    fake_shopify.add_shop(SHOP, "client-acme", "secret-acme", currency="JPY")
    order = fake_shopify.add_order(SHOP, line_items=[{"title": "Tea", "quantity": 1, "price": "1500"}])
    client = Client(fake_shopify)

    read = client.query(ORDER_QUERY, {"id": order.id})["data"]["order"]
    cents = client.query(REFUND_CREATE, {"input": refund_input(order, (order.txns[0], "10.50")), "key": "k"})

    assert read["currencyCode"] == "JPY"
    assert read["totalPriceSet"]["shopMoney"] == {"amount": "1500.0", "currencyCode": "JPY"}
    assert cents["data"]["refundCreate"]["userErrors"][0]["field"] == ["transactions", "0", "amount"]


def test_calls_are_recorded_and_delay_applies_to_each(shopify):
    client = Client(shopify)
    shopify.delay = 0.2

    started = time.perf_counter()
    client.post("{ shop { name } }")
    took = time.perf_counter() - started

    assert took >= 0.2
    assert [(c["endpoint"], c["shop"], c["status"]) for c in shopify.calls] == [
        ("token", SHOP, 200),
        ("graphql", SHOP, 200),
    ]
    assert shopify.calls[1]["token"] == client.token


def test_a_fault_can_wait_for_the_mutation(shopify):
    # given a lost answer meant for the refund, not the suggestion read before it
    order = split_order(shopify)
    client = Client(shopify)
    shopify.fail_next(status="drop", on="mutation")

    # when the product reads the suggestion, then refunds
    suggestion = client.post(SUGGESTED, {"id": order.id})
    with pytest.raises(requests.ConnectionError):
        client.post(REFUND_CREATE, {"input": refund_input(order, (order.txns[0], "5.00")), "key": "k"})

    # then the read was answered and the refund made, unanswered
    assert suggestion.status_code == 200
    assert len(order.refund_list) == 1
    with pytest.raises(ValueError):
        shopify.fail_next(on="refunds")


BULK_RUN = """
mutation Run($query: String!) {
  bulkOperationRunQuery(query: $query, groupObjects: true) {
    bulkOperation { id status }
    userErrors { code field message }
  }
}
"""
BULK_STATUS = "query B($id: ID!) { bulkOperation(id: $id) { id status errorCode objectCount url partialDataUrl } }"


@pytest.mark.parametrize(
    "query,message",
    [
        ("{ shop { name } }", "at least one connection"),
        ("{ orders { nodes { id refunds { id transactions { nodes { id } } } } } }", "within a list field"),
        ("{ orders { nodes { id misspelt } } }", "Cannot query field 'misspelt'"),
        ("{ orders { nodes { name lineItems { nodes { id } } } } }", "must select `id`"),
        ("fragment F on Order { refunds { transactions { nodes { id } } } } { orders { nodes { id ...F } } }", "list"),
    ],
)
def test_a_bulk_query_breaking_shopifys_rules_is_refused_with_user_errors(shopify, query, message):
    answer = Client(shopify).query(BULK_RUN, {"query": query})["data"]["bulkOperationRunQuery"]
    assert answer["bulkOperation"] is None and answer["userErrors"][0]["code"] == "INVALID"
    assert message in answer["userErrors"][0]["message"]
    assert shopify.bulk.operations == {}


def test_a_bulk_operation_writes_nested_nodes_as_lines_with_their_parent_id(shopify):
    # given two orders of two lines in one shop and one in another
    first, second = split_order(shopify), split_order(shopify)
    split_order(shopify, OTHER)
    client = Client(shopify)
    query = "{ orders { edges { node { id name transactions { kind } lineItems { nodes { id sku } } } } } }"
    operation = client.query(BULK_RUN, {"query": query})["data"]["bulkOperationRunQuery"]["bulkOperation"]
    assert operation["status"] == "CREATED"

    # when it is polled until it is finished
    seen = [client.query(BULK_STATUS, {"id": operation["id"]})["data"]["bulkOperation"] for _ in range(2)]

    # then it ran, then completed, its file one line per object, each line item after its order
    assert [s["status"] for s in seen] == ["RUNNING", "COMPLETED"] and seen[1]["objectCount"] == "4"
    lines = [json.loads(line) for line in requests.get(seen[1]["url"], timeout=5).text.splitlines()]
    assert [(line["id"], line.get("__parentId")) for line in lines] == [
        (first.id, None),
        (first.lines[0].id, first.id),
        (second.id, None),
        (second.lines[0].id, second.id),
    ]
    assert lines[0]["transactions"] == [{"kind": "SALE"}, {"kind": "SALE"}]  # a list stays inline
    # and another shop does not see the operation
    assert Client(shopify, OTHER, "client-other", "secret-other").query(BULK_STATUS, {"id": operation["id"]})[
        "data"
    ] == {"bulkOperation": None}


def test_a_failed_bulk_operation_has_its_code_and_partial_data(shopify):
    for _ in range(4):
        split_order(shopify)
    shopify.bulk.fail_next("TIMEOUT", partial=True)
    client = Client(shopify)
    operation = client.query(BULK_RUN, {"query": "{ orders { nodes { id } } }"})["data"]["bulkOperationRunQuery"]
    for _ in range(2):
        status = client.query(BULK_STATUS, {"id": operation["bulkOperation"]["id"]})["data"]["bulkOperation"]
    assert (status["status"], status["errorCode"], status["url"]) == ("FAILED", "TIMEOUT", None)
    assert len(requests.get(status["partialDataUrl"], timeout=5).text.splitlines()) == 2
