"""POST /webhooks/stripe: signature checked by the SDK, each event once, any order, external refunds recorded."""

import json
import time
from decimal import Decimal

import pytest
from django.test import Client
from django.test.client import BOUNDARY, encode_multipart

from ledger.exceptions import PaymentProviderUnavailable
from ledger.gateways import ProviderRefund
from ledger.models import ReconciliationFinding, RefundEntry, RefundEntryEvent, Tenant, WebhookEvent
from ledger.payouts import ledger_refund_payout
from ledger.reconciliation import provider_refund_reconcile
from ledger.selectors import order_refund_position
from ledger.services import ledger_refund_issue
from ledger.tests.fake_stripe import sign_webhook
from ledger.webhooks import webhook_event_process

SECRET = "whsec_test_secret"
counter = iter(range(1, 1_000_000))


def event(type_, obj, event_id=None):
    return {
        "id": event_id or f"evt_{next(counter)}",
        "object": "event",
        "type": type_,
        "data": {"object": obj},
        "api_version": "2025-01-01",
        "created": 1_700_000_000,
    }


def post(payload, secret=SECRET, signature=None, timestamp=None):
    body = json.dumps(payload).encode()
    headers = {} if signature == "" else {"HTTP_STRIPE_SIGNATURE": signature or sign_webhook(body, secret, timestamp)}
    return Client().post("/webhooks/stripe", data=body, content_type="application/json", **headers)


@pytest.fixture
def deliver(django_capture_on_commit_callbacks):
    """Post an event and run what its commit enqueues (the processing task, eagerly)."""

    def send(payload, **kwargs):
        with django_capture_on_commit_callbacks(execute=True):
            return post(payload, **kwargs)

    return send


@pytest.mark.parametrize("signature", ["", "t=1,v1=deadbeef", None])
def test_a_bad_or_missing_signature_answers_400_and_writes_nothing(fake_stripe, make_order, deliver, signature):
    order = make_order("100.00", payment_ref="pi_sig")
    refund = fake_stripe.add_refund(payment_intent="pi_sig", amount=1000)
    payload = event("refund.created", fake_stripe.public(refund))
    kwargs = {"secret": "whsec_someone_else"} if signature is None else {"signature": signature}
    response = deliver(payload, **kwargs)
    assert response.status_code == 400
    assert not WebhookEvent.objects.exists() and not RefundEntry.objects.filter(order=order).exists()


YEAR = 365 * 24 * 3600


@pytest.mark.parametrize(
    "age", [10 * YEAR, 301, -301, -10 * YEAR], ids=["10y-old", "301s-old", "301s-ahead", "10y-ahead"]
)
def test_a_signature_outside_the_tolerance_answers_400_and_writes_nothing(fake_stripe, make_order, deliver, age):
    # given a refund Stripe really made, and an event about it correctly signed
    order = make_order("100.00", payment_ref="pi_old")
    refund = fake_stripe.add_refund(payment_intent="pi_old", amount=1000)
    # when its signature's timestamp is more than 300 s away from now (a replay, or a forged clock)
    response = deliver(event("refund.created", fake_stripe.public(refund)), timestamp=int(time.time()) - age)
    # then 400, and nothing is written
    assert response.status_code == 400
    assert not WebhookEvent.objects.exists() and not RefundEntry.objects.filter(order=order).exists()


def test_the_tolerance_is_a_setting(fake_stripe, make_order, deliver, settings):
    make_order("100.00", payment_ref="pi_tol")
    refund = fake_stripe.public(fake_stripe.add_refund(payment_intent="pi_tol", amount=1000))
    # a signature 250 s old is in Stripe's default 300 s
    assert deliver(event("refund.created", refund), timestamp=int(time.time()) - 250).status_code == 200
    # and not in 200 s
    settings.STRIPE_WEBHOOK_TOLERANCE_SECONDS = 200
    assert deliver(event("refund.created", refund), timestamp=int(time.time()) - 250).status_code == 400
    assert WebhookEvent.objects.count() == 1


@pytest.mark.parametrize("signed", [False, True], ids=["any-signature", "signed"])
def test_a_form_post_answers_400_and_writes_nothing(fake_stripe, db, signed):
    # given a multipart form post: anyone can send one with any Stripe-Signature
    body = encode_multipart(BOUNDARY, {"id": "evt_form", "type": "refund.created"})
    signature = sign_webhook(body, SECRET) if signed else "t=1,v1=deadbeef"
    # when it reaches the view, which reads the raw body after the middleware read the form
    response = Client(raise_request_exception=False).post(
        "/webhooks/stripe",
        data=body,
        content_type=f"multipart/form-data; boundary={BOUNDARY}",
        **{"HTTP_STRIPE_SIGNATURE": signature},
    )
    # then 400 (a 500 before: reading the form had consumed the stream), and nothing written
    assert response.status_code == 400
    assert not WebhookEvent.objects.exists()


