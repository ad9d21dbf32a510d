"""The offline provider: a deterministic planner behind the Provider interface, so the whole
product runs end to end with no key and no network.

It reads the transcript like a model would: the ticket's facts line (the filing form, never the
customer's free text, so instructions in the ticket change nothing), then the tool results so
far. It investigates (order, payments, policy) with the tools it was offered, then drafts one
recommendation from the evidence. It is stateless: a resumed run continues where it stopped.

On a customer-level ticket (the facts name no order) it lists the customer's orders and the
policy first, then picks one deterministically: the one order id of the list that the
customer's message mentions, else the only eligible order; otherwise it escalates without an
order. From the message it only matches ids against the list (order ids, then item ids on the
chosen order): nothing in the text is followed as an instruction.
"""

import json
import re
import time
from datetime import datetime
from decimal import Decimal

from django.utils import timezone

from ledger.exceptions import InvalidAmount
from ledger.money import ZERO, money_parse
from ledger.selectors import LinePosition, items_match

from ..prompts import UNTRUSTED_CLOSE, UNTRUSTED_OPEN, facts_from_messages
from ..tools import CREATE_DRAFT, LIST_CUSTOMER_ORDERS, LOOKUP_ORDER, PAYMENT_SUMMARY, POLICY_RETRIEVE
from .base import ModelTurn, ToolCall, ToolSpec, Usage


def _decimal(value) -> Decimal | None:
    """An amount as a tool result shows it ("120.00"), else None: read like any other amount."""
    try:
        return None if value in (None, "") else money_parse(value)
    except InvalidAmount:
        return None


