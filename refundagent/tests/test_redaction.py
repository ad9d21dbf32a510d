"""No customer email, name or payment reference anywhere in stored trace events, whatever the
ticket text or the model puts in its calls."""

import json

from ledger.models import Order
from refundagent.agent.loop import agent_run_ticket
from refundagent.agent.providers.offline import OfflineProvider
from refundagent.agent.providers.scripted import ScriptedProvider
from refundagent.models import TraceEvent
from refundagent.redaction import redact_text
from refundagent.services import ticket_create
from refundagent.tracing import trace_export


def _secrets():
    order = Order.objects.select_related("customer").get(external_id="ORD-5001")
    customer = order.customer
    return [
        customer.email,
        customer.name,
        "Jane",
        *order.payments.values_list("payment_ref", flat=True),
        *customer.payment_methods.values_list("external_id", flat=True),
    ]


def _stored_text(ticket) -> str:
    rows = TraceEvent.objects.filter(ticket=ticket).values("reason", "decision", "tool", "status", "data")
    return json.dumps(list(rows), default=str)


def test_no_contact_data_or_payment_reference_is_stored_in_a_trace(user):
    # given a ticket whose text carries the customer's email, name and payment reference
    secrets = _secrets()
    message = (
        f"I am {secrets[1]} ({secrets[0]}), paid with {secrets[3]} via {secrets[4]}. Card 4242 4242 4242 "
        "4242. Also mail me at other.person@example.org."
    )
    ticket = ticket_create(user=user("acme-support"), order="ORD-5001", customer="CUST-1001", message=message)
    # and a model that echoes all of it into its calls and its text
    echo = {"to": secrets[0], "body": message, "ref": secrets[3]}
    turns = [
        {"text": f"Customer {secrets[1]} <{secrets[0]}>", "tool": "email_send_customer_message", "input": echo},
        {"tool": "refunds_issue_refund", "input": {"order_id": "ORD-5001", "payment_ref": secrets[3]}},
        {"tool": "orders_lookup_order", "input": {"order_id": "ORD-5001"}},
        {"tool": "payments_get_summary", "input": {"order_id": "ORD-5001"}},
        {"tool": "refund_policy_retrieve", "input": {}},
        {
            "tool": "refunds_create_draft",
            "input": {
                "recommendation": "refund",
                "amount": "120.00",
                "policy_version": "refund-policy-v4",
                "rationale": f"Paid by {secrets[3]} ({secrets[4]}), contact {secrets[0]}.",
                "customer_reply": f"Dear {secrets[1]}, we passed your request to finance.",
            },
        },
    ]

    agent_run_ticket(ticket_id=ticket.pk, provider=ScriptedProvider(turns))

    stored = _stored_text(ticket)
    assert TraceEvent.objects.filter(ticket=ticket).count() > 8
    for secret in [*secrets, "other.person@example.org", "4242 4242 4242 4242"]:
        assert secret.lower() not in stored.lower(), secret
    assert json.dumps(trace_export(ticket)).lower().count("jane") == 0


def test_an_offline_run_stores_no_secrets_either(user):
    secrets = _secrets()
    ticket = ticket_create(
        user=user("acme-support"), order="ORD-5001", customer="CUST-1001", message=f"Refund please, {secrets[0]}"
    )

    agent_run_ticket(ticket_id=ticket.pk, provider=OfflineProvider())

    stored = _stored_text(ticket)
    for secret in secrets:
        assert secret.lower() not in stored.lower(), secret


def test_name_parts_are_redacted_as_whole_words_only():
    assert redact_text("Doe does it", ["Doe"]) == "[redacted] does it"
    assert redact_text("mail jane.doe@example.com", []) == "mail [email]"


def test_the_values_loaded_with_the_ticket_are_the_ones_a_query_reads(user, django_assert_num_queries):
    # given an order ticket and a customer-level one of a customer with payments and methods
    from refundagent.models import Ticket
    from refundagent.redaction import sensitive_values_annotations, sensitive_values_for_ticket

    support = user("acme-support")
    on_order = ticket_create(user=support, order="ORD-5001", customer="CUST-1001", message="Refund please.")
    customer_level = ticket_create(user=support, customer="CUST-1001", message="Refund my order please.")
    annotations = sensitive_values_annotations()
    for ticket in (on_order, customer_level):
        # when the run reads the ticket with its values, and when they are read on their own
        loaded = Ticket.objects.select_related("order__customer", "customer").annotate(**annotations).get(pk=ticket.pk)
        plain = Ticket.objects.select_related("order__customer", "customer").get(pk=ticket.pk)
        queried = sensitive_values_for_ticket(plain)
        # then both give the same values (each payment reference, card and method id included),
        # and the loaded ticket needs no query for them
        with django_assert_num_queries(0):
            from_load = sensitive_values_for_ticket(loaded)
        assert sorted(from_load) == sorted(queried)
        secrets = set(_secrets()) - {"Jane"}  # the order's payment refs, the method ids, contact data
        assert secrets <= set(from_load), secrets - set(from_load)
        assert "4242" in from_load
