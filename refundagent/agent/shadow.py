"""Model replay in shadow (docs/replay.md): another model or provider setting runs on recorded
tickets, and its drafts are compared with what happened.

The shadow agent gets the recorded run's first message and the same tools, but every read is
answered from the results recorded in that run's transcript, never from the shop's data as it is
now; a call that was never made then is answered `not_recorded`. Its draft is not decided by the
runtime: the gate decides it on the facts recorded with the ticket's decision
(approvals.replay.decision_record_replay), under the policy that decided it then. Nothing is
written to tickets, runs, drafts, approvals or the ledger: the ModelReplay row is the only write.
"""

import json
from dataclasses import dataclass, field
from datetime import timedelta
from decimal import Decimal

from django.conf import settings
from django.core.exceptions import ImproperlyConfigured
from django.utils import timezone

from approvals.gate import Outcome, Proposal
from approvals.models import DecisionRecord
from approvals.replay import decision_record_facts, decision_record_replay, policy_as_current
from ledger.exceptions import InvalidInput
from ledger.models import Tenant
from ledger.money import CENT

from ..models import ModelReplay, RefundDraft
from .prompts import NUDGE, SYSTEM_PROMPT
from .providers.anthropic import AnthropicProvider
from .providers.base import ModelTurn, Provider, ProviderError, ToolCall, Usage
from .providers.registry import provider_get
from .tools import CREATE_DRAFT, capabilities_load, result_text, tool_args_validate, tool_call_authorize, tool_manifest

DEFAULT_DAYS = 30
MAX_DAYS = 3650
MAX_LIMIT = 10_000
PROVIDERS = ("offline", "anthropic", "scripted")


def model_provider(*, name: str, model: str = "") -> Provider:
    """The provider a model replay runs: `name` as the registry knows it, with `model` if given."""
    if name == "anthropic" and model:
        return AnthropicProvider(model=model)
    provider = provider_get(name)
    if model:
        provider.model = model
    return provider


def _canonical(value) -> str:
    return json.dumps(value, sort_keys=True, default=str)


def recorded_tool_results(messages: list[dict]) -> list[tuple[str, str, dict]]:
    """(tool name, canonical arguments, tool_result block) of each call a recorded run answered."""
    uses, answered = {}, []
    for message in messages or []:
        for block in message.get("content") or []:
            if not isinstance(block, dict):
                continue
            if block.get("type") == "tool_use":
                uses[block.get("id")] = (block.get("name", ""), _canonical(block.get("input") or {}))
            elif block.get("type") == "tool_result" and block.get("tool_use_id") in uses:
                name, arguments = uses[block["tool_use_id"]]
                answered.append((name, arguments, block))
    return answered


def _recorded_answer(call: ToolCall, recorded) -> tuple[dict, bool]:
    """The recorded answer to this call: the same tool with the same arguments, else the same
    tool's answer (a model that words its arguments differently asks the same question)."""
    arguments = _canonical(call.input)
    exact = [block for name, args, block in recorded if name == call.name and args == arguments]
    same_tool = [block for name, _, block in recorded if name == call.name and not block.get("is_error")]
    found = (exact or same_tool or [None])[0]
    if found is None:
        value = {"error": "not_recorded", "message": "This call was not made on the recorded run: no result."}
        return {"type": "tool_result", "tool_use_id": call.id, "content": result_text(value), "is_error": True}, False
    return {
        "type": "tool_result",
        "tool_use_id": call.id,
        "content": found.get("content", ""),
        "is_error": bool(found.get("is_error")),
    }, True


@dataclass
class ShadowRun:
    draft: object = None  # CreateDraftArgs, or None: the shadow ended without one
    usage: Usage = field(default_factory=Usage)
    cost_usd: Decimal = Decimal("0")
    turns: int = 0
    denied: list = field(default_factory=list)
    not_recorded: list = field(default_factory=list)
    error: str = ""


