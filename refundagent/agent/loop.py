"""The agent loop: durable, budgeted, gated. The model proposes; the runtime decides.

One iteration = budget check -> one model call -> each tool call through the gate (and, for a
valid read, executed tenant-scoped) -> the turn and its results persisted on the AgentRun,
with the step's trace events, in one transaction, before the next model call. The transcript on
AgentRun.messages is the loop's state: a resumed run looks at its last message and carries on
from there.

Exactly once, whatever is redelivered:
- the run is claimed by compare-and-set (ticket queued -> running, one open run per ticket), in
  one transaction with the run it starts; the claim holds the Celery task id, so a redelivered
  message (same id) takes its run over at once, while another task may only once the lease
  expired;
- every persist is a compare-and-set on that claim: a worker that lost it stops writing;
- the only write the agent can make, refunds.create_draft, is decided by `agent.decision` in
  one transaction with the ticket's stop and the run's: the draft (one per run), the gate's
  verdict, the approval request (keyed by the draft) and both stops commit together, so a
  resumed run finds the ticket stopped and does nothing more.
No on_commit and no second connection: the loop also runs inside a caller's transaction.

A model that ends its turn without a draft is nudged once, then the ticket is escalated.
Budget and no-progress stops send the ticket to the human queue (status escalated, stop
reason budget_exhausted / no_progress); invalid arguments past the retries, a provider error
that retrying cannot fix, and an outage longer than AGENT_PROVIDER_OUTAGE_SECONDS stop it
failed (the last one is run again by the sweep). A model call waits for a slot of the
concurrency caps (agent.model_slots) and holds no database connection. Every move of the ticket goes through `ticket_state` (`ticket_transition`).

Read top-down: `agent_run_ticket` claims the run and hands it to `_Loop.go`, which steps until
a stop; `step` makes one model call, `act` answers its tool calls through `handle`, and a draft
ends the run in `decide`; every other stop ends it in `finish`. Plumbing comes last.
"""

import functools
import json
import random
import time
import uuid
from dataclasses import dataclass
from datetime import timedelta
from decimal import Decimal

from django.conf import settings
from django.db import connection, transaction
from django.db.models import OuterRef, Q, Subquery
from django.utils import timezone

from approvals.models import ApprovalRequest
from ledger.retry import retry_delay

from ..exceptions import TicketStateConflict
from ..expressions import CompiledOnce
from ..models import AgentRun, Ticket, TraceEvent
from ..redaction import sensitive_values_annotations, sensitive_values_for_ticket
from ..ticket_state import ticket_transition
from ..tracing import trace_event_build, trace_events_write
from .decision import DraftDecision, agent_draft_decide
from .model_slots import model_slot
from .prompts import NUDGE, SYSTEM_PROMPT, ticket_first_message
from .providers.base import ModelTurn, Provider, ProviderError, ToolCall, Usage
from .providers.registry import provider_get
from .reply_check import ReplyCheck, reply_check_needed, reply_model_check
from .spans import agent_run_span, model_complete, step_span, tool_answer
from .tools import (
    CREATE_DRAFT,
    ToolFailed,
    api_name,
    capabilities_annotation,
    capabilities_load,
    capabilities_of,
    draft_amount_check,
    result_text,
    ticket_cross_tenant,
    tool_args_validate,
    tool_call_authorize,
    tool_execute,
    tool_manifest,
    tool_scope_authorize,
)

# Read with the ticket: the first message tells the model finance's note only on a ticket sent
# back (prompts.finance_review_of), and most tickets have no request yet.
last_approval_status = Subquery(
    ApprovalRequest.objects.filter(ticket_ref=OuterRef("pk")).order_by("-id").values("status")[:1]
)