class OfflineProvider:
    name = "offline"
    model = "offline-planner-1"

    def __init__(self, *, think_seconds: float = 0.0):
        self.think_seconds = think_seconds

    def cost_usd(self, usage: Usage) -> Decimal:
        return Decimal("0")

    def complete(self, *, system: str, tools: list[ToolSpec], messages: list[dict], max_tokens: int) -> ModelTurn:
        if self.think_seconds:
            time.sleep(self.think_seconds)
        offered = {t.capability: t.name for t in tools}
        facts = facts_from_messages(messages)
        results = _results_by_capability(messages, {t.name: t.capability for t in tools})
        step = sum(1 for m in messages if m.get("role") == "assistant")

        if CREATE_DRAFT in results:
            turn = self._text("My recommendation is recorded; a person reviews it.")
        elif not facts.get("order"):
            turn = self._customer_level(step, offered, facts, results, messages)
        else:
            turn = None
            for capability in (LOOKUP_ORDER, PAYMENT_SUMMARY, POLICY_RETRIEVE):
                if capability in offered and capability not in results:
                    arguments = {} if capability == POLICY_RETRIEVE else {"order_id": facts.get("order", "")}
                    turn = self._call(step, offered[capability], arguments)
                    break
            if turn is None:
                if CREATE_DRAFT in offered:
                    turn = self._call(step, offered[CREATE_DRAFT], draft_from_evidence(facts, results))
                else:
                    turn = self._text(
                        "I cannot record a recommendation (refunds_create_draft is not available): "
                        "a person should take this ticket."
                    )
        prompt_chars = len(system) + len(json.dumps(messages)) + sum(len(json.dumps(t.input_schema)) for t in tools)
        turn.usage = Usage(input_tokens=prompt_chars // 4, output_tokens=max(1, len(json.dumps(turn.content)) // 4))
        turn.model = self.model
        return turn

    def _customer_level(self, step, offered, facts, results, messages) -> ModelTurn:
        """A ticket without an order: list, policy, pick, then investigate and draft on the pick."""
        for capability in (LIST_CUSTOMER_ORDERS, POLICY_RETRIEVE):
            if capability in offered and capability not in results:
                return self._call(step, offered[capability], {})
        listed = ((results.get(LIST_CUSTOMER_ORDERS) or (None, True))[0] or {}).get("orders") or []
        policy = (results.get(POLICY_RETRIEVE) or (None, True))[0]
        text = customer_text(messages)
        chosen = order_pick(listed, text, policy)
        if chosen is None:
            if CREATE_DRAFT not in offered:
                return self._text("I cannot record a recommendation: a person should take this ticket.")
            return self._call(
                step,
                offered[CREATE_DRAFT],
                {
                    "recommendation": "escalate",
                    "policy_version": (policy or {}).get("version", ""),
                    "rationale": f"The ticket names no order and none of the customer's {len(listed)} order(s) can be "
                    "identified from it unambiguously: a person decides which order is meant.",
                    "customer_reply": "Hello, thank you for contacting us. A member of our team will look into your "
                    "request, identify the order it is about and get back to you.",
                },
            )
        order_id = chosen["order"]
        for capability in (LOOKUP_ORDER, PAYMENT_SUMMARY):
            if capability in offered and capability not in results:
                return self._call(step, offered[capability], {"order_id": order_id})
        items = items_mentioned(chosen, text)
        order = (results.get(LOOKUP_ORDER) or (None, True))[0]
        if order and items:
            order = {**order, "ticket_items": {"items": items, "unrefunded_value": str(_items_value(order, items))}}
        picked = {**facts, "order": order_id, "items": items}
        draft = draft_from_evidence(picked, {**results, LOOKUP_ORDER: (order, order is None)})
        draft["order"] = order_id
        if items:
            draft["items"] = items
        if draft.get("destination") and facts.get("destination") is None:
            draft.pop("destination")  # unknown before the order: the runtime derives it
        if CREATE_DRAFT not in offered:
            return self._text("I cannot record a recommendation: a person should take this ticket.")
        return self._call(step, offered[CREATE_DRAFT], draft)

    def _call(self, step: int, name: str, arguments: dict) -> ModelTurn:
        call_id = f"toolu_off_{step:03d}"
        return ModelTurn(
            content=[{"type": "tool_use", "id": call_id, "name": name, "input": arguments}],
            tool_calls=[ToolCall(id=call_id, name=name, input=arguments)],
            stop_reason="tool_use",
        )

    def _text(self, text: str) -> ModelTurn:
        return ModelTurn(content=[{"type": "text", "text": text}], text=text, stop_reason="end_turn")


def _results_by_capability(messages: list[dict], capability_of: dict[str, str]) -> dict[str, tuple[dict | None, bool]]:
    """capability -> (parsed result or None, is_error), the latest call of each."""
    names: dict[str, str] = {}
    out: dict[str, tuple[dict | None, bool]] = {}
    for message in messages:
        for block in message.get("content") or []:
            if not isinstance(block, dict):
                continue
            if block.get("type") == "tool_use":
                names[block["id"]] = capability_of.get(block["name"], block["name"].replace("_", ".", 1))
            elif block.get("type") == "tool_result" and block.get("tool_use_id") in names:
                text = block.get("content")
                if isinstance(text, list):
                    text = "".join(b.get("text", "") for b in text if isinstance(b, dict))
                try:
                    data = json.loads(text or "null")
                except ValueError:
                    data = None
                is_error = bool(block.get("is_error"))
                out[names[block["tool_use_id"]]] = (None if is_error else data, is_error)
    return out


def customer_text(messages: list[dict]) -> str:
    """The customer's words of the first user message (between the untrusted markers)."""
    for block in (messages[0].get("content") or []) if messages else []:
        text = block.get("text", "") if isinstance(block, dict) else ""
        if UNTRUSTED_OPEN in text:
            return text.split(UNTRUSTED_OPEN, 1)[1].split(UNTRUSTED_CLOSE, 1)[0]
    return ""


def _mentions(text: str, identifier: str) -> bool:
    return bool(re.search(rf"(?<![A-Za-z0-9]){re.escape(identifier)}(?![A-Za-z0-9])", text, re.IGNORECASE))


def _eligible(order: dict, policy: dict | None) -> bool:
    if policy is None or (_decimal(order.get("refundable")) or ZERO) <= ZERO:
        return False
    statuses = set(policy.get("full_refund_statuses") or []) | set(policy.get("item_refund_statuses") or [])
    if order.get("status") not in statuses:
        return False
    window = policy.get("window_days")
    if window is None:
        return True
    try:
        placed = datetime.fromisoformat(order["placed_at"])
    except (KeyError, TypeError, ValueError):
        return False
    return (timezone.now() - placed).days <= window


def order_pick(listed: list[dict], text: str, policy: dict | None) -> dict | None:
    """The order the ticket is about: the one listed id the message mentions, else the only
    eligible order, else None (ambiguous: a person decides)."""
    mentioned = [o for o in listed if _mentions(text, o["order"])]
    if len(mentioned) == 1:
        return mentioned[0]
    if mentioned:
        return None
    eligible = [o for o in listed if _eligible(o, policy)]
    return eligible[0] if len(eligible) == 1 else None


def items_mentioned(order: dict, text: str) -> list[str]:
    """The ids of the order's items that the message mentions, in the order's line order."""
    seen: list[str] = []
    for item in order.get("items") or []:
        if item["item_id"] not in seen and _mentions(text, item["item_id"]):
            seen.append(item["item_id"])
    return seen


def _items_value(order: dict, items: list[str]) -> Decimal:
    """The unrefunded value of the items on a looked-up order, by the ledger's matching rule."""
    lines = [
        LinePosition(
            line_no=n,
            item_id=i["item_id"],
            name=i.get("name_untrusted", ""),
            price=_decimal(i["price"]) or ZERO,
            quantity=i.get("quantity", 1),
            refunded_quantity=i.get("refunded_quantity", 0),
        )
        for n, i in enumerate(order.get("items") or [])
    ]
    return items_match(lines, items).value


def draft_from_evidence(facts: dict, results: dict) -> dict:
    """The recommendation the evidence supports, with a specific reply that promises nothing."""
    order_ref = facts.get("order", "your order")
    order = (results.get(LOOKUP_ORDER) or (None, True))[0]
    policy = (results.get(POLICY_RETRIEVE) or (None, True))[0]
    greeting = f"Hello, thank you for contacting us about order {order_ref}."
    if not order:
        return {
            "recommendation": "escalate",
            "policy_version": (policy or {}).get("version", ""),
            "rationale": "The order could not be looked at, so there is no evidence to decide on.",
            "customer_reply": f"{greeting} A member of our team will look into your request and get back to you.",
        }
    if not policy:
        return {
            "recommendation": "escalate",
            "policy_version": "",
            "rationale": "There is no current refund policy for this tenant: a person must decide.",
            "customer_reply": f"{greeting} A member of our team will review your request and get back to you.",
        }
    version, currency = policy["version"], order["currency"]
    refundable = _decimal(order["refundable"]) or ZERO
    items = list(facts.get("items") or [])
    cap = refundable
    if items:
        cap = min(cap, _decimal((order.get("ticket_items") or {}).get("unrefunded_value")) or ZERO)
    statuses = policy["item_refund_statuses"] if items else policy["full_refund_statuses"]
    window = policy.get("window_days")
    age = order["age_days"]

    if cap <= ZERO:
        what = "the items you named have" if items else "this order has"  # "... have no remaining balance"
        return {
            "recommendation": "deny",
            "policy_version": version,
            "rationale": f"Order {order_ref}: {order['refunded_total']} {currency} of {order['total']} {currency} already "
            f"refunded; nothing is left to refund ({version}, rule 2).",
            # No amount and no word of money moving (the gate's payment-promise rule): the
            # runtime states outcomes itself.
            "customer_reply": f"{greeting} Our records show that {what} no remaining balance that is eligible "
            "for a further refund. If you think this is a mistake, reply to this message and we "
            "will look into it.",
        }
    if order["status"] not in statuses:
        return {
            "recommendation": "escalate",
            "policy_version": version,
            "rationale": f"Order {order_ref} is {order['status']}; {version} allows this refund only for "
            f"{', '.join(statuses) or 'no'} orders.",
            "customer_reply": f"{greeting} The order is currently {order['status']}, so a member of our team will "
            "review your request personally and get back to you.",
        }
    if window is not None and age > window:
        return {
            "recommendation": "escalate",
            "policy_version": version,
            "rationale": f"Order {order_ref} was placed {age} days ago, outside the {window}-day window of {version} "
            "(rule 1): a person decides whether to make an exception.",
            "customer_reply": f"{greeting} The order was placed {age} days ago, which is outside our {window}-day "
            "refund window, so a member of our team will review your request personally and get "
            "back to you.",
        }
    destination = facts.get("destination") or "original"
    allowed_destinations = policy.get("item_refund_destinations" if items else "full_refund_destinations") or []
    if destination not in allowed_destinations:
        where = facts.get("refund_to") or "that payment method"
        return {
            "recommendation": "escalate",
            "policy_version": version,
            "rationale": f"The customer wants the refund on {where} ({destination}); {version} allows "
            f"{'item refunds' if items else 'refunds of the whole order'} only to "
            f"{', '.join(allowed_destinations) or 'no'} destinations: a person decides.",
            "customer_reply": f"{greeting} The refund cannot go to the payment method you chose under our refund "
            "policy, so a member of our team will review your request personally and get back "
            "to you.",
        }
    requested = _decimal(facts.get("requested_amount"))
    amount = cap if requested is None else min(requested, cap)
    capped = requested is not None and requested > cap
    what = f"items {', '.join(items)}" if items else "the order"
    rationale = (
        f"Order {order_ref} is {order['status']}, placed {age} days ago, within the {window}-day window of {version}. "
        f"{refundable} {currency} of {order['total']} {currency} is still refundable; the refund covers {what}. "
        + (
            f"The requested {requested} {currency} is above that, so the amount is capped at {amount} {currency} "
            "(rule 2). "
            if capped
            else ""
        )
        + "Finance approves before anything is issued (rule 4)."
    )
    reply = (
        f"{greeting} We have checked the order and passed a refund request to our finance team for review."
        + (
            " Our team will also look at the amount you asked for, which is more than what is left on the order."
            if capped
            else ""
        )
        + " We will get back to you as soon as they have made a decision."
    )
    return {
        "recommendation": "refund",
        "amount": str(amount),
        "policy_version": version,
        "rationale": rationale,
        "customer_reply": reply,
        "destination": destination,
    }
