"""An Idempotency-Key replay is answered only to a caller who may make the request now: the role
check runs again (ledger/tenancy.py ROLE_RULES) and the replay counts against the rate limit."""

import pytest

from ledger.models import IdempotencyKey
from refundagent.models import Ticket

BODY = {"order": "ORD-5001", "customer": "CUST-1001", "message": "Broken headphones.", "requested_amount": "120.00"}


def post(client, **headers):
    return client.post("/api/tickets", BODY, content_type="application/json", headers=headers)


@pytest.fixture
def filed(api_client, user, django_capture_on_commit_callbacks):
    """acme-support's client, after filing BODY under the key k-1 (201)."""
    client = api_client("acme-support")
    with django_capture_on_commit_callbacks(execute=False):
        first = post(client, **{"Idempotency-Key": "k-1"})
    assert first.status_code == 201
    return client


def test_a_user_whose_role_was_removed_gets_no_replay(filed, user):
    # given support's role is taken away after the ticket was filed under a key
    support = user("acme-support")
    support.groups.remove(support.groups.get(name="support"))
    # when they replay the key: the same 403 a fresh POST gets, not the stored 201 with the ticket
    replay = post(filed, **{"Idempotency-Key": "k-1"})
    fresh = post(filed, **{"Idempotency-Key": "k-2"})
    assert replay.status_code == fresh.status_code == 403
    assert replay.json()["code"] == fresh.json()["code"] == "role_required"
    assert not replay.has_header("Idempotent-Replayed")
    assert "Broken headphones" not in replay.content.decode()
    # nothing was written, and the stored answer stays for when the role comes back
    assert Ticket.objects.count() == 1
    assert IdempotencyKey.objects.filter(key="k-1", status_code=201).exists()
    assert not IdempotencyKey.objects.filter(key="k-2").exists()


def test_a_user_moved_out_of_every_tenant_gets_no_replay(filed, user):
    user("acme-support").membership.delete()

    replay = post(filed, **{"Idempotency-Key": "k-1"})

    assert replay.status_code == 403
    assert replay.json()["code"] == "no_tenant"
    assert not replay.has_header("Idempotent-Replayed")


def test_a_replay_counts_against_the_rate_limit(filed, settings):
    # given a limit of three requests a minute, one spent on the first POST
    settings.API_THROTTLE_RATE = "3/min"
    # when the key is replayed again and again
    answers = [post(filed, **{"Idempotency-Key": "k-1"}).status_code for _ in range(3)]
    # then two replays fit, the third is throttled, and so is any other call after it
    assert answers == [201, 201, 429]
    assert filed.get("/api/tickets").status_code == 429
    assert Ticket.objects.count() == 1


def test_a_throttled_replay_says_when_to_retry(filed, settings):
    settings.API_THROTTLE_RATE = "1/min"

    replay = post(filed, **{"Idempotency-Key": "k-1"})

    assert replay.status_code == 429
    assert replay.json()["code"] == "throttled"
    assert int(replay["Retry-After"]) > 0