@functools.cache
def _tickets_for_run():
    """The run's one read of its ticket: its order, customer, tenant and filer, finance's last
    word, the values to redact and the capability registry, in one query. Built once per
    process and filtered per run: building its subqueries costs more than running them, and so
    does compiling them, so each is compiled once too (they refer to the ticket's row, not to
    its id)."""
    annotations = {
        "last_approval_status": last_approval_status,
        **sensitive_values_annotations(),
        **capabilities_annotation(),
    }
    return Ticket.objects.select_related(
        "tenant", "order__tenant", "order__customer", "customer", "created_by"
    ).annotate(**{name: CompiledOnce(expression) for name, expression in annotations.items()})


@dataclass
class _Stop(Exception):
    """Ends the run: the ticket moves (from running) to `status`, with an explicit reason."""

    status: str
    stop_reason: str
    detail: str
    provider_outage: bool = False
    span_ok = True  # a stop, not an error, for the OpenTelemetry spans it leaves


class _Done(Exception):
    """The decision stopped the run (already persisted)."""

    span_ok = True


class LostClaim(Exception):
    """Another task took this run over (lease expired) or it was stopped: stop writing."""

    span_ok = True


def agent_run_ticket(
    *, ticket_id: int, provider: Provider | None = None, task_id: str | None = None
) -> AgentRun | None:
    """Run (or resume) the agent on a ticket until it stops. A ticket that is not queued, or
    whose run another live task holds, is left alone: the ticket's newest run is returned."""
    provider = provider or provider_get()
    task_id = task_id or f"sync-{uuid.uuid4().hex}"
    claimed = agent_run_claim(ticket_id=ticket_id, task_id=task_id, provider=provider)
    if claimed is None:
        return AgentRun.objects.filter(ticket_id=ticket_id).order_by("-created_at", "-id").first()
    run, how = claimed
    try:
        loop = _Loop(run=run, provider=provider, task_id=task_id)
        with agent_run_span(ticket=loop.ticket, run=run, how=how):
            loop.go(how)
    except LostClaim:
        pass  # the lost steps and their trace events were never written
    return run


def agent_run_claim(*, ticket_id: int, task_id: str, provider: Provider) -> tuple[AgentRun, str] | None:
    """Claim the ticket's run for this task: a queued ticket starts a new run; a running one is
    taken over by the same task id (a redelivery) or once its lease expired. Else None."""
    now = timezone.now()
    # The claim needs only the ticket's id; the loop loads the ticket once it holds the run. The
    # ticket's move and the run's row commit together: the run exists only if the move matched,
    # and a run that cannot be inserted leaves the ticket queued.
    with transaction.atomic():
        if ticket_transition(ticket=Ticket(pk=ticket_id), to=Ticket.Status.RUNNING, detail="", updated_at=now):
            run = AgentRun.objects.create(
                ticket_id=ticket_id,
                status=AgentRun.Status.RUNNING,
                provider=provider.name,
                model=getattr(provider, "model", "") or "",
                claimed_by=task_id,
                claimed_at=now,
                lease_expires_at=now + _lease(),
                started_at=now,
            )
            return run, "claimed"
    taken = (
        AgentRun.objects.filter(
            ticket_id=ticket_id, status=AgentRun.Status.RUNNING, ticket__status=Ticket.Status.RUNNING
        )
        .filter(Q(claimed_by=task_id) | Q(lease_expires_at__lt=now))
        # The task that takes the run over is not waiting on the provider (yet): a dead one's mark goes.
        .update(claimed_by=task_id, claimed_at=now, lease_expires_at=now + _lease(), provider_waiting_since=None)
    )
    if taken == 1:
        return AgentRun.objects.get(ticket_id=ticket_id, status=AgentRun.Status.RUNNING), "resumed"
    return None


def _lease() -> timedelta:
    return timedelta(seconds=settings.AGENT_LEASE_SECONDS)


def _database_release():
    """Give the connection back (to the pool, if any) while the run waits on the model: nothing
    is held across a model call. Inside a caller's transaction (an eval, a test) it stays."""
    if not connection.in_atomic_block:
        connection.close()


