"""GET /api/orders/{order}/ledger: authenticated by token or session, scoped to the caller's tenant."""

from io import StringIO

import pytest
from django.core.management import CommandError, call_command
from django.test import Client

from ledger.models import ApiToken, Membership, Order, Tenant
from ledger.services import ledger_refund_correct, ledger_refund_issue
from ledger.tenancy import api_token_create


def test_a_user_reads_their_own_tenants_order_ledger(api_client, demo):
    # given ORD-5005 with the seed's 50.00 refund, corrected to 45.00
    entry = Order.objects.get(external_id="ORD-5005").refund_entries.get()
    ledger_refund_correct(entry=entry, new_amount="45.00", reason="fee")

    # when acme support reads it
    response = api_client("acme-support").get("/api/orders/ORD-5005/ledger")

    # then the ledger is there, money as two-place strings
    assert response.status_code == 200
    body = response.json()
    assert (body["order"], body["total"], body["currency"], body["refunded_total"]) == (
        "ORD-5005",
        "200.00",
        "USD",
        "45.00",
    )
    [row] = body["entries"]
    # (the entry's status is its payment state, docs/api.md Payments; the correction is its own flag)
    assert (row["refund_id"], row["amount"], row["status"], row["corrected"]) == (entry.pk, "45.00", "succeeded", True)
    assert row["revisions"][0]["old_amount"] == "50.00" and row["revisions"][0]["new_amount"] == "45.00"


@pytest.mark.parametrize("username", ["globex-support", "globex-finance"])
def test_another_tenants_order_answers_404(api_client, demo, username):
    response = api_client(username).get("/api/orders/ORD-5001/ledger")

    assert response.status_code == 404
    assert "ORD-5001" in response.json()["detail"]
    assert "120.00" not in response.content.decode()


def test_an_order_of_globex_is_visible_to_globex_only(api_client, demo):
    assert api_client("globex-support").get("/api/orders/ORD-7001/ledger").status_code == 200
    assert api_client("acme-lead").get("/api/orders/ORD-7001/ledger").status_code == 404


@pytest.mark.parametrize(
    "headers",
    [
        {},
        {"HTTP_AUTHORIZATION": "Bearer ra_forged-token"},
        {"HTTP_AUTHORIZATION": "Bearer "},
        {"HTTP_AUTHORIZATION": "Basic YWNtZTpkZW1v"},
    ],
    ids=["none", "forged", "empty", "basic"],
)
def test_no_token_or_a_forged_one_answers_401(demo, headers):
    response = Client(**headers).get("/api/orders/ORD-5001/ledger")

    assert response.status_code == 401
    assert response.json()["code"] == "unauthenticated"


def test_a_token_from_create_api_token_authenticates(demo, user):
    # when the command makes a token
    out = StringIO()
    call_command("create_api_token", "acme-finance", stdout=out)
    token = out.getvalue().strip().splitlines()[-1]

    # then the last line is the token alone, it authenticates, and only its hash is stored
    assert token.startswith("ra_") and " " not in token
    response = Client(HTTP_AUTHORIZATION=f"Bearer {token}").get("/api/orders/ORD-5001/ledger")
    assert response.status_code == 200
    stored = ApiToken.objects.get(user=user("acme-finance"))
    assert token not in (stored.key_hash, stored.prefix) and stored.last_used_at is not None


def test_a_token_s_last_use_is_written_at_most_once_a_minute(demo, user):
    from datetime import timedelta

    from django.db import connection
    from django.test.utils import CaptureQueriesContext
    from django.utils import timezone

    # given a token, used once
    out = StringIO()
    call_command("create_api_token", "acme-finance", stdout=out)
    client = Client(HTTP_AUTHORIZATION=f"Bearer {out.getvalue().strip().splitlines()[-1]}")
    assert client.get("/api/orders/ORD-5001/ledger").status_code == 200
    first = ApiToken.objects.get(user=user("acme-finance")).last_used_at

    # when it is used again at once, then no UPDATE is written and the date stays
    with CaptureQueriesContext(connection) as queries:
        assert client.get("/api/orders/ORD-5001/ledger").status_code == 200
    assert not [q for q in queries if q["sql"].startswith('UPDATE "ledger_apitoken"')]
    assert ApiToken.objects.get(user=user("acme-finance")).last_used_at == first

    # and when its last use is two minutes old, the next use writes the new date
    ApiToken.objects.filter(user=user("acme-finance")).update(last_used_at=timezone.now() - timedelta(minutes=2))
    assert client.get("/api/orders/ORD-5001/ledger").status_code == 200
    assert timezone.now() - ApiToken.objects.get(user=user("acme-finance")).last_used_at < timedelta(seconds=30)


def test_a_revoked_token_or_an_inactive_user_answers_401(api_client, demo, user):
    client = api_client("acme-support")
    assert client.get("/api/orders/ORD-5001/ledger").status_code == 200

    acme = user("acme-support")
    acme.is_active = False
    acme.save()

    assert client.get("/api/orders/ORD-5001/ledger").status_code == 401


def test_create_api_token_for_an_unknown_user_fails(db):
    with pytest.raises(CommandError, match="No user named 'nobody'"):
        call_command("create_api_token", "nobody")
    assert not ApiToken.objects.exists()


def test_the_session_of_the_web_ui_authenticates(demo, user):
    client = Client()
    client.force_login(user("acme-support"))

    assert client.get("/api/orders/ORD-5001/ledger").status_code == 200
    assert client.get("/api/orders/ORD-7001/ledger").status_code == 404


def test_a_user_without_a_role_is_refused(demo, django_user_model):
    nobody = django_user_model.objects.create(username="no-role")
    Membership.objects.create(user=nobody, tenant=Tenant.objects.get(slug="acme"))
    client = Client(HTTP_AUTHORIZATION=f"Bearer {api_token_create(user=nobody)}")

    response = client.get("/api/orders/ORD-5001/ledger")

    assert response.status_code == 403
    assert response.json()["code"] == "role_required"


def test_a_tokens_roles_are_read_with_it_on_every_request(api_client, demo, user):
    """The roles come with the token's own query, never from an earlier request: a role taken
    away counts from the next request on."""
    from django.contrib.auth.models import Group

    client = api_client("acme-support")
    body = {"order": "ORD-5001", "customer": "CUST-1001", "message": "Broken."}
    assert client.post("/api/tickets", body, content_type="application/json").status_code == 201

    user("acme-support").groups.remove(Group.objects.get(name="support"))

    response = client.post("/api/tickets", body, content_type="application/json")
    assert response.status_code == 403
    assert response.json()["code"] == "role_required"


def test_an_item_refund_shows_its_items(api_client, demo):
    order = Order.objects.get(external_id="ORD-5005")
    ledger_refund_issue(order=order, amount="50.00", currency="USD", idempotency_key="i", item_ids=["ITEM-6", "ITEM-6"])

    body = api_client("acme-finance").get("/api/orders/ORD-5005/ledger").json()

    assert body["entries"][-1]["items"] == ["ITEM-6", "ITEM-6"]
    assert body["refundable"] == "100.00"
