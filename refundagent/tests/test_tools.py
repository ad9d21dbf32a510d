"""The tool manifest, the argument schemas and the read tools' redaction and scope."""

import json
from decimal import Decimal

import pytest

from approvals.models import Capability, RefundPolicy
from ledger.models import Order
from ledger.money import MONEY_PATTERN
from refundagent.agent.loop import _tickets_for_run
from refundagent.agent.providers.base import ToolCall
from refundagent.agent.tools import (
    CREATE_DRAFT,
    TOOL_DEFS,
    CreateDraftArgs,
    capabilities_load,
    capabilities_of,
    payment_summary,
    policy_retrieve,
    tool_args_validate,
    tool_call_authorize,
    tool_input_schema,
    tool_manifest,
    tool_scope_authorize,
)
from refundagent.services import ticket_create


@pytest.fixture
def ticket(user):
    return ticket_create(user=user("acme-support"), order="ORD-5001", customer="CUST-1001", message="refund")


def test_every_registered_capability_has_a_tool_definition(db):
    assert set(Capability.objects.values_list("name", flat=True)) == set(TOOL_DEFS)


def test_the_manifest_offers_only_enabled_agent_tools_with_api_safe_names(db):
    Capability.objects.filter(name="payments.get_summary").update(enabled=False)

    specs = tool_manifest(capabilities_load())

    assert [s.name for s in specs] == ["orders_lookup_order", "refund_policy_retrieve", "refunds_create_draft"]
    assert all("." not in s.name and s.input_schema["type"] == "object" for s in specs)


@pytest.mark.parametrize(
    ("name", "reason"),
    [
        ("refunds_issue_refund", "agent_cannot_issue_refund"),
        ("email_send_customer_message", "agent_cannot_contact_customer"),
        ("payments_get_summary", "capability_disabled"),
        ("nope", "unknown_tool"),
    ],
)
def test_tool_authorization_refuses_what_the_agent_may_not_do(db, name, reason):
    Capability.objects.filter(name="payments.get_summary").update(enabled=False)
    capabilities = capabilities_load()
    offered = {s.name for s in tool_manifest(capabilities)}

    check = tool_call_authorize(call=ToolCall(id="t", name=name, input={}), capabilities=capabilities, offered=offered)

    assert not check.allowed and check.reason == reason


def test_a_tool_that_was_not_offered_is_refused(db):
    capabilities = capabilities_load()
    check = tool_call_authorize(
        call=ToolCall(id="t", name="orders_lookup_order", input={}), capabilities=capabilities, offered=set()
    )
    assert check.reason == "tool_not_offered"


@pytest.mark.parametrize(
    "arguments",
    [
        {
            "recommendation": "refund",
            "amount": "12.5",
            "policy_version": "v",
            "rationale": "r",
            "customer_reply": "c",
            "extra": 1,
        },
        {"recommendation": "pay_now", "amount": "1", "policy_version": "v", "rationale": "r", "customer_reply": "c"},
        {"recommendation": "refund", "amount": "-1", "policy_version": "v", "rationale": "r", "customer_reply": "c"},
        {"recommendation": "refund", "amount": "NaN", "policy_version": "v", "rationale": "r", "customer_reply": "c"},
        {"recommendation": "refund", "amount": True, "policy_version": "v", "rationale": "r", "customer_reply": "c"},
        {"recommendation": "refund", "amount": "1", "policy_version": "v", "rationale": "r"},
        {
            "recommendation": "refund",
            "amount": "1",
            "policy_version": "v",
            "rationale": "r",
            "customer_reply": "c",
            "destination": "bitcoin",
        },
    ],
)
def test_invalid_draft_arguments_are_reported_field_by_field(arguments):
    args, problems = tool_args_validate(capability=CREATE_DRAFT, arguments=arguments)
    assert args is None and problems and all(p["field"] and p["problem"] for p in problems)


@pytest.mark.parametrize(
    ("raw", "parsed"), [("120", "120.00"), ("120.5", "120.50"), ("0120.00", "120.00"), (7, "7.00")]
)
def test_draft_amounts_become_two_place_decimals(raw, parsed):
    args, problems = tool_args_validate(
        capability=CREATE_DRAFT,
        arguments={
            "recommendation": "refund",
            "amount": raw,
            "policy_version": "refund-policy-v4",
            "rationale": "r",
            "customer_reply": "c",
        },
    )
    assert problems == []
    assert args.amount == Decimal(parsed)


def test_order_ids_must_be_strings():
    _, problems = tool_args_validate(capability="orders.lookup_order", arguments={"order_id": 5001})
    assert problems[0]["field"] == "order_id"


def test_payment_summary_shows_brand_and_kind_only(ticket):
    # (the card's last four are no longer given to the model nor traced)
    summary = payment_summary(ticket=ticket)

    assert summary["payments"] == [{"method": "card", "brand_untrusted": "visa", "amount": "120.00", "currency": "USD"}]
    assert "4242" not in json.dumps(summary)
    payment_ref = Order.objects.get(external_id="ORD-5001").payments.get().payment_ref
    assert payment_ref not in json.dumps(summary)
    assert "card_4242" not in json.dumps(summary)


def test_policy_retrieve_returns_the_current_version_only(ticket):
    assert policy_retrieve(ticket=ticket)["version"] == "refund-policy-v4"
    assert "refund-policy-v3" not in json.dumps(policy_retrieve(ticket=ticket))


