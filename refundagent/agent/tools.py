"""The agent's tools: the manifest (from the capability registry), the schemas the model's
arguments are validated against, the per-call policy gate, and the tenant-scoped executors.

The gate runs before every call, in this order: the capability exists, its side-effect class
is one the agent may ever use (money movement and outbound messages never are), it is
enabled (the kill switch), it was offered; then the arguments are validated; then the scope
(the ticket's own order, the ticket's own tenant) is checked before any data is read.

On a customer-level ticket (filed without an order) the scope is the ticket's customer: any of
their orders in the ticket's tenant may be looked at (orders.list_customer_orders, offered only
on such tickets, lists them), and the draft must name the one it is about.
"""

import json
from dataclasses import dataclass
from decimal import Decimal, InvalidOperation
from typing import Any, Literal

from django.utils import timezone
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from approvals import gate
from approvals.models import Capability
from ledger.models import Order
from ledger.selectors import order_refund_position

from .providers.base import ToolCall, ToolSpec

LOOKUP_ORDER = "orders.lookup_order"
LIST_CUSTOMER_ORDERS = "orders.list_customer_orders"
PAYMENT_SUMMARY = "payments.get_summary"
POLICY_RETRIEVE = "refund_policy.retrieve"
CREATE_DRAFT = "refunds.create_draft"
ISSUE_REFUND = "refunds.issue_refund"
SEND_MESSAGE = "email.send_customer_message"

CENT = Decimal("0.01")


def api_name(capability: str) -> str:
    """The API-safe tool name (the Messages API allows no dots)."""
    return capability.replace(".", "_")


# --- argument schemas -------------------------------------------------------------------


class _Args(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)


class OrderArgs(_Args):
    order_id: str = Field(min_length=1, max_length=100)


class NoArgs(_Args):
    pass


class CreateDraftArgs(_Args):
    recommendation: Literal["refund", "escalate", "deny", "request_info"]
    amount: Decimal | None = None
    policy_version: str = Field(default="", max_length=100)
    rationale: str = Field(min_length=1, max_length=4000)
    customer_reply: str = Field(min_length=1, max_length=4000)
    destination: Literal["original", "gift_card"] | None = None
    # The order the draft is about: required on a customer-level ticket, optional (and only the
    # ticket's own) on an order ticket. Items: ids on that order, repeated for several units.
    order: str | None = Field(default=None, min_length=1, max_length=100)
    items: list[str] | None = Field(default=None, max_length=100)

    @field_validator("amount", mode="before")
    @classmethod
    def _amount(cls, value: Any) -> Decimal | None:
        if value is None or value == "":
            return None
        if isinstance(value, bool) or not isinstance(value, (str, int, float, Decimal)):
            raise ValueError("must be a decimal string such as '120.00'")
        try:
            amount = Decimal(str(value).strip())
        except InvalidOperation:
            raise ValueError("must be a decimal string such as '120.00'") from None
        if not amount.is_finite() or amount < 0:
            raise ValueError("must be a finite, non-negative amount")
        if amount > Decimal("9999999999.99"):
            raise ValueError("is too large")
        return amount.quantize(CENT)


class IssueRefundArgs(_Args):
    model_config = ConfigDict(extra="allow")
    order_id: str = ""
    amount: str | int | float | None = None


class SendMessageArgs(_Args):
    model_config = ConfigDict(extra="allow")
    body: str = ""


_ORDER_SCHEMA = {
    "type": "object",
    "properties": {"order_id": {"type": "string", "description": "The ticket's order id, e.g. ORD-5001 (on a "
                                "ticket without an order: one of the customer's orders)."}},
    "required": ["order_id"],
    "additionalProperties": False,
}


@dataclass(frozen=True)
class ToolDef:
    capability: str
    description: str
    input_schema: dict
    args_model: type[_Args]

    @property
    def name(self) -> str:
        return api_name(self.capability)

    def spec(self) -> ToolSpec:
        return ToolSpec(name=self.name, capability=self.capability, description=self.description,
                        input_schema=self.input_schema)