def post_signed(body: bytes, content_type: str):
    return Client(raise_request_exception=False).post(
        "/webhooks/stripe", data=body, content_type=content_type, HTTP_STRIPE_SIGNATURE=sign_webhook(body, SECRET)
    )


@pytest.mark.parametrize("content_type", ["text/plain", "application/octet-stream", ""])
def test_a_signed_nul_escape_answers_400_whatever_the_content_type(fake_stripe, db, content_type):
    # given a correctly signed event with a \u0000 escape, declared as something other than JSON
    body = b'{"id": "evt_nul", "type": "customer.created", "data": {"object": {"id": "cus_\\u0000"}}}'
    # when it is delivered, then 400 and nothing stored (a 500 before: a DataError)
    assert post_signed(body, content_type).status_code == 400
    assert not WebhookEvent.objects.exists()


def test_a_signed_body_nested_too_deeply_answers_400_whatever_the_content_type(fake_stripe, db):
    # given a correctly signed body of 100,000 nested lists, declared as text/plain
    body = b'{"id": "evt_deep", "x": ' + b"[" * 100_000 + b"]" * 100_000 + b"}"
    # when it is delivered, then 400 and nothing stored (a RecursionError, a 500, before)
    assert post_signed(body, "text/plain").status_code == 400
    assert not WebhookEvent.objects.exists()


def test_a_refund_made_by_hand_becomes_an_external_entry_and_a_finding(fake_stripe, make_order, deliver, tenant):
    # given an order, and a 40.00 refund someone made by hand in the Stripe dashboard
    order = make_order("100.00", payment_ref="pi_hand")
    refund = fake_stripe.add_refund(payment_intent="pi_hand", amount=4000)
    # when Stripe tells us
    response = deliver(event("refund.created", fake_stripe.public(refund)))
    # then the ledger holds it as external, counting, flagged for review
    assert response.status_code == 200
    entry = RefundEntry.objects.get(order=order)
    assert (entry.status, entry.amount, entry.provider_ref, entry.needs_review, entry.source) == (
        "external",
        Decimal("40.00"),
        refund["id"],
        True,
        "external",
    )
    assert order_refund_position(order).refundable == Decimal("60.00")
    # and finance has a finding to review
    finding = ReconciliationFinding.objects.get()
    assert (finding.kind, finding.entry, finding.tenant, finding.resolved_at) == (
        "missing_in_ledger",
        entry,
        tenant,
        None,
    )
    assert WebhookEvent.objects.get().processed_at is not None


def test_a_replayed_event_is_a_no_op(fake_stripe, make_order, deliver):
    order = make_order("100.00", payment_ref="pi_replay")
    refund = fake_stripe.add_refund(payment_intent="pi_replay", amount=1500)
    payload = event("refund.created", fake_stripe.public(refund))
    assert deliver(payload).json() == {"received": True, "duplicate": False}
    # when the same event arrives again
    response = deliver(payload)
    # then it answers 200 and nothing more is written
    assert response.status_code == 200 and response.json()["duplicate"] is True
    assert WebhookEvent.objects.count() == 1
    assert RefundEntry.objects.filter(order=order).count() == 1
    assert RefundEntryEvent.objects.filter(entry__order=order).count() == 1
    assert ReconciliationFinding.objects.count() == 1


