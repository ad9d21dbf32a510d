"""Redaction of customer contact data and payment identifiers, applied to every trace event
before it is stored. Known values (the ticket's customer, the order's payment references)
are replaced exactly; patterns catch the rest (emails, card-like numbers, processor refs)."""

import re
from typing import Any

from ledger.models import Payment

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


def redact_text(text: str, known: list[str] | tuple[str, ...] = ()) -> str:
    for value in sorted((k for k in known if k and len(k) >= 3), key=len, reverse=True):
        pattern = re.escape(value)
        if value.isalpha():
            # A plain word (a part of the customer's name): whole words only, so that "Doe"
            # does not turn "does" into "[redacted]s". Identifiers are replaced anywhere.
            pattern = rf"(?<![^\W\d_]){pattern}(?![^\W\d_])"
        text = re.sub(pattern, REDACTED, text, flags=re.IGNORECASE)
    for pattern, replacement in _PATTERNS:
        text = pattern.sub(replacement, text)
    return text


def redact(value: Any, known: list[str] | tuple[str, ...] = ()) -> Any:
    """Redact every string inside a JSON-like value (dict keys are kept)."""
    if isinstance(value, str):
        return redact_text(value, known)
    if isinstance(value, dict):
        return {k: redact(v, known) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [redact(v, known) for v in value]
    return value


def sensitive_values_for_order(order) -> list[str]:
    """The exact strings a trace of this order must never contain (none known without an
    order: callers with a customer-level ticket use sensitive_values_for_ticket)."""
    if order is None:
        return []
    return _customer_values(order.customer, order.payments.values_list("payment_ref", flat=True))


def sensitive_values_for_ticket(ticket) -> list[str]:
    """The exact strings the ticket's trace must never contain: its order's, or, on a
    customer-level ticket (no order yet), its customer's contact data, payment method ids and
    the payment references of all their orders."""
    if ticket.order_id:
        return sensitive_values_for_order(ticket.order)
    customer = ticket.customer
    return _customer_values(customer, Payment.objects.filter(order__customer=customer).values_list("payment_ref", flat=True))


def _customer_values(customer, payment_refs) -> list[str]:
    values = [customer.email, customer.name]
    if customer.name:
        values.extend(part for part in customer.name.split() if len(part) >= 3)
    # The payment references and the payment method ids in one query (read at filing and at every run).
    values.extend(payment_refs.union(customer.payment_methods.values_list("external_id", flat=True), all=True))
    return [v for v in values if v]