TOOL_DEFS: dict[str, ToolDef] = {
    d.capability: d
    for d in [
        ToolDef(LOOKUP_ORDER, "Look up the ticket's order: status, age in days, items, total, what was already "
                "refunded and what is still refundable. Only the ticket's own order.", _ORDER_SCHEMA, OrderArgs),
        ToolDef(LIST_CUSTOMER_ORDERS, "List the ticket's customer's orders: id, status, placed_at, total, currency, "
                "items (item_id, name, price) and what is still refundable. Only on a ticket filed without an "
                "order: find the order the customer means here.",
                {"type": "object", "properties": {}, "additionalProperties": False}, NoArgs),
        ToolDef(PAYMENT_SUMMARY, "How the ticket's order was paid: method, card brand and last four digits, amount. "
                "Payment identifiers are never shown.", _ORDER_SCHEMA, OrderArgs),
        ToolDef(POLICY_RETRIEVE, "The tenant's current refund policy: version (cite it), window, eligible order "
                "statuses, allowed destinations, approval threshold and text.",
                {"type": "object", "properties": {}, "additionalProperties": False}, NoArgs),
        ToolDef(CREATE_DRAFT, "Record your one recommendation for this ticket and a customer reply draft. The reply "
                "is never sent by you; finance approves any refund. Call this once, at the end.",
                {
                    "type": "object",
                    "properties": {
                        "recommendation": {"type": "string", "enum": ["refund", "escalate", "deny", "request_info"]},
                        "amount": {"type": "string", "description": "Decimal string with two places, e.g. '120.00'. "
                                   "Required for 'refund'."},
                        "policy_version": {"type": "string", "description": "The current policy version you rely on, "
                                           "exactly as refund_policy_retrieve returned it."},
                        "rationale": {"type": "string", "description": "The evidence and the rule it rests on."},
                        "customer_reply": {"type": "string", "description": "A draft reply for a person to review. "
                                           "No promise of money."},
                        "order": {"type": "string", "description": "The order the recommendation is about. "
                                  "Required when the ticket names no order (TICKET_FACTS order null): one of "
                                  "the customer's orders from orders_list_customer_orders."},
                        "items": {"type": "array", "items": {"type": "string"}, "description": "The item ids "
                                  "on that order to refund (repeat an id for several units); omit for the whole "
                                  "order. Ignored when the ticket already names items."},
                        "destination": {"type": "string", "enum": ["original", "gift_card"],
                                        "description": "Where the refund goes: the customer's choice on the "
                                        "ticket (TICKET_FACTS destination), never yours to change. A draft that "
                                        "disagrees with the ticket is escalated."},
                    },
                    "required": ["recommendation", "policy_version", "rationale", "customer_reply"],
                    "additionalProperties": False,
                }, CreateDraftArgs),
        ToolDef(ISSUE_REFUND, "Issue a refund. Runtime only, after finance approval.",
                {"type": "object", "properties": {"order_id": {"type": "string"}, "amount": {"type": "string"}}},
                IssueRefundArgs),
        ToolDef(SEND_MESSAGE, "Send a message to the customer. People only.",
                {"type": "object", "properties": {"body": {"type": "string"}}}, SendMessageArgs),
    ]
}
BY_API_NAME = {d.name: d for d in TOOL_DEFS.values()}


def capabilities_load() -> dict[str, Capability]:
    """The registry as it is now (one query): operators flip `enabled` without a deploy."""
    return {c.name: c for c in Capability.objects.filter(name__in=list(TOOL_DEFS))}


def tool_manifest(capabilities: dict[str, Capability], *, customer_level: bool = False) -> list[ToolSpec]:
    """The tools offered to the model: known, in the registry, enabled, and of a side-effect
    class the agent may use. Forbidden tools are never offered. orders.list_customer_orders only
    on a customer-level ticket: an order ticket's agent has its order (and offering it there
    would only invite looking around)."""
    return [
        d.spec()
        for name, d in TOOL_DEFS.items()
        if name in capabilities and capabilities[name].enabled and capabilities[name].agent_allowed
        and (customer_level or name != LIST_CUSTOMER_ORDERS)
    ]


