"""Refunds proposed by a person (support or finance) on a ticket the agent could not finish.

A proposal becomes an ApprovalRequest exactly like the agent's (approvals.services.requests): canonical
args and hash, idempotency key, expiry, maker-checker (the proposer is `requested_by` and the
ticket's filer `filed_by`, and approvals.services.decisions lets neither of them decide it), and the same
execution, verification and ledger path. What differs is who proposes, and that a person may ask
for a policy exception.

The hard limits hold and cannot be waived: the amount must be within what is still refundable
(on the named items), in the order's currency, to one of the order's customer's own payment
methods. A refusal writes nothing (InvalidInput, 422). A policy exception waives the policy's
`waivable_rules` only (policy data: by default the window and the order status), needs a written
reason, and two distinct approvers, neither of them a maker, whatever the amount.

A proposal that becomes a request is a gate decision like the agent's: its facts, who proposed
it and the rules it waived are recorded (approvals.decision_records) in the same transaction, so a
policy replay decides it again with the same waivers (docs/replay.md). A refused one is not.
"""

import uuid
from collections.abc import Callable
from datetime import datetime

from django.db import transaction
from django.utils import timezone

from ledger.exceptions import InvalidInput
from ledger.models import Order, PaymentMethod
from ledger.money import money_check_currency, money_parse
from ledger.selectors import order_refund_position
from ledger.tenancy import user_require_role

from ..decision_records import decision_record_create
from ..gate import GateVerdict, Outcome, Proposal, policy_current, policy_gate_evaluate
from ..locks import order_lock
from ..models import ApprovalRequest, DecisionRecord
from .requests import approval_request_create

MAX_REASON_LENGTH = 2000
# What a policy's `waivable_rules` may name: the gate's rules a person's exception can go outside.
WAIVABLE = frozenset({"window", "order_status"})
# The waivable rules in words: what a refusal tells a person, and the label table's entries
# (refundagent/labels.py reads them from here).
# The gate's refusal code for each waivable rule.
RULE_OF_CODE = {"outside_window": "window", "status_not_eligible": "order_status"}
WAIVABLE_RULE_WORDS = {"window": "the refund window", "order_status": "the order status rule"}


def exception_rules_waive(
    *, evaluate: Callable[[frozenset[str]], GateVerdict], waivable: frozenset[str], waive: frozenset[str] = frozenset()
) -> tuple[GateVerdict, frozenset[str]]:
    """The gate's verdict on an exception (`evaluate(waive)`), and the rules it went outside: from
    `waive`, each rule of `waivable` the gate names as broken is waived, one at a time, so the
    request, finance and the evaluator see "the refund window", not every rule. A policy replay
    decides a recorded exception the same way (approvals.replay)."""
    verdict = evaluate(waive)
    while (broken := RULE_OF_CODE.get(verdict.codes[0] if verdict.codes else "")) in waivable - waive:
        waive |= {broken}
        verdict = evaluate(waive)
    return verdict, waive


