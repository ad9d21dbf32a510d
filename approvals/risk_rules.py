"""The risk rules of a refund policy (`RefundPolicy.risk_rules`): which rules there are, their
shape, and the demo's defaults. The gate's check of them is approvals.risk; this module reads no
models, so the policy model validates its rules with it."""

from ledger.exceptions import InvalidAmount, InvalidInput
from ledger.models import PaymentMethod
from ledger.money import money_parse

DEFAULT_WINDOW_DAYS = 30
RULE_KEYS = {
    "window_days",
    "max_refunds_per_customer",
    "max_refund_amount_per_customer",
    "max_open_tickets_per_order",
    "unpaid_destination_kinds",
}

# What the demo policy ships with: a few refunds a month are ordinary, a sixth or more than
# 2000.00 in 30 days is worth a person's look; one ticket per order at a time; refunds go only
# where the customer paid from (a gift card is the shop's own store credit, so it is not listed).
DEMO_RISK_RULES = {
    "window_days": 30,
    "max_refunds_per_customer": 5,
    "max_refund_amount_per_customer": "2000.00",
    "max_open_tickets_per_order": 1,
    "unpaid_destination_kinds": ["card", "paypal"],
}


def risk_rules_validate(rules) -> dict:
    """The rules as the gate reads them; raises InvalidInput naming the rule that is wrong."""
    if rules in (None, ""):
        return {}
    if not isinstance(rules, dict):
        raise InvalidInput("risk_rules must be an object of rules.", code="bad_risk_rules")
    unknown = set(rules) - RULE_KEYS
    if unknown:
        raise InvalidInput(
            f"risk_rules: unknown rule(s) {', '.join(sorted(unknown))} (known: {', '.join(sorted(RULE_KEYS))}).",
            code="bad_risk_rules",
        )
    for key in ("window_days", "max_refunds_per_customer", "max_open_tickets_per_order"):
        value = rules.get(key)
        if value is not None and (isinstance(value, bool) or not isinstance(value, int) or value < 1):
            raise InvalidInput(f"risk_rules.{key} must be a whole number of at least 1.", code="bad_risk_rules")
    if rules.get("max_refund_amount_per_customer") is not None:
        try:
            money_parse(rules["max_refund_amount_per_customer"], field="risk_rules.max_refund_amount_per_customer")
        except InvalidAmount as exc:
            raise InvalidInput(exc.message, code="bad_risk_rules") from None
    kinds = rules.get("unpaid_destination_kinds")
    if kinds is not None and (
        not isinstance(kinds, list) or not set(kinds) <= set(PaymentMethod.Kind.values) or len(kinds) != len(set(kinds))
    ):
        raise InvalidInput(
            f"risk_rules.unpaid_destination_kinds must list distinct kinds of {', '.join(PaymentMethod.Kind.values)}.",
            code="bad_risk_rules",
        )
    return rules
