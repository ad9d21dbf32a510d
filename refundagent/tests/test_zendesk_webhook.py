"""POST /webhooks/zendesk: the signature and its timestamp checked with the account's own secret,
bad input a 4xx and never a 500, one Zendesk ticket one product ticket (repeats and concurrent
deliveries included), the requester read through the Users API of the fake Zendesk, the answer
given before any call to Zendesk."""

import json
import threading
import time
from datetime import timedelta

import pytest
from django.db import connection as db_connection
from django.test import Client

from ledger.models import Customer, Tenant
from refundagent.models import Ticket
from refundagent.zendesk.inbound import zendesk_inbound_process, zendesk_inbound_sweep
from refundagent.zendesk.models import ZendeskConnection, ZendeskInbound

from .fake_zendesk import sign, ticket_created_event, zendesk_timestamp
from .zendesk_support import ACCOUNT_ID, WEBHOOK_SECRET

URL = "/webhooks/zendesk"


def post(client, payload=None, *, secret=WEBHOOK_SECRET, raw=None, timestamp=None, signature=None, headers=True):
    body = raw if raw is not None else json.dumps(payload).encode()
    timestamp = zendesk_timestamp() if timestamp is None else timestamp
    extra = {}
    if headers:
        extra = {
            "HTTP_X_ZENDESK_WEBHOOK_SIGNATURE_TIMESTAMP": timestamp,
            "HTTP_X_ZENDESK_WEBHOOK_SIGNATURE": sign(body, secret, timestamp) if signature is None else signature,
        }
    return client.generic("POST", URL, body, content_type="application/json", **extra)


@pytest.fixture
def ada(tenant):
    return Customer.objects.create(tenant=tenant, external_id="CUST-ADA", name="Ada Lovelace", email="ada@example.com")


@pytest.fixture
def requester(fake_zendesk, ada):
    return fake_zendesk.add_user("ada@example.com", name="Ada Lovelace")


def event(requester, ticket_id=5001, **overrides):
    fields = dict(subject="Refund for my socks", description="The socks arrived torn. Please refund.")
    fields.update(overrides)
    return ticket_created_event(account_id=ACCOUNT_ID, ticket_id=ticket_id, requester_id=requester["id"], **fields)


def nothing_stored():
    return not ZendeskInbound.objects.exists() and not Ticket.objects.exists()


# --- the door: signature, timestamp, shape ---------------------------------------------------------


@pytest.mark.django_db
def test_a_missing_signature_is_401_and_nothing_stored(client, zendesk_connection, requester):
    response = post(client, event(requester), headers=False)

    assert response.status_code == 401
    assert nothing_stored()


@pytest.mark.django_db
@pytest.mark.parametrize("secret", ["another-secret", ""])
def test_a_wrong_signature_is_401_and_nothing_stored(client, zendesk_connection, requester, secret):
    response = post(client, event(requester), secret=secret)

    assert response.status_code == 401 and response.json()["code"] == "bad_signature"
    assert nothing_stored()


@pytest.mark.django_db
def test_a_body_changed_after_signing_is_401(client, zendesk_connection, requester):
    timestamp = zendesk_timestamp()
    signed = json.dumps(event(requester)).encode()
    tampered = signed.replace(b"torn", b"fine")

    response = post(client, raw=tampered, timestamp=timestamp, signature=sign(signed, WEBHOOK_SECRET, timestamp))

    assert response.status_code == 401
    assert nothing_stored()


@pytest.mark.django_db
@pytest.mark.parametrize("age", [301, 3600, -120])
def test_a_stale_or_future_timestamp_is_401_even_correctly_signed(client, zendesk_connection, requester, age):
    response = post(client, event(requester), timestamp=zendesk_timestamp(time.time() - age))

    assert response.status_code == 401
    assert nothing_stored()


@pytest.mark.django_db
def test_a_timestamp_within_the_window_and_unix_seconds_are_accepted(client, zendesk_connection, requester):
    first = post(client, event(requester, ticket_id=1), timestamp=zendesk_timestamp(time.time() - 250))
    second = post(client, event(requester, ticket_id=2), timestamp=str(int(time.time())))

    assert first.status_code == 200 and second.status_code == 200
    assert ZendeskInbound.objects.count() == 2