# --- the per-call gate -------------------------------------------------------------------


@dataclass(frozen=True)
class CallCheck:
    allowed: bool
    capability: str = ""
    reason: str = ""
    message: str = ""
    order: Any = None  # the order the call is about once its scope is checked (None: the ticket's own)


FORBIDDEN_REASONS = {
    Capability.SideEffect.MONEY_MOVEMENT: (
        "agent_cannot_issue_refund",
        "The agent cannot issue refunds. Record a recommendation with refunds_create_draft; the runtime issues a "
        "refund only after finance approves it.",
    ),
    Capability.SideEffect.OUTBOUND: (
        "agent_cannot_contact_customer",
        "The agent cannot contact the customer. Put the reply you suggest in customer_reply of "
        "refunds_create_draft; a person sends it.",
    ),
}


def tool_call_check(*, call: ToolCall, capabilities: dict[str, Capability], offered: set[str]) -> CallCheck:
    """Is this call allowed at all (before its arguments are even looked at)?"""
    definition = BY_API_NAME.get(call.name) or TOOL_DEFS.get(call.name)
    if definition is None:
        return CallCheck(False, "", "unknown_tool", f"There is no tool named {call.name!r}.")
    capability = capabilities.get(definition.capability)
    if capability is None:
        return CallCheck(False, definition.capability, "capability_unknown",
                         f"{definition.capability} is not in the capability registry.")
    if not capability.agent_allowed:
        reason, message = FORBIDDEN_REASONS.get(
            capability.side_effect,
            ("side_effect_not_allowed", f"The agent may not use {capability.side_effect} tools."),
        )
        return CallCheck(False, capability.name, reason, message)
    if not capability.enabled:
        return CallCheck(False, capability.name, "capability_disabled",
                         f"{capability.name} is switched off by an operator.")
    if definition.name not in offered:
        return CallCheck(False, capability.name, "tool_not_offered", f"{definition.name} was not offered to you.")
    return CallCheck(True, capability.name)


def tool_args_validate(*, capability: str, arguments: dict) -> tuple[_Args | None, list[dict]]:
    """Validate the model's arguments against the tool's schema: (args, []) or (None, problems)."""
    if not isinstance(arguments, dict):
        return None, [{"field": "", "problem": "arguments must be a JSON object"}]
    try:
        return TOOL_DEFS[capability].args_model.model_validate(arguments), []
    except ValidationError as exc:
        return None, [
            {"field": ".".join(str(p) for p in e["loc"]) or "(arguments)", "problem": e["msg"]}
            for e in exc.errors(include_url=False, include_context=False, include_input=False)
        ]


def tool_scope_check(*, ticket, args: _Args) -> CallCheck:
    """Tenant and ticket scope, decided before any data is read. An order ticket's scope is its
    own order; a customer-level ticket's, the orders of its customer in its tenant (another
    customer's or tenant's order is refused exactly like any other out-of-scope order)."""
    if ticket_cross_tenant(ticket):
        return CallCheck(False, "", "cross_tenant", "This ticket's order is outside the ticket's tenant.")
    order_id = getattr(args, "order_id", None)
    if order_id is None:
        order_id = getattr(args, "order", None)
    if order_id is None:
        return CallCheck(True, order=ticket.order)
    if ticket.order_id:
        if order_id != ticket.order.external_id:
            return CallCheck(False, "", "out_of_scope_order",
                             f"Only the ticket's own order ({ticket.order.external_id}) may be looked at.")
        return CallCheck(True, order=ticket.order)
    order = (
        Order.objects.filter(tenant_id=ticket.tenant_id, customer_id=ticket.customer_id, external_id=order_id)
        .select_related("tenant", "customer")
        .first()
    )
    if order is None:
        return CallCheck(False, "", "out_of_scope_order",
                         f"Only orders of the ticket's customer ({ticket.customer.external_id}) may be looked at; "
                         "orders_list_customer_orders lists them.")
    return CallCheck(True, order=order)


def ticket_cross_tenant(ticket) -> bool:
    order, customer = ticket.order, ticket.customer
    if customer.tenant_id != ticket.tenant_id:
        return True
    if order is None:
        return False
    return not (order.tenant_id == ticket.tenant_id and order.customer_id == customer.pk)


