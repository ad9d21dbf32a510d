"""The ticket endpoints and the web form: strict money, control
characters, bounded pages and Idempotency-Key. Every refusal writes nothing."""

import json
import threading
from datetime import timedelta

import pytest
from django.core.management import call_command
from django.db import connection
from django.urls import reverse
from django.utils import timezone

from ledger.models import IdempotencyKey, Order
from refundagent.models import Ticket, TraceEvent

BODY = {"order": "ORD-5001", "customer": "CUST-1001", "message": "Broken headphones.", "requested_amount": "120.00"}


def post(client, body, **headers):
    return client.post("/api/tickets", body, content_type="application/json", headers=headers)


def written():
    return Ticket.objects.count(), TraceEvent.objects.count(), IdempotencyKey.objects.count()


BAD_AMOUNTS = [
    "1e30",
    "10000000000.00",  # 10^10: above the column (max_digits 12, 2 places)
    10**30,
    "100000000000000000000000000000",
    "１２０",  # fullwidth digits
    "٣",  # Arabic-Indic three
    "1e3",
    "1_0",
    True,
    False,
    12.5,
    120,
    "-5.00",
    "+5.00",
    "NaN",
    "Infinity",
    "1.234",
    " 12.00",
    "12.00\n",
    "12.",
    ".50",
    "0x10",
    "",
    "12,00",
    # more shapes Python reads as a number
    "1e2",
    "1_000",
    " 12 ",
    "-0",
    "0.004",  # finer than a cent: refused, never rounded
    "-Infinity",
]


@pytest.mark.parametrize("amount", BAD_AMOUNTS, ids=repr)
def test_a_bad_amount_is_a_422_naming_the_field_and_nothing_is_written(api_client, amount):
    # given support with a token, and the counts before
    client = api_client("acme-support")
    before = written()
    # when a ticket is filed with that amount
    response = post(client, {**BODY, "requested_amount": amount})
    # then 422 as a problem naming requested_amount, and nothing written
    assert response.status_code == 422, response.content
    assert response["Content-Type"].startswith("application/problem+json")
    problem = response.json()
    assert problem["code"] == "invalid_input"
    assert [e["field"] for e in problem["errors"]] == ["requested_amount"]
    assert "requested_amount" in problem["detail"]
    assert written() == before


@pytest.mark.parametrize("amount,shown", [("120", "120.00"), ("120.5", "120.50"), ("0120.00", "120.00")])
def test_a_strict_amount_is_taken(api_client, amount, shown, django_capture_on_commit_callbacks):
    client = api_client("acme-support")
    with django_capture_on_commit_callbacks(execute=False):
        response = post(client, {**BODY, "requested_amount": amount})
    assert response.status_code == 201, response.content
    assert response.json()["requested_amount"] == shown


def test_the_schema_carries_the_money_pattern(client):
    schema = client.get("/api/openapi.json").json()
    amount = schema["components"]["schemas"]["TicketIn"]["properties"]["requested_amount"]
    patterns = [s.get("pattern") for s in amount.get("anyOf", [amount])]
    assert r"^[0-9]{1,10}(\.[0-9]{1,2})?$" in patterns


@pytest.mark.parametrize("amount", ["1e3", "１２０", "10000000000.00", "-1", "1_0"])
def test_the_web_form_refuses_a_bad_amount(client, user, amount):
    # given support logged in to the web UI
    client.force_login(user("acme-support"))
    before = written()
    # when the new-ticket form is posted with that amount
    response = client.post(reverse("ticket_new"), {**BODY, "requested_amount": amount})
    # then the form comes back (422, as the web UI answers an invalid form) with an error on the amount
    assert response.status_code == 422
    assert "requested_amount" in response.context["form"].errors
    assert written() == before


# --- control characters: one middleware, every entry point ----------------------------


@pytest.mark.parametrize("field", ["message", "order", "customer", "refund_to"])
@pytest.mark.parametrize("char", ["\x00", "\x1b", "\x08"], ids=["NUL", "ESC", "BS"])
def test_a_control_character_in_a_json_string_is_a_400(api_client, field, char):
    client = api_client("acme-support")
    before = written()
    response = post(client, {**BODY, field: f"ORD{char}5001"})
    assert response.status_code == 400, response.content
    assert response["Content-Type"].startswith("application/problem+json")
    assert response.json()["code"] == "control_character"
    assert written() == before


def test_a_nul_in_a_list_item_or_a_key_is_a_400(api_client):
    client = api_client("acme-support")
    before = written()
    assert post(client, {**BODY, "items": ["ITEM-1", "I\x00"]}).status_code == 400
    assert post(client, {**BODY, "x\x00": "y"}).status_code == 400
    assert written() == before


def test_tab_newline_and_return_stay_allowed(api_client, django_capture_on_commit_callbacks):
    client = api_client("acme-support")
    with django_capture_on_commit_callbacks(execute=False):
        response = post(client, {**BODY, "message": "Line one\r\nline\ttwo"})
    assert response.status_code == 201, response.content