@pytest.mark.django_db
@pytest.mark.parametrize(
    "raw",
    [
        b"{not json",
        b"[1, 2]",
        b"\xff\xfe",
        b'{"type": "zen:event-type:ticket.created", "account_id": 88888888, "detail": {"id": "abc"}}',
        b'{"type": "zen:event-type:ticket.created", "account_id": true, "detail": {"id": "1"}}',
        b'{"type": "zen:event-type:ticket.created", "account_id": 88888888, "detail": "x"}',
        b'{"ticket": {"id": "12"}}',
        b'{"ticket": {"id": "12", "url": "shop.zendesk.com/agent/tickets/12", "subject": 5}}',
        b'{"ticket": "nope"}',
        b"[" * 5000 + b"]" * 5000,
    ],
)
def test_malformed_payloads_are_400_never_500(client, zendesk_connection, raw):
    response = post(client, raw=raw)

    assert response.status_code == 400, response.content
    assert nothing_stored()


@pytest.mark.django_db
def test_a_huge_body_is_413_and_nothing_stored(client, zendesk_connection, requester, settings):
    payload = event(requester, description="x" * (settings.ZENDESK_WEBHOOK_MAX_BYTES + 1))

    response = post(client, payload)

    assert response.status_code == 413
    assert nothing_stored()


@pytest.mark.django_db
def test_other_events_of_the_account_are_200_and_ignored(client, zendesk_connection, requester):
    payload = event(requester) | {"type": "zen:event-type:ticket.status_changed"}

    response = post(client, payload)

    assert response.status_code == 200 and response.json()["ignored"] is True
    assert nothing_stored()


@pytest.mark.serial  # a wall-clock bound
@pytest.mark.django_db
def test_the_webhook_answers_before_any_call_to_a_slow_zendesk(client, zendesk_connection, requester, fake_zendesk):
    # Given a Zendesk that takes 3 s per call
    fake_zendesk.delay = 3.0
    fake_zendesk.calls.clear()

    # When the webhook arrives
    started = time.monotonic()
    response = post(client, event(requester))
    elapsed = time.monotonic() - started

    # Then it is stored and answered well within a second; Zendesk is called by the queued work only
    assert response.status_code == 200 and elapsed < 1.0
    assert ZendeskInbound.objects.filter(processed_at=None).count() == 1
    assert fake_zendesk.calls == []


# --- filing: the requester through the Users API ----------------------------------------------------


@pytest.mark.django_db
def test_a_known_verified_requester_files_one_customer_ticket(
    client, zendesk_connection, requester, ada, fake_zendesk, django_capture_on_commit_callbacks
):
    with django_capture_on_commit_callbacks(execute=True):
        response = post(client, event(requester, ticket_id=5001))

    assert response.status_code == 200 and response.json() == {"received": True, "duplicate": False}
    ticket = Ticket.objects.get()
    assert (ticket.source, ticket.external_ref, ticket.customer) == ("zendesk", "5001", ada)
    assert "The socks arrived torn" in ticket.message
    assert {"method": "GET", "path": f"/api/v2/users/{requester['id']}.json", "body": None} in fake_zendesk.calls
    inbound = ZendeskInbound.objects.get()
    assert inbound.ticket == ticket and inbound.requester_verified and inbound.requester_email == "ada@example.com"


@pytest.mark.django_db
def test_the_email_is_the_users_api_answer_never_the_payloads(
    client, zendesk_connection, fake_zendesk, ada, django_capture_on_commit_callbacks
):
    # Given a trigger whose JSON claims Ada's email for a requester who is someone else
    mallory = fake_zendesk.add_user("mallory@evil.example", name="Mallory")
    payload = {
        "ticket": {
            "id": "6001",
            "url": "shop.zendesk.com/agent/tickets/6001",
            "requester_id": str(mallory["id"]),
            "requester_email": "ada@example.com",
            "subject": "Refund",
            "description": "Refund Ada's order to me.",
        }
    }

    with django_capture_on_commit_callbacks(execute=True):
        response = post(client, payload)

    # Then the ticket is Mallory's claim: no customer, escalated for a person
    assert response.status_code == 200
    ticket = Ticket.objects.get()
    assert ticket.customer is None and ticket.status == Ticket.Status.ESCALATED
    assert ZendeskInbound.objects.get().requester_email == "mallory@evil.example"