def shadow_agent_run(*, first_message: dict, recorded, provider: Provider, customer_level: bool) -> ShadowRun:
    """The agent's loop in shadow: model turns, each call answered from `recorded`, until a draft,
    a second turn without a call, or the iteration budget. No write of any kind."""
    capabilities = capabilities_load()
    tools = tool_manifest(capabilities, customer_level=customer_level)
    offered = {tool.name for tool in tools}
    messages, shadow, nudged = [first_message], ShadowRun(), False
    for _ in range(settings.AGENT_MAX_ITERATIONS):
        try:
            turn: ModelTurn = provider.complete(
                system=SYSTEM_PROMPT,
                tools=tools,
                messages=messages,
                max_tokens=settings.AGENT_MAX_OUTPUT_TOKENS_PER_CALL,
            )
        except ProviderError as error:
            shadow.error = str(error)[:300]
            return shadow
        shadow.turns += 1
        for name in ("input_tokens", "output_tokens", "cache_creation_input_tokens", "cache_read_input_tokens"):
            setattr(shadow.usage, name, getattr(shadow.usage, name) + getattr(turn.usage, name))
        shadow.cost_usd += Decimal(provider.cost_usd(turn.usage))
        content = list(turn.content)
        present = {b.get("id") for b in content if isinstance(b, dict) and b.get("type") == "tool_use"}
        content += [
            {"type": "tool_use", "id": c.id, "name": c.name, "input": c.input}
            for c in turn.tool_calls
            if c.id not in present
        ]
        messages.append({"role": "assistant", "content": content})
        if not turn.tool_calls:
            if nudged:
                return shadow
            nudged = True
            messages.append({"role": "user", "content": [{"type": "text", "text": NUDGE}]})
            continue
        answers = []
        for call in turn.tool_calls:
            check = tool_call_authorize(call=call, capabilities=capabilities, offered=offered)
            if not check.allowed:
                shadow.denied.append(call.name)
                value = {"error": "denied", "reason": check.reason, "message": check.message}
                answers.append(
                    {"type": "tool_result", "tool_use_id": call.id, "content": result_text(value), "is_error": True}
                )
                continue
            if check.capability == CREATE_DRAFT:
                args, problems = tool_args_validate(capability=CREATE_DRAFT, arguments=call.input)
                if not problems:
                    shadow.draft = args
                    return shadow
                value = {"error": "invalid_arguments", "problems": problems}
                answers.append(
                    {"type": "tool_result", "tool_use_id": call.id, "content": result_text(value), "is_error": True}
                )
                continue
            answer, found = _recorded_answer(call, recorded)
            if not found:
                shadow.not_recorded.append(call.name)
            answers.append(answer)
        messages.append({"role": "user", "content": answers})
    return shadow


def _amount(value) -> str | None:
    return None if value is None else str(Decimal(value).quantize(CENT))


def ticket_shadow_compare(*, record: DecisionRecord, draft: RefundDraft, provider: Provider) -> dict:
    """Run the shadow agent on one recorded ticket and compare its draft with the recorded one."""
    run = draft.run
    shadow = shadow_agent_run(
        first_message=run.messages[0],
        recorded=recorded_tool_results(run.messages),
        provider=provider,
        customer_level=record.order_id is None,
    )
    args = shadow.draft
    codes, outcome = [], Outcome.ESCALATED
    if args is not None and record.order_id is not None:
        proposal = Proposal(
            recommendation=args.recommendation,
            amount=args.amount,
            policy_version=args.policy_version,
            customer_reply=args.customer_reply,
            destination=args.destination,
        )
        policy = policy_as_current(record.policy) if record.policy is not None else None
        verdict, _ = decision_record_replay(record=decision_record_facts(record), policy=policy, proposal=proposal)
        outcome, codes = verdict.outcome, list(verdict.codes)
    elif args is None:
        codes = ["no_draft"] if not shadow.error else ["provider_error"]
    recorded = {
        "recommendation": draft.recommendation,
        "amount": _amount(draft.amount),
        "outcome": record.outcome,
    }
    drafted = {
        "recommendation": args.recommendation if args is not None else None,
        "amount": _amount(args.amount) if args is not None else None,
        "outcome": outcome,
        "codes": codes,
    }
    same_draft = (recorded["recommendation"], recorded["amount"]) == (drafted["recommendation"], drafted["amount"])
    same_outcome = recorded["outcome"] == drafted["outcome"]
    return {
        "ticket": record.ticket_ref,
        "order": record.order_external_id,
        "recorded": recorded,
        "shadow": drafted,
        "same_draft": same_draft,
        "same_outcome": same_outcome,
        # The gate stopped a reply that promised a payment (the draft is escalated, not sent).
        "promise_stopped": "reply_promises_payment" in codes,
        "agreed": same_draft and same_outcome,
        "denied_calls": shadow.denied,
        "not_recorded_calls": shadow.not_recorded,
        "turns": shadow.turns,
        "tokens": shadow.usage.total,
        "input_tokens": shadow.usage.input_tokens,
        "output_tokens": shadow.usage.output_tokens,
        "cost_usd": str(shadow.cost_usd),
        "error": shadow.error,
    }