def test_a_raw_nul_byte_in_the_body_is_a_400(api_client):
    client = api_client("acme-support")
    before = written()
    response = client.post("/api/tickets", b'{"message": "a\x00b"}', content_type="application/json")
    assert response.status_code == 400
    assert written() == before


@pytest.mark.parametrize("content_type", ["text/plain", "application/x-www-form-urlencoded", ""])
@pytest.mark.parametrize("char", ["\x00", "\x1b"], ids=["NUL", "ESC"])
def test_a_json_control_escape_is_a_400_whatever_the_content_type(api_client, content_type, char):
    # given support with a token, and the counts before
    client = api_client("acme-support")
    before = written()
    # when a ticket's JSON body carries the escape, declared as something other than JSON
    # (the API parses the body as JSON whatever its Content-Type)
    body = json.dumps({**BODY, "message": f"broken{char}please refund"})  # as a \u0000 escape
    assert "\\u00" in body
    response = client.post("/api/tickets", body, content_type=content_type)
    # then 400 control_character, as for application/json, and nothing written
    # (a 500 DataError before)
    assert response.status_code == 400, response.content
    assert response.json()["code"] == "control_character"
    assert written() == before


@pytest.mark.parametrize(
    "url",
    [
        "/api/tickets?status=%00",
        "/api/tickets?limit=1%00",
        "/api/tickets?x%00=1",
        "/api/orders/ORD%005001/ledger",
        "/api/tickets/1%00",
    ],
)
def test_a_nul_in_the_query_string_or_the_path_is_a_400(api_client, url):
    response = api_client("acme-support").get(url)
    assert response.status_code == 400
    assert response.json()["code"] == "control_character"


def test_a_nul_in_the_web_form_is_a_400_and_no_ticket(client, user):
    client.force_login(user("acme-support"))
    before = written()
    response = client.post(reverse("ticket_new"), {**BODY, "message": "a\x00b"})
    assert response.status_code == 400
    assert written() == before


def test_a_nul_in_an_admin_list_filter_is_a_400(client, user):
    client.force_login(user("acme-lead"))
    response = client.get("/admin/refundagent/ticket/?status__exact=%00")
    assert response.status_code == 400
    response = client.get("/admin/refundagent/ticket/?q=a%00b")
    assert response.status_code == 400


# --- pages -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "query",
    [
        "limit=100000000000000000000",
        "limit=101",
        "limit=0",
        "limit=-1",
        "limit=abc",
        "limit=1.5",
        "offset=-1",
        "offset=100000000000000000000",
        "offset=abc",
    ],
)
@pytest.mark.parametrize("path", ["/api/tickets", "/api/approvals"])
def test_a_bad_page_is_a_422_naming_the_parameter(api_client, path, query):
    response = api_client("acme-lead").get(f"{path}?{query}")
    assert response.status_code == 422, response.content
    assert response.json()["errors"][0]["field"] == query.split("=")[0]


def test_a_page_of_100_is_fine(api_client):
    assert api_client("acme-lead").get("/api/tickets?limit=100&offset=5").status_code == 200


# --- Idempotency-Key ------------------------------------------------------------------------


def test_the_same_key_and_body_replays_the_first_response(api_client, django_capture_on_commit_callbacks):
    # given support who filed a ticket with a key
    client = api_client("acme-support")
    with django_capture_on_commit_callbacks(execute=False):
        first = post(client, BODY, **{"Idempotency-Key": "k-1"})
    assert first.status_code == 201
    # when the same request comes again (a retry), with its keys in another order
    with django_capture_on_commit_callbacks(execute=False) as callbacks:
        again = post(client, dict(reversed(BODY.items())), **{"Idempotency-Key": "k-1"})
    # then the first response, byte for byte, one ticket and no second agent run
    assert again.status_code == 201
    assert again.content == first.content
    assert again["Idempotent-Replayed"] == "true"
    assert Ticket.objects.count() == 1
    assert callbacks == []


def test_the_same_key_with_another_body_is_a_409(api_client, django_capture_on_commit_callbacks):
    client = api_client("acme-support")
    with django_capture_on_commit_callbacks(execute=False):
        assert post(client, BODY, **{"Idempotency-Key": "k-2"}).status_code == 201
    response = post(client, {**BODY, "requested_amount": "60.00"}, **{"Idempotency-Key": "k-2"})
    assert response.status_code == 409
    assert response.json()["code"] == "idempotency_key_reused"
    assert Ticket.objects.count() == 1


def test_a_key_belongs_to_its_user(api_client, django_capture_on_commit_callbacks):
    # given two support users of one tenant using the same key
    with django_capture_on_commit_callbacks(execute=False):
        first = post(api_client("acme-support"), BODY, **{"Idempotency-Key": "shared"})
        second = post(api_client("acme-lead"), BODY, **{"Idempotency-Key": "shared"})
    # then each got their own ticket
    assert first.status_code == second.status_code == 201
    assert first.json()["id"] != second.json()["id"]


