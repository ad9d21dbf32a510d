"""The 201 of POST /api/tickets is built from the ticket just filed, not read back: its body must
be byte for byte what GET /api/tickets/{id} answers right after, whatever the ticket's shape."""

import pytest

GIFT_CARD = "gift_card_cust-1001"


@pytest.mark.parametrize(
    "body",
    [
        {"order": "ORD-5001", "customer": "CUST-1001", "message": "Broken headphones."},
        {"order": "ORD-5001", "customer": "CUST-1001", "message": "x", "requested_amount": "200.00"},
        {"order": "ORD-5001", "customer": "CUST-1001", "message": "x", "requested_amount": "7.5"},
        {"order": "ORD-5001", "customer": "CUST-1001", "message": "x", "requested_amount": "12"},
        {"order": "ORD-5005", "customer": "CUST-1001", "message": "Socks.", "items": ["ITEM-6", " ITEM-6 ", ""]},
        {
            "order": "ORD-5005",
            "customer": "CUST-1001",
            "message": "Socks.",
            "items": ["ITEM-6"],
            "refund_to": GIFT_CARD,
        },
        {"order": "ORD-5001", "customer": "CUST-1001", "message": "y", "refund_to": " card_4242 "},
        # Customer-level: no order, no currency.
        {"customer": "CUST-1001", "message": "Which order? I do not remember.", "requested_amount": "10"},
        {"order": None, "customer": "CUST-1001", "message": "z", "items": [], "refund_to": None},
        {
            "order": " ORD-5001 ",
            "customer": "CUST-1001",
            "message": '  Ünïcödé "quotes" \\ <b>&amp;</b> \u2028 \U0001f600 €200\ttab\nnewline  ',
        },
    ],
)
def test_the_filing_answer_is_what_the_ticket_reads_right_after(demo, api_client, body):
    client = api_client("acme-support")

    filed = client.post("/api/tickets", body, content_type="application/json")
    assert filed.status_code == 201, filed.content
    read = client.get(f"/api/tickets/{filed.json()['id']}")

    assert read.status_code == 200
    assert filed.content == read.content
    assert filed["Content-Type"] == read["Content-Type"]


def test_a_filing_reads_only_what_it_checks(demo, api_client, django_assert_num_queries):
    """The token with its user's roles, the order with its customer, then the ticket and its
    filed event, written in a savepoint here (the test's transaction is the outer one)."""
    client = api_client("acme-support")
    client.get("/api/tickets")  # the token's first use notes its last_used_at (once a minute)

    with django_assert_num_queries(6):
        filed = client.post(
            "/api/tickets",
            {"order": "ORD-5001", "customer": "CUST-1001", "message": "x"},
            content_type="application/json",
        )

    assert filed.status_code == 201