def test_events_out_of_order_never_move_an_entry_back(fake_stripe, make_order, deliver, settings):
    # given our refund was made at Stripe but its answer was lost: the entry is pending, no provider id
    settings.STRIPE_MAX_NETWORK_RETRIES = 0
    order = make_order("100.00", payment_ref="pi_order")
    entry = ledger_refund_issue(
        order=order, amount="30.00", currency="USD", idempotency_key="k-order", source="approval", approval_ref="5"
    )
    fake_stripe.fail_next("drop")
    with pytest.raises(PaymentProviderUnavailable):
        ledger_refund_payout(entry_id=entry.pk)
    [refund] = fake_stripe.refunds.values()
    succeeded = fake_stripe.public(refund)
    pending = dict(succeeded, status="pending")
    # when refund.updated (succeeded) arrives before refund.created (pending)
    deliver(event("refund.updated", succeeded))
    deliver(event("refund.created", pending))
    # then the entry is succeeded, found by its metadata, and the late event changed nothing
    entry.refresh_from_db()
    assert (entry.status, entry.provider_ref) == ("succeeded", refund["id"])
    assert [(e.from_status, e.to_status, e.source) for e in entry.events.all()] == [
        ("", "pending", "issue"),
        ("pending", "succeeded", "webhook"),
    ]
    assert not ReconciliationFinding.objects.exists()
    # and a later failure at Stripe is recorded: the amount is refundable again
    deliver(event("refund.failed", dict(succeeded, status="failed", failure_reason="expired_or_canceled_card")))
    entry.refresh_from_db()
    assert entry.status == "failed" and "expired_or_canceled_card" in entry.events.last().reason
    assert order_refund_position(order).refundable == Decimal("100.00")


def test_an_external_refund_reported_twice_out_of_order_is_one_entry(fake_stripe, make_order, deliver):
    order = make_order("100.00", payment_ref="pi_twice")
    refund = fake_stripe.public(fake_stripe.add_refund(payment_intent="pi_twice", amount=2000))
    deliver(event("refund.updated", refund))
    deliver(event("refund.created", dict(refund, status="pending")))
    assert list(RefundEntry.objects.filter(order=order).values_list("status", flat=True)) == ["external"]
    assert ReconciliationFinding.objects.count() == 1


def test_charge_refunded_without_embedded_refunds_asks_the_provider(fake_stripe, make_order, deliver):
    order = make_order("100.00", payment_ref="ch_abc")
    fake_stripe.add_refund(charge="ch_abc", amount=2500)
    deliver(event("charge.refunded", {"id": "ch_abc", "object": "charge", "amount_refunded": 2500}))
    assert RefundEntry.objects.get(order=order).amount == Decimal("25.00")
    assert [c["params"].get("charge") for c in fake_stripe.calls] == ["ch_abc"]


def test_an_event_of_no_interest_is_stored_and_ignored(fake_stripe, deliver, db):
    response = deliver(event("customer.created", {"id": "cus_1", "object": "customer"}))
    assert response.status_code == 200
    assert WebhookEvent.objects.get().result == "ignored"


def test_each_configured_secret_is_accepted(fake_stripe, make_order, deliver, settings):
    # given a platform endpoint and a Connect endpoint, each with its own signing secret
    settings.STRIPE_WEBHOOK_SECRET = f"whsec_platform, {SECRET}"
    make_order("100.00", payment_ref="pi_two")
    refund = fake_stripe.public(fake_stripe.add_refund(payment_intent="pi_two", amount=100))
    assert deliver(event("refund.created", refund), secret="whsec_platform").status_code == 200
    assert deliver(event("refund.created", refund)).status_code == 200
    assert deliver(event("refund.created", refund), secret="whsec_other").status_code == 400
    assert WebhookEvent.objects.count() == 2


# --- which entry an event's refund is: never by an empty key, never across accounts ---------------


def written_pending(order, key="k-nid"):
    """A refund just written pending, its payout not made yet: no provider id."""
    entry = ledger_refund_issue(
        order=order, amount="30.00", currency="USD", idempotency_key=key, source="approval", approval_ref=key
    )
    assert (entry.status, entry.provider_ref) == ("pending", "")
    return entry


@pytest.mark.parametrize("status", ["succeeded", "failed"])
def test_a_refund_without_an_id_matches_no_entry(fake_stripe, make_order, status):
    # given an entry still without a provider id (its payout not made, or its answer lost)
    entry = written_pending(make_order("100.00", payment_ref="pi_nid"))
    # when a refund with no id, of the same shop and account, is applied to the ledger
    refund = ProviderRefund(provider_ref="", status=status, amount=Decimal("30.00"), currency="USD")
    matched, outcome = provider_refund_reconcile(refund=refund, event_ref="evt_nid")
    # then it is no entry of ours, and nothing is written: no status event, no finding
    assert (matched, outcome) == (None, "ignored")
    entry.refresh_from_db()
    assert (entry.status, entry.events.count()) == ("pending", 1)
    assert not ReconciliationFinding.objects.exists()