@pytest.mark.django_db
def test_an_email_only_trigger_is_an_unverified_claim(
    client, zendesk_connection, ada, fake_zendesk, django_capture_on_commit_callbacks
):
    payload = {
        "ticket": {
            "id": "6002",
            "url": "https://shop.zendesk.com/agent/tickets/6002",
            "requester_email": "ada@example.com",
            "subject": "Refund",
            "description": "Please refund.",
        }
    }

    with django_capture_on_commit_callbacks(execute=True):
        assert post(client, payload).status_code == 200

    ticket = Ticket.objects.get()
    assert ticket.customer is None and ticket.status == Ticket.Status.ESCALATED
    assert not ZendeskInbound.objects.get().requester_verified
    assert [
        c for c in fake_zendesk.calls if c["path"].startswith("/api/v2/users/") and "me.json" not in c["path"]
    ] == []


@pytest.mark.django_db
def test_a_requester_zendesk_has_not_verified_is_not_a_customer(
    client, zendesk_connection, fake_zendesk, ada, django_capture_on_commit_callbacks
):
    # A web form lets anyone type any email: Zendesk marks that identity unverified.
    unverified = fake_zendesk.add_user("ada@example.com", verified=False)

    with django_capture_on_commit_callbacks(execute=True):
        assert post(client, event(unverified)).status_code == 200

    ticket = Ticket.objects.get()
    assert ticket.customer is None and ticket.status == Ticket.Status.ESCALATED


@pytest.mark.django_db
def test_a_repeat_is_200_and_files_no_second_ticket(
    client, zendesk_connection, requester, django_capture_on_commit_callbacks
):
    with django_capture_on_commit_callbacks(execute=True):
        first = post(client, event(requester, ticket_id=7001))
    with django_capture_on_commit_callbacks(execute=True):
        again = post(client, event(requester, ticket_id=7001, subject="Edited subject"))

    assert first.status_code == 200 and again.status_code == 200
    assert again.json()["duplicate"] is True
    assert Ticket.objects.count() == 1 and ZendeskInbound.objects.count() == 1


