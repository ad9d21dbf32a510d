"""Mail to a tenant's support address, posted as Postmark and Mailgun post it to anymail's inbound
webhooks: who the sender is decides whether the agent may touch it; a reply joins its ticket;
nothing bad gets in or is stored twice (docs/inbox.md)."""

import json
import threading

import pytest
from django.db import connection
from django.test import Client

from ledger.models import Customer, Tenant
from refundagent.inbox.services import inbox_address_set
from refundagent.models import Ticket, TicketMessage

from .inbox_support import (
    INBOX,
    basic_auth,
    mailgun_fields,
    mailgun_mime_fields,
    new_message_id,
    post_mailgun,
    post_postmark,
    postmark_payload,
)

pytestmark = pytest.mark.django_db


def nothing_stored():
    return not Ticket.objects.exists() and not TicketMessage.objects.exists()


# --- filing -------------------------------------------------------------------------------------


def test_mail_from_a_known_customer_files_one_queued_customer_ticket(
    client, inbox, customer, make_user, api_client, django_capture_on_commit_callbacks
):
    # Given Ada's mail to the shop's support address, with a photo attached
    payload = postmark_payload(attachments=[("kettle.jpg", b"\xff\xd8 jpeg bytes", "image/jpeg")])

    # When Postmark posts it
    with django_capture_on_commit_callbacks() as handed_over:
        response = post_postmark(client, payload)

    # Then one customer-level ticket of hers is queued for the agent (the outbox's hand-off)
    assert response.status_code == 200
    ticket = Ticket.objects.get()
    assert (ticket.source, ticket.customer, ticket.order, ticket.status) == ("email", customer, None, "queued")
    assert len(handed_over) == 1
    # and the API shows where it came from and the conversation, with the attachment's name only
    detail = api_client(make_user("support-1", "support")).get(f"/api/tickets/{ticket.pk}").json()
    assert detail["source"] == "email" and detail["customer"] == "CUST-1" and detail["created_by"] is None
    [message] = detail["messages"]
    assert (message["direction"], message["from"]) == ("in", "ada@example.com")
    assert message["text"] == "My kettle arrived broken. Please refund it."
    assert TicketMessage.objects.get().attachments == [{"name": "kettle.jpg", "size": 13, "content_type": "image/jpeg"}]


def test_mail_from_an_unknown_sender_is_escalated_without_a_customer(client, inbox, customer):
    response = post_postmark(client, postmark_payload(sender="mallory@example.net"))

    assert response.status_code == 200
    ticket = Ticket.objects.get()
    assert ticket.customer is None and ticket.status == Ticket.Status.ESCALATED
    assert "no customer has this email address" in ticket.stop_detail


@pytest.mark.parametrize("spf", ["Fail", "SoftFail", "Neutral", "None", None])
def test_a_postmark_spf_verdict_other_than_pass_escalates_even_a_known_address(client, inbox, customer, spf):
    response = post_postmark(client, postmark_payload(spf=spf))

    assert response.status_code == 200
    ticket = Ticket.objects.get()
    assert ticket.customer is None and ticket.status == Ticket.Status.ESCALATED
    assert "the sender's address could not be verified" in ticket.stop_detail


def test_forged_authentication_headers_do_not_outvote_the_providers_verdict(client, inbox, customer):
    # Given a forger's mail in Ada's name: Postmark's SPF verdict fails, and the message carries
    # its own "pass" headers below Postmark's
    payload = postmark_payload(
        spf="Fail",
        extra_headers=[
            ("Authentication-Results", "mx.example.com; spf=pass; dkim=pass; dmarc=pass header.from=example.com"),
            ("Received-SPF", "Pass (forged by the sender)"),
        ],
    )

    post_postmark(client, payload)

    assert Ticket.objects.get().customer is None


def test_a_pass_for_another_domain_than_the_from_address_is_no_verification(client, inbox, customer):
    # The forger's own domain passes SPF; the From header names Ada.
    post_postmark(client, postmark_payload(return_path="bounce@forger.example.net"))

    ticket = Ticket.objects.get()
    assert ticket.customer is None and "could not be verified" in ticket.stop_detail