def test_an_id_less_succeeded_event_never_marks_an_unpaid_refund_paid(fake_stripe, make_order, deliver):
    # given a refund written pending, its payout not made yet
    order = make_order("100.00", payment_ref="pi_unpaid")
    entry = written_pending(order)
    # when a signed refund.updated whose refund has no id says succeeded
    refund = {"object": "refund", "amount": 3000, "currency": "usd", "status": "succeeded", "metadata": {}}
    response = deliver(event("refund.updated", refund))
    # then it is refused as malformed, nothing stored
    assert response.status_code == 400 and not WebhookEvent.objects.exists()
    # and the entry is still pending, and the payout really pays it at Stripe
    entry.refresh_from_db()
    assert entry.status == "pending"
    assert ledger_refund_payout(entry_id=entry.pk).status == "succeeded"
    assert len(fake_stripe.posts()) == 1


def test_an_id_less_failed_event_never_makes_a_refund_refundable_again(fake_stripe, make_order, deliver):
    # given a refund written pending, and another shop on its own connected account
    order = make_order("100.00", payment_ref="pi_victim")
    entry = written_pending(order)
    Tenant.objects.create(slug="other", name="Other", stripe_account="acct_other")
    # when that account's signed refund.failed, its refund without an id, arrives
    refund = {"object": "refund", "amount": 3000, "currency": "usd", "status": "failed", "metadata": {}}
    response = deliver(dict(event("refund.failed", refund), account="acct_other"))
    # then it is refused as malformed, nothing stored, and our entry still counts: the 30.00 is
    # not refundable again
    assert response.status_code == 400 and not WebhookEvent.objects.exists()
    entry.refresh_from_db()
    assert entry.status == "pending"
    assert order_refund_position(order).refundable == Decimal("70.00")


def test_another_accounts_event_never_moves_our_entry_even_with_its_id(fake_stripe, make_order, deliver):
    # given our refund paid at Stripe on the platform account
    order = make_order("100.00", payment_ref="pi_ours")
    entry = ledger_refund_payout(entry_id=written_pending(order).pk)
    assert (entry.status, entry.provider_ref[:3]) == ("succeeded", "re_")
    Tenant.objects.create(slug="other", name="Other", stripe_account="acct_other")
    # when an event from another account names the same refund id as failed
    refund = dict(fake_stripe.public(fake_stripe.refunds[entry.provider_ref]), status="failed")
    deliver(dict(event("refund.failed", refund), account="acct_other"))
    # then it is not our refund: the entry stays succeeded and the amount stays refunded
    entry.refresh_from_db()
    assert entry.status == "succeeded"
    assert order_refund_position(order).refundable == Decimal("70.00")


# --- the shape of what the product acts on: checked before anything is stored ----------------------

REFUND = {
    "id": "re_shape",
    "object": "refund",
    "amount": 1000,
    "currency": "usd",
    "status": "succeeded",
    "payment_intent": "pi_shape",
    "charge": None,
    "metadata": {"ledger_entry": "1"},
    "created": 1_700_000_000,
    "failure_reason": None,
}
WITHOUT_ID = {k: v for k, v in REFUND.items() if k != "id"}
MALFORMED = {
    "data-a-string": {"type": "refund.updated", "data": "garbage"},
    "object-a-string": {"type": "refund.updated", "data": {"object": "garbage"}},
    "no-data": {"type": "refund.created"},
    "refund-without-id": event("refund.updated", WITHOUT_ID),
    "refund-with-empty-id": event("refund.updated", dict(REFUND, id="")),
    "refund-id-longer-than-its-column": event("refund.updated", dict(REFUND, id="re_" + "x" * 200)),
    "amount-a-string": event("refund.updated", dict(REFUND, amount="abc")),
    "amount-a-numeric-string": event("refund.updated", dict(REFUND, amount="1000")),
    "amount-a-boolean": event("refund.updated", dict(REFUND, amount=True)),
    "amount-negative": event("refund.updated", dict(REFUND, amount=-1000)),
    "amount-beyond-the-ledger": event("refund.updated", dict(REFUND, amount=10**12)),
    "currency-missing": event("refund.updated", {k: v for k, v in REFUND.items() if k != "currency"}),
    "currency-not-a-code": event("refund.updated", dict(REFUND, currency=["usd"])),
    "status-a-list": event("refund.updated", dict(REFUND, status=["succeeded"])),
    "metadata-a-list": event("refund.updated", dict(REFUND, metadata=["a"])),
    "metadata-a-number": event("refund.updated", dict(REFUND, metadata={"ledger_entry": 1})),
    "payment-intent-a-number": event("refund.updated", dict(REFUND, payment_intent=5)),
    "created-not-a-timestamp": event("refund.updated", dict(REFUND, created="yesterday")),
    "created-beyond-any-date": event("refund.updated", dict(REFUND, created=10**20)),
    "charge-without-id": event("charge.refunded", {"object": "charge"}),
    "charge-id-not-a-charge": event("charge.refunded", {"id": "cus_1", "object": "charge"}),
    "charge-refunds-not-refunds": event("charge.refunded", {"id": "ch_1", "refunds": {"data": ["x"]}}),
    "charge-refunds-without-id": event("charge.refunded", {"id": "ch_1", "refunds": {"data": [WITHOUT_ID]}}),
}