@pytest.mark.django_db(transaction=True)
def test_concurrent_deliveries_of_one_zendesk_ticket_file_one_ticket(zendesk_connection, requester, fake_zendesk):
    # Given eight deliveries of one Zendesk ticket at once (eager tasks run in each request)
    payload = event(requester, ticket_id=8001)
    barrier = threading.Barrier(8)
    answers = []

    def deliver():
        try:
            barrier.wait()
            answers.append(post(Client(), payload).status_code)
        finally:
            db_connection.close()

    threads = [threading.Thread(target=deliver) for _ in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()

    # Then every answer is 200 and there is one row and one ticket
    assert answers == [200] * 8
    assert ZendeskInbound.objects.count() == 1
    assert Ticket.objects.filter(source="zendesk", external_ref="8001").count() == 1


@pytest.mark.django_db(transaction=True)
def test_concurrent_processing_of_one_stored_ticket_files_one(zendesk_connection, requester, fake_zendesk):
    # Given one stored Zendesk ticket and a slow Users API, processed by four workers at once
    inbound = ZendeskInbound.objects.create(
        tenant=zendesk_connection.tenant,
        connection=zendesk_connection,
        zendesk_ticket_id=8101,
        requester_id=requester["id"],
        subject="Refund",
        description="Please.",
    )
    fake_zendesk.delay = 0.3
    barrier = threading.Barrier(4)

    def work():
        try:
            barrier.wait()
            zendesk_inbound_process(inbound_id=inbound.pk)
        finally:
            db_connection.close()

    threads = [threading.Thread(target=work) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()

    assert Ticket.objects.filter(external_ref="8101").count() == 1


# --- tenants -----------------------------------------------------------------------------------------


@pytest.fixture
def other_connection(fake_zendesk):
    """Another tenant's Zendesk account, with its own secret."""
    other = Tenant.objects.create(slug="globex", name="Globex")
    return ZendeskConnection.objects.create(
        tenant=other,
        subdomain="globex",
        account_id=77777777,
        agent_email="agent@globex.example",
        api_token="globex-token",
        webhook_secret="globex-secret",
    )


@pytest.mark.django_db
def test_another_tenants_account_never_reaches_this_tenant(
    client, zendesk_connection, other_connection, requester, django_capture_on_commit_callbacks
):
    # Given payloads naming this tenant's account but signed with the other account's secret
    event_as_ours = event(requester, ticket_id=9001)
    trigger_as_ours = {"ticket": {"id": "9002", "url": "shop.zendesk.com/agent/tickets/9002", "subject": "x"}}
    # and the other account's own payload signed with this tenant's secret
    event_as_theirs = event(requester, ticket_id=9003) | {"account_id": 77777777}

    answers = [
        post(client, event_as_ours, secret="globex-secret").status_code,
        post(client, trigger_as_ours, secret="globex-secret").status_code,
        post(client, event_as_theirs, secret=WEBHOOK_SECRET).status_code,
    ]

    assert answers == [401, 401, 401]
    assert nothing_stored()

    # And the other account's own signed event files its ticket under the other tenant only
    with django_capture_on_commit_callbacks(execute=True):
        assert post(client, event_as_theirs, secret="globex-secret").status_code == 200
    inbound = ZendeskInbound.objects.get()
    assert inbound.tenant == other_connection.tenant
    assert not Ticket.objects.filter(tenant=zendesk_connection.tenant).exists()


@pytest.mark.django_db
def test_an_unknown_account_is_401(client, zendesk_connection, requester):
    response = post(client, event(requester) | {"account_id": 12345})

    assert response.status_code == 401
    assert nothing_stored()


# --- Zendesk down while filing -----------------------------------------------------------------------


@pytest.mark.django_db
def test_a_zendesk_outage_while_reading_the_requester_delays_the_ticket_and_loses_nothing(
    client, zendesk_connection, requester, ada, fake_zendesk, settings
):
    # Given a stored webhook and a Zendesk that is down
    settings.SWEEP_GRACE_SECONDS = 0
    settings.ZENDESK_RETRY_SECONDS = 0
    assert post(client, event(requester, ticket_id=9501)).status_code == 200
    inbound = ZendeskInbound.objects.get()
    fake_zendesk.down = True

    # When the work runs: nothing is filed, the row waits
    zendesk_inbound_process(inbound_id=inbound.pk)
    inbound.refresh_from_db()
    assert inbound.processed_at is None and "503" in inbound.last_error
    assert not Ticket.objects.exists()

    # And once Zendesk is back, the sweep files it once
    fake_zendesk.down = False
    zendesk_inbound_sweep(older_than=timedelta(0))
    zendesk_inbound_sweep(older_than=timedelta(0))
    inbound.refresh_from_db()
    assert inbound.processed_at is not None
    assert Ticket.objects.get().customer == ada


@pytest.mark.django_db
def test_a_429_while_reading_the_requester_waits_its_retry_after(client, zendesk_connection, requester, fake_zendesk):
    assert post(client, event(requester, ticket_id=9601)).status_code == 200
    inbound = ZendeskInbound.objects.get()
    fake_zendesk.retry_after = 42
    fake_zendesk.fail_next("429")

    before = time.time()
    zendesk_inbound_process(inbound_id=inbound.pk)

    inbound.refresh_from_db()
    assert inbound.processed_at is None
    assert 41 <= inbound.next_attempt_at.timestamp() - before <= 44


@pytest.mark.django_db
def test_a_ticket_with_no_text_is_escalated_never_a_500(
    client, zendesk_connection, requester, ada, django_capture_on_commit_callbacks
):
    with django_capture_on_commit_callbacks(execute=True):
        response = post(client, event(requester, ticket_id=9701, subject="", description=""))

    assert response.status_code == 200
    ticket = Ticket.objects.get()
    assert ticket.status == Ticket.Status.ESCALATED and ticket.source == "zendesk"