def test_mailgun_parsed_form_files_a_known_customers_ticket(client, inbox, customer):
    response = post_mailgun(client, mailgun_fields())

    assert response.status_code == 200
    ticket = Ticket.objects.get()
    assert (ticket.source, ticket.customer, ticket.status) == ("email", customer, "queued")


@pytest.mark.parametrize(("spf", "dkim"), [("Fail", "Pass"), ("Pass", "Fail"), ("SoftFail", "Pass"), ("Pass", "None")])
def test_a_mailgun_spf_or_dkim_failure_escalates(client, inbox, customer, spf, dkim):
    post_mailgun(
        client,
        mailgun_fields(spf=spf, dkim=dkim, extra_headers=[("Authentication-Results", "spf=pass; dkim=pass")]),
    )

    ticket = Ticket.objects.get()
    assert ticket.customer is None and ticket.status == Ticket.Status.ESCALATED


def test_mailgun_raw_mime_files_the_ticket_with_its_attachment_listed(client, inbox, customer):
    response = post_mailgun(client, mailgun_mime_fields(), path="inbound_mime")

    assert response.status_code == 200
    ticket = Ticket.objects.get()
    assert ticket.customer == customer and ticket.status == "queued"
    [attachment] = TicketMessage.objects.get().attachments
    assert attachment["name"] == "kettle.png" and attachment["content_type"] == "image/png"


def test_a_message_with_no_text_is_an_escalated_ticket(client, inbox, customer):
    response = post_postmark(client, postmark_payload(text="", subject=""))

    assert response.status_code == 200
    ticket = Ticket.objects.get()
    assert ticket.status == Ticket.Status.ESCALATED and "no text" in ticket.stop_detail


# --- threading and duplicates ------------------------------------------------------------------


def test_a_reply_by_in_reply_to_joins_its_ticket_and_files_nothing(client, inbox, customer):
    first_id = new_message_id()
    post_postmark(client, postmark_payload(message_id=first_id))

    post_postmark(
        client,
        postmark_payload(
            subject="Re: Broken kettle", text="Here is the order number.", extra_headers=[("In-Reply-To", first_id)]
        ),
    )
    post_mailgun(client, mailgun_fields(text="And a photo.", extra_headers=[("References", f"<x@y> {first_id}")]))

    ticket = Ticket.objects.get()
    assert [m.text for m in ticket.messages.all()] == [
        "My kettle arrived broken. Please refund it.",
        "Here is the order number.",
        "And a photo.",
    ]


def test_a_subject_token_joins_only_the_senders_own_ticket(client, inbox, customer, tenant):
    post_postmark(client, postmark_payload())
    ada_ticket = Ticket.objects.get()
    Customer.objects.create(tenant=tenant, external_id="CUST-2", name="Bob", email="bob@example.com")

    post_postmark(client, postmark_payload(subject=f"Re: [#{ada_ticket.pk}] kettle", text="Ada again"))
    post_postmark(client, postmark_payload(sender="bob@example.com", subject=f"[#{ada_ticket.pk}]", text="Bob"))

    assert list(ada_ticket.messages.values_list("text", flat=True)) == [
        "My kettle arrived broken. Please refund it.",
        "Ada again",
    ]
    assert Ticket.objects.get(customer__external_id="CUST-2").messages.get().text == "Bob"


def test_one_message_id_delivered_twice_is_stored_once(client, inbox, customer):
    payload = postmark_payload()

    first = post_postmark(client, payload)
    again = post_postmark(client, payload)

    assert first.status_code == again.status_code == 200
    assert Ticket.objects.count() == 1 and TicketMessage.objects.count() == 1


