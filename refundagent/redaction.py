"""Redaction of customer contact data and payment identifiers, applied to every trace event
before it is stored. Known values (the ticket's customer, the order's payment references)
are replaced exactly; patterns catch the rest (emails, card-like numbers, processor refs).

Redaction cannot be turned against the audit trail: the structured decision
fields of an event (amounts, currency, policy version, decision, codes, hashes; STRUCTURED_KEYS)
are never altered, and customer data is matched as whole values (the full name, the email, a
payment reference) or, for the words of the name, as whole words that are not the runtime's own
vocabulary (currency codes, decisions): a customer named "Mallory refund-policy-v4 USD 12.00
approve" loses "Mallory" and the full name, never the amount, currency, version or decision.
A card's last four digits are customer data too: traces keep brand and kind only."""

import functools
import re
from typing import Any

from django.conf import settings
from django.contrib.postgres.expressions import ArraySubquery
from django.contrib.postgres.fields import ArrayField
from django.db.models import Case, JSONField, OuterRef, When
from django.db.models.functions import Coalesce, JSONObject

from ledger.models import Payment, PaymentMethod

REDACTED = "[redacted]"

_PATTERNS = [
    (re.compile(r"[A-Za-z0-9._%+-]+@[A-Za-z0-9.-]+\.[A-Za-z]{2,}"), "[email]"),
    # Stripe-like processor references (pi_, ch_, re_, py_, tok_ ...).
    (re.compile(r"\b(?:pi|ch|re|py|tok|src|pm|txn)_[A-Za-z0-9]{8,}\b"), "[payment_ref]"),
    # Card numbers (13-19 digits, spaces or dashes allowed).
    (re.compile(r"\b(?:\d[ -]?){12,18}\d\b"), "[card_number]"),
    # The shop's payment method ids (τ-bench style), e.g. credit_card_7815826, paypal_5727330.
    (re.compile(r"\b(?:credit_card|paypal|gift_card)_\d{4,}\b"), "[payment_method]"),
]


# The runtime's own fields in trace data: written by the runtime from the ledger and the gate,
# never customer text, and what an audit reads. Redaction leaves their values as they are.
STRUCTURED_KEYS = frozenset(
    {
        "amount",
        "allowed_amount",
        "refundable",
        "requested_amount",
        "wanted_amount",
        "old_amount",
        "total",
        "refunded_total",
        "currency",
        "policy_version",
        "decision",
        "outcome",
        "recommendation",
        "code",
        "codes",
        "args_hash",
        "hash",
        "idempotency_key",
        "status",
        "approval",
        "approvals",
        "required_approvals",
        "replaced_by",
        "replaces",
        "entry",
        "draft",
        "replayed",
        "destination",
        "destination_method_kind",
    }
)
# Keys whose values came from the model or a tool: evidence, redacted throughout (their inner
# keys are the model's, not the runtime's).
EVIDENCE_KEYS = frozenset({"args", "input", "result"})

# Words that are never taken for a part of a customer's name: what the runtime itself writes.
_RUNTIME_WORDS = frozenset(
    {
        "approve",
        "approved",
        "approval",
        "deny",
        "denied",
        "escalate",
        "escalated",
        "refund",
        "refunded",
        "request",
        "requested",
        "changes",
        "invalidate",
        "invalidated",
        "replace",
        "replaced",
        "expire",
        "expired",
        "executed",
        "verified",
        "failed",
        "pending",
        "eligible",
        "policy",
        "order",
        "items",
        "original",
        "gift",
        "card",
        "the",
        "and",
        "for",
    }
)


def _name_words(name: str) -> list[str]:
    """The words of a customer's name that are redacted on their own: alphabetic, 3+ letters,
    and not a currency code or a word of the runtime's own vocabulary."""
    currencies = {c.lower() for c in getattr(settings, "LEDGER_CURRENCIES", ())}
    return [
        part
        for part in name.split()
        if len(part) >= 3 and part.isalpha() and part.lower() not in currencies | _RUNTIME_WORDS
    ]


def redact_text(text: str, known: list[str] | tuple[str, ...] = ()) -> str:
    for pattern in _known_patterns(tuple(known)):
        text = pattern.sub(REDACTED, text)
    for pattern, replacement in _PATTERNS:
        text = pattern.sub(replacement, text)
    return text