class _Loop:
    """One claimed run of the agent on one ticket, from its first (or resumed) step to its stop."""

    def __init__(self, *, run: AgentRun, provider: Provider, task_id: str):
        self.run = run
        self.provider = provider
        self.task_id = task_id
        self.ticket = _tickets_for_run().get(pk=run.ticket_id)
        run.ticket = self.ticket
        self.order = self.ticket.order  # None on a customer-level ticket until the decision
        self.sensitive = sensitive_values_for_ticket(self.ticket)
        self.messages: list[dict] = list(run.messages or [])
        self.state: dict = {
            "results": {},
            "seen": {},
            "evidence": 0,
            "repeats": 0,
            "nudged": False,
            **(run.state or {}),
        }
        self.capabilities = None
        self.offered: set[str] = set()
        # The trace events recorded since the last persist: it writes them with the step.
        self.pending: list[TraceEvent] = []
        # Set while the provider answers 429/529 (written with each wait, so the ticket page shows
        # it); every persist writes it, so the first one after an answer or a stop clears it.
        self.provider_waiting_since = None
        # The run's row while this task holds it: every persist is a compare-and-set on it.
        self.held = AgentRun.objects.filter(pk=run.pk, claimed_by=task_id, status=AgentRun.Status.RUNNING)

    # --- the loop ---------------------------------------------------------------------

    def go(self, how: str):
        """Step until a stop: a decided draft (_Done) or any other stop (_Stop, then finish)."""
        self.trace(
            span="run",
            status="running",
            decision=how,
            reason=f"Run {self.run.pk} {how} by task {self.task_id} ({self.provider.name}).",
            data={"provider": self.provider.name, "model": self.run.model, "task": self.task_id},
        )
        try:
            if ticket_cross_tenant(self.ticket):
                # Before the model sees anything: no evidence of another tenant enters its context.
                self.trace(
                    span="policy",
                    status="denied",
                    decision="deny",
                    reason="cross_tenant",
                    data={"message": "The ticket's order or customer is outside the ticket's tenant."},
                )
                raise _Stop(
                    Ticket.Status.DENIED,
                    Ticket.StopReason.DENIED,
                    "cross_tenant: the ticket's order or customer belongs to another tenant; nothing was read.",
                )
            if self.ticket.customer_id is None:
                # A ticket from an unknown or unverified sender is never a refund path: a person
                # matches it to a customer first (the inbox files it escalated; this holds if
                # someone queues it anyway).
                raise _Stop(
                    Ticket.Status.ESCALATED,
                    Ticket.StopReason.ESCALATED,
                    "The ticket has no customer (an unknown or unverified sender): a person must match it; "
                    "the agent read nothing.",
                )
            if not self.messages:
                self.messages = [ticket_first_message(self.ticket)]
            while True:
                with step_span(iteration=self.run.iterations + 1):
                    self.step()
        except _Stop as stop:
            self.finish(stop)
        except _Done:
            pass

    def step(self):
        """One model call and the answers to its tool calls, or the resumption of a persisted turn."""
        last = self.messages[-1]
        if last.get("role") == "assistant":
            # Resuming: the last turn was persisted but not yet answered.
            calls = [b for b in last.get("content") or [] if isinstance(b, dict) and b.get("type") == "tool_use"]
            self.tools_refresh()
            if calls:
                self.act(calls)
            else:
                self.no_call()
            return
        if self.capabilities is None:
            # Read once per run, with the ticket; a resumed turn (above: the decision on a draft, or
            # a crash) reads them again, so switching refunds.create_draft off still stops a draft
            # in flight.
            self.tools_refresh(capabilities_of(self.ticket))
        if api_name(CREATE_DRAFT) not in self.offered:
            raise _Stop(
                Ticket.Status.ESCALATED,
                Ticket.StopReason.ESCALATED,
                "refunds.create_draft is switched off (kill switch): the ticket goes to the human queue.",
            )
        max_tokens = self.budget_check(model_call=True)
        turn, duration_ms = self.model_call(max_tokens)
        self.account(turn)
        content = list(turn.content)
        present = {b.get("id") for b in content if isinstance(b, dict) and b.get("type") == "tool_use"}
        for call in turn.tool_calls:
            if call.id not in present:
                content.append({"type": "tool_use", "id": call.id, "name": call.name, "input": call.input})
        self.messages.append({"role": "assistant", "content": content})
        usage = turn.usage
        self.trace(
            span="model",
            status="ok",
            decision=turn.stop_reason or "",
            duration_ms=duration_ms,
            input_tokens=usage.input_tokens,
            output_tokens=usage.output_tokens,
            reason=f"{len(turn.tool_calls)} tool call(s)" if turn.tool_calls else "no tool call",
            data={
                "model": turn.model or self.run.model,
                "max_tokens": max_tokens,
                "cache_creation_input_tokens": usage.cache_creation_input_tokens,
                "cache_read_input_tokens": usage.cache_read_input_tokens,
                "cost_usd": str(self.provider.cost_usd(usage)),
                "tool_calls": [c.name for c in turn.tool_calls],
                "text": (turn.text or "")[:1000],
            },
        )
        calls = [b for b in content if isinstance(b, dict) and b.get("type") == "tool_use"]
        if calls:
            self.act(calls)
        else:
            self.no_call()

    def model_call(self, max_tokens: int) -> tuple[ModelTurn, int]:
        """One model call, in a slot of the concurrency caps and without a database connection
        (the run holds none while the model thinks: a worker keeps ~100 runs waiting on ~10
        connections). A transient provider error (429, overloaded, 5xx, timeout) is waited out,
        for its retry-after or a backoff, with the lease renewed; only an outage longer than
        AGENT_PROVIDER_OUTAGE_SECONDS stops the run, `failed` and run again later by the sweep."""
        outage_started = None
        attempt = 0
        while True:
            started = time.monotonic()
            try:
                with model_slot(tenant_id=self.ticket.tenant_id, waiting=self.waited) as slot_wait:
                    self.state["waited_seconds"] = self.state.get("waited_seconds", 0) + slot_wait
                    started = time.monotonic()
                    _database_release()
                    turn = model_complete(
                        self.provider,
                        sensitive=self.sensitive,
                        system=SYSTEM_PROMPT,
                        tools=self.tools,
                        messages=self.messages,
                        max_tokens=max_tokens,
                    )
                self.provider_waiting_since = None
                return turn, int((time.monotonic() - started) * 1000)
            except ProviderError as exc:
                duration_ms = int((time.monotonic() - started) * 1000)
                now = time.monotonic()
                outage_started = outage_started if outage_started is not None else started
                attempt += 1
                wait = exc.retry_after
                if wait is None:
                    backoff = retry_delay(attempts=attempt, first=2, cap=settings.AGENT_PROVIDER_BACKOFF_MAX_SECONDS)
                    wait = backoff * random.uniform(0.5, 1.0)
                outage = now - outage_started
                give_up = not exc.transient or outage + wait > settings.AGENT_PROVIDER_OUTAGE_SECONDS
                if give_up:
                    self.provider_waiting_since = None
                elif self.provider_waiting_since is None:
                    self.provider_waiting_since = timezone.now()
                self.trace(
                    span="model",
                    status="error",
                    decision="provider_error" if give_up else "provider_wait",
                    reason=str(exc)[:200],
                    duration_ms=duration_ms,
                    data={
                        "status_code": exc.status_code,
                        "transient": exc.transient,
                        "attempt": attempt,
                        "wait_seconds": None if give_up else round(wait, 3),
                        "outage_seconds": round(outage, 3),
                        "waiting_since": self.provider_waiting_since.isoformat()
                        if self.provider_waiting_since
                        else None,
                    },
                )
                if not exc.transient:
                    raise _Stop(
                        Ticket.Status.FAILED, Ticket.StopReason.FAILED, f"The model provider failed: {exc}"
                    ) from None
                if give_up:
                    raise _Stop(
                        Ticket.Status.FAILED,
                        Ticket.StopReason.FAILED,
                        f"The model provider was unavailable for {int(outage)} s ({attempt} attempts; last: {exc}). "
                        "Nothing was decided; the ticket runs again when the provider is back, or a person re-runs it.",
                        provider_outage=True,
                    ) from None
                # Written now, not with the next step: the ticket shows the wait while it lasts.
                self.persist()
                self.pause(wait)

    def pause(self, seconds: float):
        """Wait out a provider's outage without a database connection, renewing the lease."""
        deadline = time.monotonic() + seconds
        while (left := deadline - time.monotonic()) > 0:
            time.sleep(min(left, settings.AGENT_LEASE_SECONDS / 3))
            self.waited(seconds - max(0.0, deadline - time.monotonic()))
        self.state["waited_seconds"] = self.state.get("waited_seconds", 0) + seconds

    def waited(self, _seconds: float):
        """Renew the claim's lease during a wait, so no sweep takes the run over meanwhile."""
        if self.held.update(lease_expires_at=timezone.now() + _lease()) != 1:
            raise LostClaim(f"run {self.run.pk} is no longer held by {self.task_id}")
        _database_release()

    def act(self, blocks: list[dict]):
        """Answer a turn's tool calls, persisting after each, so a crash never executes one twice."""
        results = self.state.setdefault("results", {})
        for n, block in enumerate(blocks):
            if block["id"] in results:
                continue  # answered before a crash: never executed twice
            call = ToolCall(id=block["id"], name=str(block.get("name", "")), input=block.get("input") or {})
            if call.name == api_name(CREATE_DRAFT) and self.state.get("decision_step") != call.id:
                # The runtime's decision on a draft is a step of its own: the proposal is persisted
                # first, so a worker that dies while deciding resumes with this same proposal and
                # no new model call (step() resumes an unanswered assistant turn).
                self.state["decision_step"] = call.id
                self.persist()
                return
            self.budget_check(model_call=False)
            results[call.id] = tool_answer(call, self.handle, sensitive=self.sensitive)
            if n < len(blocks) - 1:
                self.persist()
        self.messages.append({"role": "user", "content": [results[b["id"]] for b in blocks]})
        self.state["results"] = {}
        self.persist()

    def no_call(self):
        """A turn without a tool call: nudge the model once, then a person decides."""
        if self.state.get("nudged"):
            raise _Stop(
                Ticket.Status.ESCALATED,
                Ticket.StopReason.ESCALATED,
                "The agent ended without recording a recommendation: a person decides.",
            )
        self.state["nudged"] = True
        self.messages.append({"role": "user", "content": [{"type": "text", "text": NUDGE}]})
        self.persist()

    # --- one tool call ----------------------------------------------------------------

    def handle(self, call: ToolCall) -> dict:
        """Authorize, validate and scope one call; a draft goes to the decision, a read is executed."""
        check = tool_call_authorize(call=call, capabilities=self.capabilities, offered=self.offered)
        if not check.allowed:
            self.trace(
                span="policy",
                status="denied",
                decision="deny",
                reason=check.reason,
                tool=check.capability or call.name,
                data={"tool": call.name, "args": call.input, "message": check.message},
            )
            if check.capability == CREATE_DRAFT and check.reason == "capability_disabled":
                raise _Stop(
                    Ticket.Status.ESCALATED,
                    Ticket.StopReason.ESCALATED,
                    "refunds.create_draft is switched off (kill switch): the ticket goes to the human queue.",
                )
            self.progress_check(call)
            return self._result(call, {"error": "denied", "reason": check.reason, "message": check.message}, error=True)
        capability = check.capability
        args, problems = tool_args_validate(capability=capability, arguments=call.input)
        if problems:
            return self.invalid_arguments(call, capability, problems)
        scope = tool_scope_authorize(ticket=self.ticket, args=args)
        if not scope.allowed:
            self.trace(
                span="policy",
                status="denied",
                decision="deny",
                reason=scope.reason,
                tool=capability,
                data={"args": call.input, "message": scope.message},
            )
            self.progress_check(call)
            return self._result(call, {"error": "denied", "reason": scope.reason, "message": scope.message}, error=True)
        if capability == CREATE_DRAFT:
            # The amount's places are checked against the currency of the order it is about,
            # known only now; the model is told, as for any invalid argument.
            problems = draft_amount_check(args=args, order=scope.order)
            if problems:
                return self.invalid_arguments(call, capability, problems)
            self.decide(call, args, scope.order)  # always stops the run
        if self.progress_check(call):
            return self._result(
                call,
                {
                    "error": "repeated_call",
                    "message": "You already made this exact call and "
                    "nothing has changed since: its result is above. Decide now with "
                    "refunds_create_draft.",
                },
                error=True,
            )
        started = time.monotonic()
        try:
            value = tool_execute(capability=capability, ticket=self.ticket, order=scope.order)
        except ToolFailed as exc:
            self.trace(
                span="tool",
                status="error",
                decision="no_result",
                tool=capability,
                reason=str(exc)[:200],
                duration_ms=int((time.monotonic() - started) * 1000),
                data={"args": call.input},
            )
            return self._result(call, {"error": "no_result", "message": str(exc)}, error=True)
        self.state["evidence"] = self.state.get("evidence", 0) + 1
        self.state["seen"][call.name + ":" + json.dumps(call.input, sort_keys=True, default=str)] = self.state[
            "evidence"
        ]
        self.trace(
            span="tool",
            status="ok",
            decision="allowed",
            tool=capability,
            duration_ms=int((time.monotonic() - started) * 1000),
            data={"args": call.input, "result": value},
        )
        return self._result(call, value)

    def invalid_arguments(self, call: ToolCall, capability: str, problems: list[dict]) -> dict:
        """Tell the model what is wrong with its arguments; fail the run past the retries allowed."""
        self.run.invalid_args_retries += 1
        tries, allowed = self.run.invalid_args_retries, settings.AGENT_MAX_INVALID_ARGS_RETRIES
        summary = "; ".join(f"{p['field']}: {p['problem']}" for p in problems)
        self.trace(
            span="tool",
            status="error",
            decision="invalid_args",
            tool=capability,
            reason=summary[:200],
            data={"args": call.input, "problems": problems, "attempt": tries},
        )
        if tries > allowed:
            raise _Stop(
                Ticket.Status.FAILED,
                Ticket.StopReason.FAILED,
                f"The model sent invalid arguments {tries} times (at most "
                f"{allowed} retries); last, to {call.name}: {summary}",
            )
        return self._result(
            call,
            {
                "error": "invalid_arguments",
                "tool": call.name,
                "problems": problems,
                "retries_left": allowed - tries + 1,
            },
            error=True,
        )

    def progress_check(self, call: ToolCall) -> bool:
        """True if this exact call was made before and nothing new was learned since."""
        signature = call.name + ":" + json.dumps(call.input, sort_keys=True, default=str)
        seen, evidence = self.state.setdefault("seen", {}), self.state.get("evidence", 0)
        repeated = seen.get(signature) == evidence
        seen[signature] = evidence
        if not repeated:
            return False
        self.state["repeats"] = self.state.get("repeats", 0) + 1
        allowed = settings.AGENT_MAX_REPEATED_CALLS
        if self.state["repeats"] > allowed:
            self.trace(
                span="policy",
                status="denied",
                decision="no_progress",
                tool=call.name,
                reason="The same call was repeated without new evidence.",
                data={"args": call.input},
            )
            raise _Stop(
                Ticket.Status.ESCALATED,
                Ticket.StopReason.NO_PROGRESS,
                f"No progress: the agent repeated {call.name} with the same "
                "arguments and nothing new was learned. A person takes the ticket from here.",
            )
        return True

    @staticmethod
    def _result(call: ToolCall, value: dict, *, error: bool = False) -> dict:
        return {"type": "tool_result", "tool_use_id": call.id, "content": result_text(value), "is_error": error}

    # --- the end of a run -------------------------------------------------------------

    def decide(self, call: ToolCall, args, order):
        """The runtime's decision on the draft (agent.decision). Always stops the run."""
        check = self.reply_check(args.customer_reply)
        recorded = len(self.pending)
        try:
            agent_draft_decide(
                run=self.run,
                ticket=self.ticket,
                args=args,
                raw_args=call.input,
                order=order,
                sensitive=self.sensitive,
                trace=self.trace,
                reply_model_claim=check.claim,
                stop_run=lambda decision: self.stop_decided(call, decision),
            )
        except TicketStateConflict:
            # A person changed the ticket meanwhile: the decision rolled back, its events are
            # dropped, the run stops here.
            del self.pending[recorded:]
            raise _Stop(
                Ticket.Status.ESCALATED,
                Ticket.StopReason.ESCALATED,
                "The ticket was changed by a person while the agent ran.",
            ) from None
        raise _Done()

    def reply_check(self, reply: str) -> ReplyCheck:
        """The reply's second model check (agent.reply_check), made like the loop's own calls: in
        a model slot, with no database connection held, its tokens and cost counted in the run
        (persisted with the decision's stop). Not an iteration: the model's turn count stays."""
        if not reply_check_needed(reply):
            return ReplyCheck()
        with model_slot(tenant_id=self.ticket.tenant_id, waiting=self.waited):
            _database_release()
            check = reply_model_check(reply)
        self.usage_add(check.usage, check.cost_usd)
        return check

    def stop_decided(self, call: ToolCall, decision: DraftDecision):
        """Inside the decision's transaction: answer the draft call and stop the run with it."""
        self.messages.append({"role": "user", "content": [self._result(call, decision.result)]})
        self.state["results"] = {}
        self.trace(
            span="stop",
            status=decision.status,
            decision=decision.status,
            reason=decision.detail[:200],
            data={"iterations": self.run.iterations, "tokens": self.tokens_used(), "cost_usd": str(self.run.cost_usd)},
        )
        self.persist(
            status=AgentRun.Status.STOPPED,
            stop_reason=decision.stop_reason,
            stop_detail=decision.detail,
            finished_at=decision.decided_at,
        )

    def finish(self, stop: _Stop):
        """Every stop but a decided draft: the ticket moves only if the loop still holds it running."""
        now = timezone.now()
        if stop.provider_outage:
            self.state["provider_outage"] = True  # the sweep runs the ticket again (refundagent.sweep)
        with transaction.atomic():
            moved = ticket_transition(
                ticket=self.ticket,
                to=stop.status,
                only_from={Ticket.Status.RUNNING},
                stop_reason=stop.stop_reason,
                detail=stop.detail,
                updated_at=now,
            )
            self.trace(
                span="stop",
                status=stop.status,
                decision=stop.stop_reason,
                reason=stop.detail[:200],
                data={
                    "iterations": self.run.iterations,
                    "tokens": self.tokens_used(),
                    "cost_usd": str(self.run.cost_usd),
                    "ticket_updated": moved,
                },
            )
            self.persist(
                status=AgentRun.Status.STOPPED, stop_reason=stop.stop_reason, stop_detail=stop.detail, finished_at=now
            )

    # --- plumbing ---------------------------------------------------------------------

    def trace(self, **kwargs):
        """Record a trace event; the next persist writes it with its step."""
        self.pending.append(trace_event_build(ticket=self.ticket, run=self.run, sensitive=self.sensitive, **kwargs))

    def persist(self, **extra):
        """Write the loop's state to the run, by compare-and-set on this task's claim, with the
        trace events recorded since the last persist, in one transaction (the caller's, if any):
        a worker that lost its claim writes neither."""
        run = self.run
        fields = {
            "messages": self.messages,
            "state": self.state,
            "iterations": run.iterations,
            "invalid_args_retries": run.invalid_args_retries,
            "input_tokens": run.input_tokens,
            "output_tokens": run.output_tokens,
            "cache_creation_input_tokens": run.cache_creation_input_tokens,
            "cache_read_input_tokens": run.cache_read_input_tokens,
            "cost_usd": run.cost_usd,
            "model": run.model,
            "lease_expires_at": timezone.now() + _lease(),
            "provider_waiting_since": self.provider_waiting_since,
            **extra,
        }
        with transaction.atomic(savepoint=False):
            held = self.held.update(**fields) == 1
            if held:
                # The compare-and-set locked the run's row: the lock its ticket's trace is
                # numbered under while it runs (refundagent.tracing).
                trace_events_write(self.pending, locked=True)
        if not held:
            # Nothing was written: a caller's transaction goes on unharmed.
            raise LostClaim(f"run {run.pk} is no longer held by {self.task_id}")
        self.pending = []
        for key, value in fields.items():
            setattr(run, key, value)

    def tools_refresh(self, capabilities: dict | None = None):
        """The tools offered from here on: from `capabilities`, else from the registry as it is now."""
        self.capabilities = (
            capabilities if capabilities is not None else capabilities_load(tenant_id=self.ticket.tenant_id)
        )
        self.tools = tool_manifest(self.capabilities, customer_level=self.order is None)
        self.offered = {t.name for t in self.tools}

    def account(self, turn: ModelTurn):
        self.run.iterations += 1
        self.usage_add(turn.usage, self.provider.cost_usd(turn.usage))
        if turn.model:
            self.run.model = turn.model

    def usage_add(self, usage: Usage, cost_usd: Decimal):
        run = self.run
        run.input_tokens += usage.input_tokens
        run.output_tokens += usage.output_tokens
        run.cache_creation_input_tokens += usage.cache_creation_input_tokens
        run.cache_read_input_tokens += usage.cache_read_input_tokens
        run.cost_usd = Decimal(run.cost_usd) + Decimal(cost_usd)

    def tokens_used(self) -> int:
        run = self.run
        return run.input_tokens + run.output_tokens + run.cache_creation_input_tokens + run.cache_read_input_tokens

    def budget_check(self, *, model_call: bool) -> int:
        """Raise _Stop when a ceiling is reached; else the max_tokens left for one call."""
        run = self.run
        used = self.tokens_used()
        # The time spent waiting out a provider's outage or rate limit is not the run's doing.
        elapsed = 0
        if run.started_at:
            elapsed = (timezone.now() - run.started_at).total_seconds() - self.state.get("waited_seconds", 0)
        reason = None
        if model_call and run.iterations >= settings.AGENT_MAX_ITERATIONS:
            reason = f"The iteration budget ({settings.AGENT_MAX_ITERATIONS} model calls) is used up."
        elif used >= settings.AGENT_MAX_TOKENS:
            reason = f"The token budget ({settings.AGENT_MAX_TOKENS} tokens) is used up ({used})."
        elif elapsed >= settings.AGENT_MAX_WALL_SECONDS:
            reason = f"The wall-clock budget ({settings.AGENT_MAX_WALL_SECONDS} s) is used up."
        elif Decimal(run.cost_usd) >= settings.AGENT_MAX_COST_USD:
            reason = f"The cost budget ({settings.AGENT_MAX_COST_USD} USD) is used up ({run.cost_usd} USD)."
        if reason:
            raise _Stop(
                Ticket.Status.ESCALATED,
                Ticket.StopReason.BUDGET_EXHAUSTED,
                reason + " A person takes the ticket from here.",
            )
        return max(1, min(settings.AGENT_MAX_OUTPUT_TOKENS_PER_CALL, settings.AGENT_MAX_TOKENS - used))