# --- executors (read tools) --------------------------------------------------------------


def _money(value) -> str:
    return str(Decimal(value).quantize(CENT))


def order_lookup(*, ticket, order=None) -> dict:
    order = order or ticket.order
    position = order_refund_position(order)
    result = {
        "order": order.external_id,
        "customer": ticket.customer.external_id,
        "status": order.status,
        "placed_at": order.placed_at.isoformat(),
        "age_days": (timezone.now() - order.placed_at).days,
        "currency": order.currency,
        "total": _money(position.total),
        "refunded_total": _money(position.refunded_total),
        "refundable": _money(position.refundable),
        "items": [
            {"item_id": ln.item_id, "name": ln.name, "price": _money(ln.price), "quantity": ln.quantity,
             "refunded_quantity": ln.refunded_quantity}
            for ln in position.lines
        ],
    }
    if ticket.items and order.pk == ticket.order_id:
        value, unmatched = position.items_value(list(ticket.items))
        result["ticket_items"] = {"items": list(ticket.items), "unrefunded_value": _money(value),
                                  "not_refundable": unmatched}
    if order.note:
        result["shop_note_untrusted"] = order.note
    return result


def payment_summary(*, ticket, order=None) -> dict:
    order = order or ticket.order
    payments = [
        {"method": p.method, "brand": p.card_brand, "last4": p.card_last4, "amount": _money(p.amount),
         "currency": p.currency}
        for p in order.payments.all()
    ]
    return {"order": order.external_id, "payments": payments}


MAX_LISTED_ORDERS = 50


def customer_orders_list(*, ticket, order=None) -> dict:
    """The ticket's customer's orders in the ticket's tenant, newest first. Nothing of any other
    customer: the query starts from the ticket's tenant and customer."""
    orders = (
        Order.objects.filter(tenant_id=ticket.tenant_id, customer_id=ticket.customer_id)
        .order_by("-placed_at", "-id")[:MAX_LISTED_ORDERS]
    )
    listed = []
    for found in orders:
        position = order_refund_position(found)
        listed.append({
            "order": found.external_id,
            "status": found.status,
            "placed_at": found.placed_at.isoformat(),
            "currency": found.currency,
            "total": _money(position.total),
            "refundable": _money(position.refundable),
            "items": [
                {"item_id": ln.item_id, "name": ln.name, "price": _money(ln.price), "quantity": ln.quantity,
                 "refunded_quantity": ln.refunded_quantity}
                for ln in position.lines
            ],
        })
    return {"customer": ticket.customer.external_id, "orders": listed}


class ToolFailed(Exception):
    """A tool ran but has no useful answer (fed back to the model as an error)."""


def policy_retrieve(*, ticket, order=None) -> dict:
    policy = gate.policy_current(ticket.tenant)
    if policy is None:
        raise ToolFailed("This tenant has no current refund policy. Recommend 'escalate'; do not draft a refund.")
    return {
        "version": policy.version,
        "window_days": policy.window_days,
        "full_refund_statuses": policy.full_refund_statuses,
        "item_refund_statuses": policy.item_refund_statuses,
        "full_refund_destinations": policy.full_refund_destinations,
        "item_refund_destinations": policy.item_refund_destinations,
        "two_approver_threshold": None if policy.two_approver_threshold is None else _money(policy.two_approver_threshold),
        "text": policy.text,
    }


READ_EXECUTORS = {LOOKUP_ORDER: order_lookup, PAYMENT_SUMMARY: payment_summary, POLICY_RETRIEVE: policy_retrieve,
                  LIST_CUSTOMER_ORDERS: customer_orders_list}


def tool_execute(*, capability: str, ticket, order=None) -> dict:
    """Run a read tool for the ticket (scope already checked; `order` is the order it resolved,
    None for the ticket's own)."""
    return READ_EXECUTORS[capability](ticket=ticket, order=order)


def result_text(value: dict) -> str:
    return json.dumps(value, sort_keys=True, default=str)