def test_a_refused_request_is_replayed_too_and_a_bad_key_is_refused(api_client):
    client = api_client("acme-support")
    first = post(client, {**BODY, "requested_amount": "1e3"}, **{"Idempotency-Key": "k-3"})
    again = post(client, {**BODY, "requested_amount": "1e3"}, **{"Idempotency-Key": "k-3"})
    assert first.status_code == again.status_code == 422 and first.content == again.content
    assert post(client, BODY, **{"Idempotency-Key": "x" * 256}).status_code == 422
    assert Ticket.objects.count() == 0


def test_an_expired_key_may_be_used_again(api_client, django_capture_on_commit_callbacks):

    client = api_client("acme-support")
    with django_capture_on_commit_callbacks(execute=False):
        post(client, BODY, **{"Idempotency-Key": "old"})
        IdempotencyKey.objects.update(expires_at=timezone.now() - timedelta(seconds=1))
        again = post(client, BODY, **{"Idempotency-Key": "old"})
    assert again.status_code == 201 and not again.has_header("Idempotent-Replayed")
    assert Ticket.objects.count() == 2


@pytest.mark.django_db(transaction=True)
def test_concurrent_requests_with_one_key_create_one_ticket(api_client, settings):
    # given support, eight threads ready with one key and one body (the agent runs eagerly in the
    # thread that wins, so the others wait for its answer)
    settings.CELERY_TASK_ALWAYS_EAGER = True
    client = api_client("acme-support")
    barrier = threading.Barrier(8)
    responses = []

    def file():
        try:
            barrier.wait()
            responses.append(post(client, BODY, **{"Idempotency-Key": "race"}))
        finally:
            connection.close()

    threads = [threading.Thread(target=file) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    # then one ticket, and every thread got the same 201
    assert Ticket.objects.count() == 1
    assert [r.status_code for r in responses] == [201] * 8
    assert len({r.content for r in responses}) == 1
    assert sum(r.has_header("Idempotent-Replayed") for r in responses) == 7


def test_a_form_post_to_the_api_is_a_4xx_not_a_500(api_client):
    # the API takes JSON; a multipart post is refused cleanly, with or without a NUL in it
    client = api_client("acme-support")
    before = written()
    assert client.post("/api/tickets", {**BODY, "message": "a\x00b"}).status_code == 400
    response = client.post("/api/tickets", BODY)
    assert response.status_code == 400 and response["Content-Type"].startswith("application/problem+json")
    assert written() == before


def test_an_amount_finer_than_the_orders_currency_is_a_422(demo, api_client, django_capture_on_commit_callbacks):
    # given ORD-5001 in yen (no minor unit)

    Order.objects.filter(external_id="ORD-5001").update(currency="JPY")
    client = api_client("acme-support")
    before = written()
    # when a ticket asks for 120.50 or 1.5 yen, then 422 naming the field and nothing written
    for amount in ("120.50", "1.5"):
        response = post(client, {**BODY, "requested_amount": amount})
        assert response.status_code == 422
        assert response.json()["code"] == "amount_precision" and "requested_amount" in response.json()["detail"]
        assert written() == before
    # and whole yen are fine (written as "120.00" by the two-place column)
    with django_capture_on_commit_callbacks(execute=False):
        assert post(client, {**BODY, "requested_amount": "120"}).status_code == 201


def test_purge_deletes_only_expired_keys(user):

    now = timezone.now()
    IdempotencyKey.objects.create(user=user("acme-support"), key="old", request_hash="h", expires_at=now)
    IdempotencyKey.objects.create(
        user=user("acme-support"), key="new", request_hash="h", expires_at=now + timedelta(hours=1)
    )
    call_command("purge_idempotency_keys")
    assert list(IdempotencyKey.objects.values_list("key", flat=True)) == ["new"]


def test_a_throttled_or_forbidden_answer_is_not_kept_under_the_key(
    api_client, settings, django_capture_on_commit_callbacks
):
    # given finance (who may not file tickets) and a key
    forbidden = post(api_client("acme-finance"), BODY, **{"Idempotency-Key": "k-403"})
    assert forbidden.status_code == 403
    # given support over the rate limit
    settings.API_THROTTLE_RATE = "1/min"
    client = api_client("acme-support")
    client.get("/api/tickets")
    assert post(client, BODY, **{"Idempotency-Key": "k-429"}).status_code == 429
    # then neither key was kept: once the limit allows, the same key files the ticket
    assert not IdempotencyKey.objects.exists()
    settings.API_THROTTLE_RATE = "100/min"
    with django_capture_on_commit_callbacks(execute=False):
        assert post(client, BODY, **{"Idempotency-Key": "k-429"}).status_code == 201


def test_a_json_body_nested_too_deeply_is_a_400(api_client):
    client = api_client("acme-support")
    before = written()
    response = client.post("/api/tickets", "[" * 100_000 + "]" * 100_000, content_type="application/json")
    assert response.status_code == 400 and response.json()["code"] == "too_deep"
    assert written() == before
