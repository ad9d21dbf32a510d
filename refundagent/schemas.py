"""JSON shapes of the ticket endpoints (docs/api.md). Money leaves as a two-place decimal string."""

from datetime import datetime
from typing import Literal
from uuid import UUID

from ninja import Field, Schema
from pydantic import create_model

from approvals.schemas import ApprovalOut
from ledger.money import MoneyIn
from ledger.schemas import BodyIn, Money
from ledger.text import CARD_NUMBER, NOT_BLANK_PATTERN

from .models import Ticket


class TicketIn(BodyIn):
    order: str | None = Field(
        None,
        min_length=1,
        max_length=100,
        description="The order id, e.g. ORD-5001. Omitted: a customer-level "
        "ticket; the agent finds the order among the customer's orders (then `items` must be omitted too).",
    )
    customer: str = Field(..., min_length=1, max_length=100, description="The customer id, e.g. CUST-1001.")
    message: str = Field(..., min_length=1, max_length=20_000, description="The customer's words (untrusted).")
    requested_amount: MoneyIn | None = Field(None, description='A decimal string, e.g. "200.00".')
    items: list[str] = Field(default_factory=list, max_length=100, description="Item ids the ticket is about.")
    refund_to: str | None = Field(
        None,
        max_length=100,
        description="Where the customer wants the refund: the id of one of their payment "
        'methods, e.g. "gift_card_7". Omitted or blank: the order\'s original payment method.',
    )


# A Literal, not the model's TextChoices (named `Status`, like the approval's: they collided in
# the OpenAPI document).
TicketStatus = Literal[tuple(Ticket.Status.values)]


class TicketFilter(Schema):
    status: TicketStatus | None = Field(None, description="One of the ticket's statuses.")


class ProposalIn(BodyIn):
    amount: MoneyIn = Field(..., description='The exact amount, e.g. "50.00".')
    order: str | None = Field(
        None,
        max_length=100,
        description="On a ticket that names no order: which of the customer's orders (required there); "
        "otherwise it may only repeat the ticket's order.",
    )
    currency: str | None = Field(None, min_length=3, max_length=3, description="Must be the order's, if given.")
    items: list[str] | None = Field(None, max_length=100, description="Omitted: the ticket's items (or the order).")
    refund_to: str | None = Field(
        None,
        max_length=100,
        description="A payment method id of the order's customer; "
        "omitted: the ticket's choice, else the original payment method.",
    )
    reason: str = Field("", max_length=2000, description="Why; required with exception.")
    exception: bool = Field(
        False,
        description="Go outside the policy's waivable rules (window, order status): "
        "needs a reason and two distinct approvers, never the proposer.",
    )


class AssignIn(BodyIn):
    to: Literal["me"] | None = Field(..., description='"me": take the ticket; null: hand it back.')


class DraftOut(Schema):
    recommendation: str
    amount: Money | None
    currency: str
    policy_version: str
    rationale: str
    customer_reply: str
    gate: dict = Field(description="The runtime's verdict on the draft: outcome, allowed amount, reasons.")
    created_at: datetime


class TicketSummaryOut(Schema):
    id: int
    status: str
    stop_reason: str | None
    order: str | None = Field(
        description="The order id; null on a customer-level ticket until the agent's draft "
        "names the order and the runtime accepts it."
    )
    customer: str | None = Field(
        description="The customer's id; null on a ticket from an unknown or unverified sender (escalated)."
    )
    requested_amount: Money | None
    currency: str
    owner: str | None = Field(description="Who took the ticket from the escalation queue (null: nobody).")
    created_at: datetime
    updated_at: datetime


class ReplyOut(Schema):
    outcome: str = Field(description="The ticket's outcome the email spoke of (its status when sent).")
    sent_at: datetime | None = Field(description="When the email was delivered (null until then).")
    status: str = Field(description="queued, sending, retrying, sent, failed or withdrawn.")
    to: str = Field(description="The customer's email from the shop's records.")
    error: str | None = Field(None, description="The last delivery error, if any.")


# One message of the conversation. Built with create_model: its field "from" is a Python keyword,
# and an alias would need by_alias on every operation that returns a ticket.
MessageOut = create_model(
    "MessageOut",
    __base__=Schema,
    direction=(str, Field(description="in: from the customer (email, Zendesk); out: a reply the product sent.")),
    at=(datetime, Field()),
    text=(str, Field(description="The message's text: the sender's words, untrusted.")),
    **{"from": (str, Field(description="The sender's address as the message claims it."))},
)


class ReplyDueOut(Schema):
    outcome: str
    correction: bool = Field(description="The customer was told another outcome before: send a correction.")
    told: str | None = Field(description="The outcome of the last email the customer received.")


class ReplyIn(BodyIn):
    text: str | None = Field(
        None,
        max_length=5000,
        # Documented, not enforced here: the service's check answers its own code (reply_empty).
        json_schema_extra={"pattern": NOT_BLANK_PATTERN, "not": {"type": "string", "pattern": CARD_NUMBER.pattern}},
        description="The reviewed reply; omitted: the ticket's customer_reply. Not blank (else 422 "
        "reply_empty); never speaking of money before it moved (422 reply_promises_payment) nor carrying "
        "payment data (422 reply_payment_data).",
    )


class TicketOut(TicketSummaryOut):
    stop_detail: str
    customer_reply: str = Field(
        description="The reply support may send now, written by the runtime from the "
        "ticket's current outcome (the model's draft stays under draft.customer_reply)."
    )
    items: list[str]
    refund_to: str | None = Field(description="The chosen payment method's id; null = the original payment method.")
    refund_to_kind: str | None = Field(description="Its kind: card, paypal, gift_card (null with refund_to).")
    draft: DraftOut | None
    approval: ApprovalOut | None
    trace_id: UUID
    created_by: str | None = Field(description="Who filed it; null on a ticket that came in by email or Zendesk.")
    source: str = Field("web", description="Where the ticket came from: web, api, email or zendesk.")
    messages: list[MessageOut] = Field(
        default_factory=list, description="The conversation, oldest first (email and Zendesk tickets)."
    )
    replies: list[ReplyOut] = Field(default_factory=list, description="The emails sent to the customer, oldest first.")
    reply_due: ReplyDueOut | None = Field(None, description="The reply support is prompted to send now, if any.")


class TraceEventOut(Schema):
    seq: int
    span: str
    status: str
    decision: str
    reason: str
    tool: str
    at: datetime
    duration_ms: int | None
    input_tokens: int | None
    output_tokens: int | None
    data: dict


class TraceOut(Schema):
    trace_id: UUID
    ticket: int
    events: list[TraceEventOut]