def test_policy_retrieve_without_a_current_policy_says_so(ticket):
    RefundPolicy.objects.update(status=RefundPolicy.Status.RETIRED)
    from refundagent.agent.tools import ToolFailed

    with pytest.raises(ToolFailed, match="no current refund policy"):
        policy_retrieve(ticket=ticket)


def test_the_scope_check_allows_only_the_tickets_order(ticket):
    args_ok, _ = tool_args_validate(capability="orders.lookup_order", arguments={"order_id": "ORD-5001"})
    args_other, _ = tool_args_validate(capability="orders.lookup_order", arguments={"order_id": "ORD-7001"})

    assert tool_scope_authorize(ticket=ticket, args=args_ok).allowed
    assert tool_scope_authorize(ticket=ticket, args=args_other).reason == "out_of_scope_order"


# --- the schemas offered are the argument models' -----------------------------------------


def _refs(node) -> list:
    if isinstance(node, dict):
        return [k for k in node if k in ("$ref", "$defs")] + [r for v in node.values() for r in _refs(v)]
    if isinstance(node, list):
        return [r for v in node for r in _refs(v)]
    return []


def test_every_tool_offered_has_the_schema_derived_from_its_argument_model(db):
    specs = tool_manifest(capabilities_load(), customer_level=True)

    assert {s.capability for s in specs} >= {CREATE_DRAFT, "orders.lookup_order", "orders.list_customer_orders"}
    for spec in specs:
        model = TOOL_DEFS[spec.capability].args_model
        assert spec.input_schema == tool_input_schema(model)
        assert spec.input_schema["type"] == "object" and isinstance(spec.input_schema["properties"], dict)
        assert set(spec.input_schema["properties"]) == set(model.model_fields)
        assert set(spec.input_schema.get("required", [])) == {
            n for n, f in model.model_fields.items() if f.is_required()
        }
        assert spec.input_schema["additionalProperties"] is False
        assert _refs(spec.input_schema) == []  # inlined: the API takes one self-contained schema


DRAFT = {"recommendation": "refund", "policy_version": "v", "rationale": "r", "customer_reply": "c"}


def test_the_draft_schema_carries_the_models_limits():
    properties = tool_input_schema(CreateDraftArgs)["properties"]
    integer, string = (
        next(b for b in properties["amount"]["anyOf"] if b["type"] == kind) for kind in ("integer", "string")
    )

    assert (integer["minimum"], integer["maximum"]) == (0, 9_999_999_999)
    assert string["pattern"] == MONEY_PATTERN
    assert properties["rationale"]["maxLength"] == 4000 and properties["items"]["anyOf"][0]["maxItems"] == 100


@pytest.mark.parametrize(
    "arguments",
    [
        {**DRAFT, "amount": "ten dollars"},  # not a decimal string: the schema's pattern forbids it
        {**DRAFT, "amount": "-1.00"},
        {**DRAFT, "amount": "1e3"},
        {**DRAFT, "amount": 10_000_000_000},  # above the schema's maximum
        {**DRAFT, "amount": -0.01},  # below its minimum
        {**DRAFT, "amount": True},  # JSON Schema's numbers are not booleans
        {**DRAFT, "amount": ["1.00"]},
        {**DRAFT, "rationale": "x" * 4001},  # over maxLength
        {**DRAFT, "items": ["A"] * 101},  # over maxItems
        {**DRAFT, "surprise": 1},  # additionalProperties: false
        {k: v for k, v in DRAFT.items() if k != "rationale"},  # required
    ],
)
def test_the_model_rejects_what_the_schema_forbids(arguments):
    args, problems = tool_args_validate(capability=CREATE_DRAFT, arguments=arguments)

    assert args is None and problems


def test_an_amount_string_over_the_limit_is_rejected_too():
    # JSON Schema cannot bound a string's value; the model does.
    _, problems = tool_args_validate(capability=CREATE_DRAFT, arguments={**DRAFT, "amount": "10000000000.00"})

    assert [p["field"] for p in problems] == ["amount"]


@pytest.mark.parametrize("amount", ["120.00", "7", 7, "9999999999.99", 9_999_999_999])
def test_the_model_accepts_what_the_schema_allows(amount):
    _, problems = tool_args_validate(capability=CREATE_DRAFT, arguments={**DRAFT, "amount": amount})

    assert problems == []


def _as_compared(capabilities: dict[str, Capability]) -> dict:
    return {
        name: (
            c.pk,
            c.name,
            c.description,
            c.side_effect,
            c.enabled,
            c.timeout_seconds,
            c.approval_rule,
            c.agent_allowed,
        )
        for name, c in capabilities.items()
    }


def test_the_registry_read_with_the_runs_ticket_is_the_registry_as_it_is_then(ticket, django_assert_num_queries):
    Capability.objects.filter(name="payments.get_summary").update(enabled=False, timeout_seconds=3)
    loaded = _tickets_for_run().get(pk=ticket.pk)
    with django_assert_num_queries(0):
        read_with_the_ticket = capabilities_of(loaded)
    assert _as_compared(read_with_the_ticket) == _as_compared(capabilities_load())
    assert read_with_the_ticket["payments.get_summary"].enabled is False
    # what the model is offered follows: the switched-off tool is not in the manifest
    assert "payments_get_summary" not in {t.name for t in tool_manifest(read_with_the_ticket)}