@pytest.mark.parametrize("payload", MALFORMED.values(), ids=MALFORMED.keys())
def test_a_signed_but_malformed_event_answers_400_and_stores_nothing(fake_stripe, deliver, db, payload):
    # given a correctly signed event of a type the product acts on, its refund or charge malformed
    payload = {"id": f"evt_{next(counter)}", "object": "event", **payload}
    # when it is delivered
    response = deliver(payload)
    # then 400 naming what is wrong, and nothing stored: before, it was stored and its
    # processing task crashed on every retry of the sweep
    assert response.status_code == 400, response.content
    assert response.json()["error"]
    assert not WebhookEvent.objects.exists() and not RefundEntry.objects.exists()


def test_a_well_formed_event_with_fields_the_product_does_not_read_is_taken(fake_stripe, make_order, deliver):
    # given a refund event as Stripe sends it, with fields the ledger does not read, and its
    # payment intent expanded
    make_order("100.00", payment_ref="pi_shape")
    refund = dict(REFUND, payment_intent={"id": "pi_shape", "object": "payment_intent"}, destination_details={})
    # when it is delivered, then it is taken and recorded
    assert deliver(event("refund.created", refund)).status_code == 200
    assert RefundEntry.objects.get().provider_ref == "re_shape"


def test_an_event_the_product_ignores_is_not_checked_beyond_its_envelope(fake_stripe, deliver, db):
    response = deliver({"id": "evt_other", "type": "customer.updated", "data": "anything"})
    assert response.status_code == 200
    assert WebhookEvent.objects.get().result == "ignored"


BEYOND_THE_DATABASE = {
    "NaN": b'{"id": "evt_nan", "type": "customer.created", "x": NaN}',
    "Infinity": b'{"id": "evt_inf", "type": "customer.created", "x": Infinity}',
    "-Infinity": b'{"id": "evt_minf", "type": "customer.created", "x": -Infinity}',
    "1e400": b'{"id": "evt_e400", "type": "customer.created", "x": 1e400}',
    "lone-surrogate": b'{"id": "evt_sur", "type": "customer.created", "x": "\\ud800"}',
    "id-too-long": json.dumps({"id": "evt_" + "x" * 200, "type": "customer.created"}).encode(),
    "type-too-long": json.dumps({"id": "evt_type", "type": "x" * 300}).encode(),
    "account-too-long": json.dumps(
        {"id": "evt_acct", "type": "customer.created", "account": "acct_" + "x" * 200}
    ).encode(),
    "id-a-number": b'{"id": 5, "type": "customer.created"}',
    "a-list": b"[]",
}


@pytest.mark.parametrize("body", BEYOND_THE_DATABASE.values(), ids=BEYOND_THE_DATABASE.keys())
def test_a_signed_body_the_database_cannot_store_answers_400(fake_stripe, db, body):
    # given a correctly signed body that json.loads accepts but a column or the JSON type refuses
    # (a 500 before: PostgreSQL's json type, a varchar(100))
    response = post_signed(body, "application/json")
    # then 400, and nothing stored
    assert response.status_code == 400, response.content
    assert not WebhookEvent.objects.exists()


def test_a_malformed_event_stored_before_the_check_is_marked_processed_not_retried_forever(db):
    # given an event stored before its shape was checked (its processing task crashed on every retry)
    stored = WebhookEvent.objects.create(
        event_id="evt_old_bad", type="refund.updated", payload={"id": "evt_old_bad", "data": {"object": "garbage"}}
    )
    # when the sweep enqueues it again
    processed = webhook_event_process(webhook_event_id=stored.pk)
    # then it is processed, as malformed, with no effect: the sweep stops sending it
    assert processed.processed_at is not None and processed.result.startswith("malformed")
    assert not RefundEntry.objects.exists()
