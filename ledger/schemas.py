from datetime import datetime
from decimal import Decimal
from typing import Annotated

from ninja import Field, Schema
from pydantic import PlainSerializer, model_validator

from .money import CENT
from .services import REFERENCE_MAX_LENGTH
from .text import CARD_NUMBER, printable_text_pattern

# Money leaves the API as a decimal string with two places ("120.00"), never a float.
Money = Annotated[Decimal, PlainSerializer(lambda d: str(Decimal(d).quantize(CENT)), return_type=str)]


JSON_TYPE_NAMES = {bool: "a boolean", int: "a number", float: "a number", str: "a string", list: "an array"}
JSON_TYPE_NAMES[type(None)] = "null"


class BodyIn(Schema):
    """The base of every request body: a JSON object, nothing else.

    A ninja Schema reads its fields as attributes of whatever it is given, so a body of `true`,
    `1`, `"hello"`, `[]` or `null` would pass a schema whose fields are all optional (and post
    the default reply). Refused here, before any field is read: 422 as every invalid input."""

    # "wrap", not "before": ninja's own wrap validator hands a "before" one its attribute reader,
    # never the raw value; a wrap validator declared here runs outside ninja's and sees the JSON.
    @model_validator(mode="wrap")
    @classmethod
    def _refuse_non_object(cls, data, handler):
        if not isinstance(data, dict | BodyIn):
            raise ValueError(f"The body must be a JSON object, not {JSON_TYPE_NAMES.get(type(data), 'that')}.")
        return handler(data)


class RevisionOut(Schema):
    old_amount: Money
    new_amount: Money
    reason: str
    created_by: str | None
    created_at: datetime


class LedgerEntryOut(Schema):
    refund_id: int
    amount: Money
    original_amount: Money
    currency: str
    status: str
    corrected: bool
    provider_ref: str | None
    needs_review: bool
    idempotency_key: str
    approval: str | None
    destination: str | None
    items: list[str]
    source: str
    created_at: datetime
    revisions: list[RevisionOut]


class OrderLineOut(Schema):
    id: str
    name: str
    price: Money  # per unit
    quantity: int
    refunded_quantity: int


class OrderLedgerOut(Schema):
    order: str
    customer: str
    status: str
    total: Money
    currency: str
    refunded_total: Money
    refundable: Money
    # The order's lines with their units and the units the ledger already refunded.
    items: list[OrderLineOut]
    entries: list[LedgerEntryOut]


def _payout_reference_documented(schema: dict) -> None:
    """payout_reference_parse's rule (the one check, its own codes), as JSON Schema: printable once
    stripped, not blank, and nothing that looks like a card number. Built when the document is."""
    schema["pattern"] = printable_text_pattern()
    schema["not"] = {"type": "string", "pattern": CARD_NUMBER.pattern}


class RefundPaidIn(BodyIn):
    reference: str = Field(
        max_length=REFERENCE_MAX_LENGTH,
        # Documented, not enforced here: payout_reference_parse (the one check, the same constants)
        # answers its own codes.
        json_schema_extra=_payout_reference_documented,
        description="The payout's reference at the bank or provider: printable, not blank, never card data "
        "(no run of 13 to 19 digits, spaces or dashes between them); else 422 bad_reference or reference_required.",
    )


class RefundPaidOut(Schema):
    refund_id: int
    status: str
    provider_ref: str | None
    amount: Money
    currency: str
    recorded_by: str
    recorded_at: datetime