@functools.lru_cache(maxsize=256)
def _known_patterns(known: tuple[str, ...]) -> tuple[re.Pattern, ...]:
    """The patterns for a ticket's known values, longest value first, compiled once: a run
    redacts every trace event and message with the same values (escaping and compiling them
    per call cost more than the substitutions)."""
    patterns = []
    for value in sorted((k for k in known if k and (len(k) >= 3 or k.isdigit())), key=len, reverse=True):
        pattern = re.escape(value)
        if value.isdigit():
            # Card last four (or another number): the whole number only, never inside a longer
            # number or an amount ("4242.00").
            pattern = rf"(?<!\d)(?<!\d[.,]){pattern}(?!\d)(?![.,]\d)"
        elif value.isalpha():
            # A plain word (a part of the customer's name): whole words only, so that "Doe"
            # does not turn "does" into "[redacted]s". Identifiers are replaced anywhere.
            pattern = rf"(?<![^\W\d_]){pattern}(?![^\W\d_])"
        patterns.append(re.compile(pattern, flags=re.IGNORECASE))
    return tuple(patterns)


def redact(value: Any, known: list[str] | tuple[str, ...] = (), *, evidence: bool = False) -> Any:
    """Redact every string inside a JSON-like value (dict keys are kept), except the values of
    the runtime's structured fields (STRUCTURED_KEYS), which are never altered. Inside evidence
    (the model's args, a tool's result) every string is redacted."""
    if isinstance(value, str):
        return redact_text(value, known)
    if isinstance(value, dict):
        return {
            k: v
            if (k in STRUCTURED_KEYS and not evidence)
            else redact(v, known, evidence=evidence or k in EVIDENCE_KEYS)
            for k, v in value.items()
        }
    if isinstance(value, (list, tuple)):
        return [redact(v, known, evidence=evidence) for v in value]
    return value


def sensitive_values_for_order(order) -> list[str]:
    """The exact strings a trace of this order must never contain (none known without an
    order: callers with a customer-level ticket use sensitive_values_for_ticket)."""
    if order is None:
        return []
    return _customer_values(order.customer, _payment_values(Payment.objects.filter(order=order), order.customer_id))


def sensitive_values_for_ticket(ticket) -> list[str]:
    """The exact strings the ticket's trace must never contain: its order's, or, on a
    customer-level ticket (no order yet), its customer's contact data, payment method ids and
    the payment references of all their orders. A ticket read with
    `sensitive_values_annotations()` brought its payment values along: no query."""
    loaded = [getattr(ticket, name, None) for name in _LOADED]
    if None not in loaded:
        customer = ticket.order.customer if ticket.order_id else ticket.customer
        return _customer_values(customer, [(row["value"], row["last4"]) for rows in loaded for row in rows])
    if ticket.order_id:
        return sensitive_values_for_order(ticket.order)
    payments = Payment.objects.filter(order__customer_id=ticket.customer_id)
    return _customer_values(ticket.customer, _payment_values(payments, ticket.customer_id))


_LOADED = ("payment_values_loaded", "method_values_loaded")


def sensitive_values_annotations() -> dict:
    """Annotations for a Ticket queryset that read the ticket's payment values (what
    `_payment_values` reads) with the ticket: the agent's run loads its ticket and these in one
    query."""

    def pairs(queryset, value: str, last4: str):
        return ArraySubquery(queryset.order_by("pk").values(row=JSONObject(value=value, last4=last4)))

    # An order ticket's payments are its order's (each branch finds its rows by an index); its
    # methods are its order's customer's (as in sensitive_values_for_order).
    payments = Case(
        When(order_id__isnull=False, then=pairs(Payment.objects.filter(order_id=OuterRef("order_id")), *_PAYMENT)),
        default=pairs(Payment.objects.filter(order__customer_id=OuterRef("customer_id")), *_PAYMENT),
        output_field=ArrayField(JSONField()),
    )
    customer = Coalesce(OuterRef("order__customer_id"), OuterRef("customer_id"))
    methods = pairs(PaymentMethod.objects.filter(customer_id=customer), "external_id", "last4")
    return {"payment_values_loaded": payments, "method_values_loaded": methods}


_PAYMENT = ("payment_ref", "card_last4")


def _payment_values(payments, customer_id):
    # The payments' references and card last4, and the customer's method ids and last4, in one query.
    methods = PaymentMethod.objects.filter(customer_id=customer_id).values_list("external_id", "last4")
    return payments.values_list("payment_ref", "card_last4").union(methods, all=True)


def _customer_values(customer, payment_rows) -> list[str]:
    """`payment_rows`: the reference and last4 of each relevant payment and payment method (pairs)."""
    if customer is None:  # a ticket from an unknown sender: the patterns still apply
        return list(dict.fromkeys(v for row in payment_rows for v in row if v))
    values = [customer.email, customer.name]
    if customer.name:
        values.extend(_name_words(customer.name))
    for row in payment_rows:
        values.extend(row)
    return list(dict.fromkeys(v for v in values if v))