def approval_proposal_create(
    *,
    user,
    order: Order,
    amount,
    reason: str,
    exception: bool = False,
    items: list[str] | None = None,
    refund_to: PaymentMethod | None = None,
    currency: str | None = None,
    ticket_ref: int | None = None,
    filed_by=None,
    trace_id: str = "",
    idempotency_key: str | None = None,
    now: datetime | None = None,
) -> ApprovalRequest:
    """A person proposes an exact refund on `order`: a pending ApprovalRequest with origin
    `human`, requested by `user`; `filed_by` is the ticket's filer, a maker too. Call inside the
    caller's transaction (the ticket's move goes with it); the order row is locked first
    (approvals.locks), so what is refundable is read under the lock the execution takes too.

    `refund_to` None is the order's original payment method. InvalidInput (422) on any refusal:
    above the refundable amount, another currency, a method that is not the customer's, an
    exception without a reason, or a rule the policy does not let a person waive."""
    user_require_role(user, "support", "finance")
    now = now or timezone.now()
    amount = money_parse(amount)
    if amount <= 0:
        raise InvalidInput("The amount must be positive.", code="amount_not_positive")
    reason = (reason or "").strip()
    if len(reason) > MAX_REASON_LENGTH:
        raise InvalidInput(f"The reason is longer than {MAX_REASON_LENGTH} characters.", code="reason_too_long")
    if exception and not reason:
        raise InvalidInput("A policy exception needs a written reason.", code="exception_reason_required")
    items = [str(i).strip() for i in (items or []) if str(i).strip()]

    with transaction.atomic():
        order = order_lock(order_id=order.pk)
        order = Order.objects.select_related("tenant", "customer").get(pk=order.pk)
        money_check_currency(amount=amount, currency=order.currency, field="amount")
        if currency and currency.upper() != order.currency:
            raise InvalidInput(
                f"The proposal is in {currency}, order {order.external_id} in {order.currency}.",
                code="currency_mismatch",
            )
        if refund_to is not None and refund_to.customer_id != order.customer_id:
            raise InvalidInput(
                f"Payment method {refund_to.external_id} is not one of customer {order.customer.external_id}'s.",
                code="foreign_destination",
            )
        position = order_refund_position(order)
        cap = position.refundable
        if items:
            match = position.items_match(items)
            if match.over_quantity and not match.not_on_order:
                raise InvalidInput(
                    "; ".join(
                        f"{item_id} is named {named} times, but order {order.external_id} has {units} unit(s) of it"
                        for item_id, (named, units) in match.over_quantity.items()
                    )
                    + ". Name an item once per unit.",
                    code="items_exceed_quantity",
                )
            if match.unmatched:
                raise InvalidInput(
                    f"Items {', '.join(match.unmatched)} are not refundable on {order.external_id}.",
                    code="items_not_refundable",
                )
            cap = min(cap, match.value)
        if amount > cap:
            raise InvalidInput(
                f"{amount} {order.currency} is more than the {cap} {order.currency} still refundable"
                + (f" on items {', '.join(items)}" if items else f" on {order.external_id}")
                + ".",
                code="amount_above_refundable",
            )
        policy = policy_current(order.tenant)
        if policy is None:
            raise InvalidInput("The tenant has no current refund policy.", code="policy_missing")
        waivable = frozenset(policy.waivable_rules or ()) & WAIVABLE if exception else frozenset()

        proposal = Proposal(recommendation="refund", amount=amount, policy_version=policy.version)

        def evaluate(waive):
            return policy_gate_evaluate(
                order=order,
                policy=policy,
                proposal=proposal,
                requested_amount=amount,
                item_ids=items,
                refund_to=refund_to,
                now=now,
                waive=waive,
                # Read once under the lock: what the gate decides on is what the record keeps.
                position=position,
            )

        verdict, waive = exception_rules_waive(evaluate=evaluate, waivable=waivable)
        if verdict.outcome != Outcome.APPROVAL_REQUIRED or verdict.allowed_amount != amount:
            hint = (
                ""
                if exception
                else (
                    " A policy exception (two finance approvers) may go outside "
                    + (
                        " and ".join(WAIVABLE_RULE_WORDS.get(rule, rule) for rule in sorted(policy.waivable_rules))
                        or "no rule of this policy"
                    )
                    + "."
                )
            )
            raise InvalidInput(
                f"The policy gate refuses this refund: {verdict.reason}{hint}",
                code=(verdict.codes or ["not_eligible"])[0],
                details={"gate": verdict.as_dict()},
            )
        request, created = approval_request_create(
            order=order,
            policy=policy,
            verdict=verdict,
            idempotency_key=idempotency_key or f"proposal:{order.tenant.slug}:{ticket_ref}:{uuid.uuid4().hex}",
            requested_by=user,
            filed_by=filed_by,
            ticket_ref=ticket_ref,
            trace_id=trace_id,
            origin=ApprovalRequest.Origin.HUMAN,
            policy_exception=exception,
            waived_rules=sorted(waive),
            proposal_reason=reason,
        )
        if created:  # a key replayed returns the request its first call made, and recorded
            decision_record_create(
                tenant=order.tenant,
                order=order,
                policy=policy,
                proposal=proposal,
                verdict=verdict,
                position=position,
                requested_amount=amount,
                requested_currency=None,
                item_ids=verdict.item_ids,
                refund_to=refund_to,
                now=now,
                ticket_ref=ticket_ref,
                source=DecisionRecord.Source.PROPOSAL,
                required_approvals=request.required_approvals,
                approval_pk=request.pk,
                proposed_by=user,
                policy_exception=exception,
                waived_rules=waive,
            )
    return request