def model_replay_create(
    *, tenant: Tenant, provider: str, model: str = "", days: int = DEFAULT_DAYS, limit: int | None = None, user=None
) -> ModelReplay:
    """A queued model replay of `tenant`'s recorded tickets of the last `days` days (newest first,
    at most `limit`). InvalidInput, nothing written, for a bad provider, window or limit."""
    if provider not in PROVIDERS:
        raise InvalidInput(f"Unknown provider {provider!r}; one of {', '.join(PROVIDERS)}.", code="bad_provider")
    if not isinstance(days, int) or isinstance(days, bool) or not 1 <= days <= MAX_DAYS:
        raise InvalidInput(f"--days is a whole number from 1 to {MAX_DAYS}.", code="bad_days")
    if limit is not None and (isinstance(limit, bool) or not 1 <= limit <= MAX_LIMIT):
        raise InvalidInput(f"--limit is a whole number from 1 to {MAX_LIMIT}.", code="bad_limit")
    model = (model or "").strip()
    if len(model) > 100 or not model.isprintable():
        raise InvalidInput("--model is at most 100 printable characters.", code="bad_model")
    # Refused now rather than on every ticket: a provider that cannot run would "disagree" everywhere.
    if provider == "anthropic" and not settings.ANTHROPIC_API_KEY:
        raise InvalidInput("The anthropic provider needs ANTHROPIC_API_KEY.", code="provider_unavailable")
    try:
        model_provider(name=provider, model=model)
    except ImproperlyConfigured as error:
        raise InvalidInput(str(error), code="provider_unavailable") from None
    until = timezone.now()
    return ModelReplay.objects.create(
        tenant=tenant,
        provider=provider,
        model=model,
        window_days=days,
        limit=limit,
        since=until - timedelta(days=days),
        until=until,
        created_by=user,
    )


def model_replay_run(*, replay_id: int, provider: Provider | None = None) -> ModelReplay:
    """Run a queued model replay: each recorded ticket of the window (its newest agent decision)
    in shadow, compared with what happened. Writes only the ModelReplay row."""
    replay = ModelReplay.objects.select_related("tenant").get(pk=replay_id)
    if replay.status == ModelReplay.Status.DONE:
        return replay
    try:
        return _model_replay_run(replay, provider)
    except Exception as error:
        # The row says why; the task's log has the traceback.
        ModelReplay.objects.filter(pk=replay.pk).update(
            status=ModelReplay.Status.FAILED,
            error=f"{type(error).__name__}: {error}"[:2000],
            finished_at=timezone.now(),
        )
        raise


def _model_replay_run(replay: ModelReplay, provider: Provider | None) -> ModelReplay:
    if provider is None:
        provider = model_provider(name=replay.provider, model=replay.model)
    records = (
        DecisionRecord.objects.for_tenant(replay.tenant)
        .filter(
            source=DecisionRecord.Source.AGENT,
            ticket_ref__isnull=False,
            decided_at__gte=replay.since,
            decided_at__lt=replay.until,
        )
        .select_related("policy")
        .order_by("ticket_ref", "-decided_at", "-id")
        .distinct("ticket_ref")
    )
    chosen = sorted(records, key=lambda r: (r.decided_at, r.pk), reverse=True)[: replay.limit or None]
    drafts = {}
    for draft in (
        RefundDraft.objects.filter(ticket__tenant=replay.tenant, ticket_id__in=[r.ticket_ref for r in chosen])
        .select_related("run")
        .order_by("ticket_id", "-id")
    ):
        drafts.setdefault(draft.ticket_id, draft)
    chosen = [record for record in chosen if record.ticket_ref in drafts and drafts[record.ticket_ref].run.messages]
    ModelReplay.objects.filter(pk=replay.pk).update(status=ModelReplay.Status.RUNNING, total=len(chosen), done=0)
    rows, usage, cost = [], Usage(), Decimal("0")
    for done, record in enumerate(chosen, start=1):
        row = ticket_shadow_compare(record=record, draft=drafts[record.ticket_ref], provider=provider)
        rows.append(row)
        usage.input_tokens += row["input_tokens"]
        usage.output_tokens += row["output_tokens"]
        cost += Decimal(row["cost_usd"])
        ModelReplay.objects.filter(pk=replay.pk).update(done=done)
    agreed = sum(row["agreed"] for row in rows)
    result = {
        "tickets": len(rows),
        "agreed": agreed,
        "agreement": round(agreed / len(rows), 4) if rows else None,
        "different_draft": sum(not row["same_draft"] for row in rows),
        "different_outcome": sum(not row["same_outcome"] for row in rows),
        "promises_stopped": sum(row["promise_stopped"] for row in rows),
        "tokens": usage.input_tokens + usage.output_tokens,
        "cost_usd": str(cost),
        "differences": [row for row in rows if not row["agreed"]],
        "rows": rows,
    }
    ModelReplay.objects.filter(pk=replay.pk).update(
        status=ModelReplay.Status.DONE,
        done=len(rows),
        agreed=agreed,
        input_tokens=usage.input_tokens,
        output_tokens=usage.output_tokens,
        cost_usd=cost,
        result=result,
        finished_at=timezone.now(),
    )
    replay.refresh_from_db()
    return replay


def model_replay_summary(replay: ModelReplay) -> str:
    result = replay.result or {}
    agreement = result.get("agreement")
    return (
        f"replay_model provider={replay.provider} model={replay.model or '-'} tickets={result.get('tickets', 0)} "
        f"agreed={result.get('agreed', 0)} agreement={'-' if agreement is None else f'{agreement:.4f}'} "
        f"tokens={result.get('tokens', 0)} cost_usd={result.get('cost_usd', '0')}"
    )