@pytest.mark.django_db(transaction=True)
def test_one_message_posted_at_once_by_two_workers_is_one_ticket(settings):
    # Given a committed tenant with its address and customer (each thread has its own connection)
    settings.CELERY_TASK_ALWAYS_EAGER = False
    tenant = Tenant.objects.create(slug="race", name="Race")
    Customer.objects.create(tenant=tenant, external_id="C-1", name="Ada", email="ada@example.com")
    from .inbox_support import MAILGUN_SIGNING_KEY, WEBHOOK_SECRET

    settings.ANYMAIL = {"WEBHOOK_SECRET": WEBHOOK_SECRET, "MAILGUN_WEBHOOK_SIGNING_KEY": MAILGUN_SIGNING_KEY}
    inbox_address_set(tenant=tenant, address=INBOX)
    body = json.dumps(postmark_payload(text="")).encode()  # escalated: no agent run to wait for
    barrier = threading.Barrier(4)
    answers = []

    def deliver():
        try:
            barrier.wait()
            answers.append(post_postmark(Client(), None, raw=body).status_code)
        finally:
            connection.close()

    threads = [threading.Thread(target=deliver) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()

    assert answers == [200] * 4
    assert Ticket.objects.count() == 1 and TicketMessage.objects.count() == 1


# --- bad input ----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "auth",
    [{}, basic_auth("inbox-hook:wrong"), {"HTTP_AUTHORIZATION": "Bearer inbox-hook:s3cret-basic-auth"}],
    ids=["missing", "wrong", "not-basic"],
)
def test_wrong_or_missing_basic_auth_is_401_and_stores_nothing(client, inbox, customer, auth):
    postmark = post_postmark(client, postmark_payload(), auth=auth)
    mailgun = post_mailgun(client, mailgun_fields(), auth=auth)

    assert postmark.status_code == mailgun.status_code == 401
    assert postmark["WWW-Authenticate"].startswith("Basic")
    assert nothing_stored()


def test_a_wrong_mailgun_signature_is_401_and_stores_nothing(client, inbox, customer):
    fields = mailgun_fields()
    forged = {**fields, "timestamp": "1700000000", "token": "a" * 50, "signature": "0" * 64}

    assert post_mailgun(client, forged, signed=False).status_code == 401
    assert nothing_stored()


def test_without_a_configured_secret_the_inbox_is_closed(client, inbox, customer, settings):
    settings.ANYMAIL = {}

    assert post_postmark(client, postmark_payload(), auth={}).status_code == 401
    assert nothing_stored()


@pytest.mark.parametrize(
    "raw",
    [
        b"{not json",
        b"\xff\xfe\x00",
        b'{"Headers": "not a list", "FromFull": {"Email": "ada@example.com"}}',
        b'{"Attachments": [{"Name": "x", "Content": "!!!not base64", "ContentType": "text/plain"}]}',
        b'{"RecordType": "Delivery"}',
    ],
    ids=["json", "bytes", "headers", "base64", "tracking"],
)
def test_a_malformed_payload_is_4xx_and_stores_nothing(client, inbox, customer, raw):
    response = post_postmark(client, None, raw=raw)

    assert 400 <= response.status_code < 500, response.content
    assert nothing_stored()


def test_a_huge_body_is_413_and_stores_nothing(client, inbox, customer, settings):
    settings.INBOX_MAX_BODY_BYTES = 50_000

    response = post_postmark(client, postmark_payload(text="x" * 60_000))

    assert response.status_code == 413
    assert nothing_stored()


# --- tenants ------------------------------------------------------------------------------------


def test_another_tenants_address_never_reaches_this_tenant(client, inbox, customer, tenant):
    # Given another shop with its own address, where Ada is no customer
    other = Tenant.objects.create(slug="other", name="Other")
    inbox_address_set(tenant=other, address="help@other.example.com")

    # When Ada writes to the other shop, and a forger sets our address in To while the envelope
    # goes elsewhere
    post_postmark(client, postmark_payload(to="help@other.example.com"))
    post_postmark(client, postmark_payload(to=INBOX, original_recipient="someone@unknown.example.org"))

    # Then only the other shop has a ticket, with no customer (Ada is not theirs)
    ticket = Ticket.objects.get()
    assert ticket.tenant == other and ticket.customer is None
    assert not Ticket.objects.filter(tenant=tenant).exists()


def test_without_an_envelope_recipient_the_to_header_names_the_tenant(client, inbox, customer, tenant):
    post_postmark(client, postmark_payload(original_recipient=""))

    assert Ticket.objects.get().tenant == tenant
