"""Policy replay: the gate decides a tenant's recorded decisions again with a draft policy
(docs/replay.md). Pure: it reads the decision records (approvals.models.DecisionRecord), never the
orders as they are now, and writes nothing but its own PolicyReplay row (progress, result).

Each record is decided with the facts it kept: the order's status, age, lines, refunded and
in-flight amounts, the ticket's request, items and destination, and the model's proposal. The
draft is evaluated as if it were current (an unsaved copy marked published) and the model's
citation of the policy then current is read as citing the draft: the question is what the draft
would have decided, not whether the model knew its name. "Before" is what was decided then.
A person's exception is decided as one, with the rules the person waived (as far as the draft
still lets a person waive them): it is not a flip because the draft's rule would refuse it
without the waiver. The result counts agent decisions and people's proposals apart.
"""

import copy
from collections import Counter, defaultdict
from dataclasses import dataclass
from datetime import datetime, timedelta
from decimal import Decimal
from types import SimpleNamespace

from django.db import transaction
from django.db.models.functions import JSONObject
from django.utils import timezone

from ledger.exceptions import InvalidInput
from ledger.models import PaymentMethod, Tenant
from ledger.money import ZERO
from ledger.selectors import LinePosition, PaymentReturnable, RefundPosition

from .gate import Outcome, Proposal, policy_gate_evaluate
from .models import DecisionRecord, PolicyReplay, RefundPolicy
from .services.policies import refund_policy_fingerprint
from .services.proposals import WAIVABLE, exception_rules_waive
from .services.requests import EXCEPTION_APPROVALS, approvals_needed

DEFAULT_DAYS = 30
MAX_DAYS = 3650
# Progress is written every this many decisions: a page polls it, and each write is one UPDATE.
PROGRESS_EVERY = 5000
# The result lists at most this many flipped tickets; the counts are always exact.
MAX_FLIPPED_LISTED = 1000
READ_CHUNK = 5000
# The words of a direction: refund (a refund for finance to approve), escalate, deny.
OUTCOME_WORDS = {Outcome.APPROVAL_REQUIRED: "refund", Outcome.ESCALATED: "escalate", Outcome.DENIED: "deny"}
# The JSON columns come back as one object per row: one decode instead of eight.
JSON_FIELDS = (
    "order_lines",
    "item_ids",
    "destination",
    "proposal",
    "codes",
    "order_disputes",
    "order_payments",
    "risk",
    "waived_rules",
)
RECORD_FIELDS = (
    "id",
    "ticket_ref",
    "order_id",
    "order_external_id",
    "order_status",
    "order_placed_at",
    "order_total",
    "currency",
    "order_refunded",
    "order_exposure",
    "requested_amount",
    "requested_currency",
    "policy_version",
    "outcome",
    "allowed_amount",
    "required_approvals",
    "decided_at",
    "backfilled",
    "source",
    "policy_exception",
)


@dataclass(frozen=True)
class ReplayedDecision:
    record_id: int
    source: str
    ticket_ref: int | None
    order: str
    currency: str
    before: str
    after: str
    allowed_before: Decimal | None
    allowed_after: Decimal | None
    approvals_before: int
    approvals_after: int
    codes_before: list
    codes_after: list
    # A person's exception the draft lets through only by waiving a rule the person did not.
    waivers_widened: bool = False

    @property
    def flipped(self) -> bool:
        return self.before != self.after

    @property
    def dual_control_newly_needed(self) -> bool:
        return self.after == Outcome.APPROVAL_REQUIRED and self.approvals_after > 1 >= self.approvals_before


def policy_as_current(draft: RefundPolicy) -> RefundPolicy:
    """An unsaved copy of the draft the gate takes for a current policy. Never saved."""
    replica = copy.copy(draft)
    replica.status = RefundPolicy.Status.PUBLISHED
    return replica


def _method(*, pk: int, kind: str | None, external_id: str | None, customer_id: int):
    return SimpleNamespace(
        pk=pk, kind=kind or PaymentMethod.Kind.CARD, external_id=external_id, customer_id=customer_id
    )


def decision_record_facts(record: DecisionRecord) -> dict:
    """One record as `decision_record_replay` takes it."""
    return {name: getattr(record, name) for name in (*RECORD_FIELDS, *JSON_FIELDS)}


def decision_record_replay(
    *, record: dict, policy: RefundPolicy, original_version: str | None = None, proposal: Proposal | None = None
):
    """Decide one recorded decision (a dict of RECORD_FIELDS and JSON_FIELDS) with `policy` (as
    if current); returns (verdict, approvals needed). Pure: the order, its lines and its
    destination are rebuilt from the record, never read. `proposal`: another draft to decide on
    these facts instead of the recorded one (a shadow model's, agent.shadow)."""
    verdict, approvals, _ = _record_decide(
        record=record, policy=policy, original_version=original_version, proposal=proposal
    )
    return verdict, approvals


def _record_decide(*, record: dict, policy: RefundPolicy, original_version: str | None, proposal: Proposal | None):
    """decision_record_replay's verdict and approvals, and the rules a person's exception went
    outside under `policy`."""
    customer_id = 1
    order = SimpleNamespace(
        pk=record["order_id"],
        external_id=record["order_external_id"],
        status=record["order_status"],
        placed_at=record["order_placed_at"],
        currency=record["currency"],
        total=record["order_total"],
        customer_id=customer_id,
        customer=SimpleNamespace(external_id=""),
    )
    refunded = record["order_refunded"] or ZERO
    position = RefundPosition(
        order_id=record["order_id"],
        external_id=record["order_external_id"],
        total=record["order_total"],
        currency=record["currency"],
        refunded_total=refunded,
        lines=[
            LinePosition(
                line_no=line["line_no"],
                item_id=line["item_id"],
                name="",
                price=Decimal(line["price"]),
                quantity=line["quantity"],
                refunded_quantity=line["refunded_quantity"],
            )
            for line in record["order_lines"] or []
        ],
    )
    destination = record["destination"] or {}
    kind = destination.get("kind") or "original"
    original = _method(pk=1, kind=None, external_id=destination.get("method"), customer_id=customer_id)
    refund_to = None
    if kind != "original" or destination.get("foreign"):
        original = _method(pk=1, kind=None, external_id=None, customer_id=customer_id)
        refund_to = _method(
            pk=2,
            kind=destination.get("method_kind") if kind != "other" else PaymentMethod.Kind.CARD,
            external_id=destination.get("method"),
            customer_id=customer_id + 1 if destination.get("foreign") else customer_id,
        )
        if kind == "gift_card":
            refund_to.kind = PaymentMethod.Kind.GIFT_CARD
        elif kind == "other" and refund_to.kind == PaymentMethod.Kind.GIFT_CARD:
            refund_to.kind = PaymentMethod.Kind.CARD
    if proposal is not None:
        return _decide(record, policy, order, position, original, refund_to, proposal, refunded)
    proposed = record["proposal"] or {}
    cited = proposed.get("policy_version")
    if cited and cited == (original_version or record["policy_version"]):
        cited = policy.version
    reply = proposed.get("customer_reply") or ""
    promises = proposed.get("reply_promises_payment")
    if promises is None:  # a backfilled record: the gate's codes say whether it found a promise
        promises = "reply_promises_payment" in (record["codes"] or [])
    proposal = Proposal(
        recommendation=proposed.get("recommendation") or "refund",
        amount=None if proposed.get("amount") is None else Decimal(proposed["amount"]),
        policy_version=cited,
        # The gate reads the reply only for a promise of payment; when the record says there is
        # none, an empty reply decides the same and costs nothing (most of a replay's time).
        customer_reply=reply if promises else "",
        destination=proposed.get("destination"),
        # A promise found by the second model check (agent.reply_check) is a recorded fact: the
        # rule alone would not find it again, and the model is not asked again in a replay.
        reply_model_claim=(proposed.get("reply_model_claim") or "the recorded decision found the reply promising")
        if promises
        else "",
    )
    return _decide(record, policy, order, position, original, refund_to, proposal, refunded)


def _decide(record, policy, order, position, original, refund_to, proposal, refunded):
    disputes = [SimpleNamespace(**dispute) for dispute in record.get("order_disputes") or []]
    payments = [
        PaymentReturnable(
            payment_id=payment["payment_id"],
            method_id=payment["method_id"],
            method=payment["method"],
            kind=payment["kind"],
            payment_ref="",
            paid=Decimal(payment["paid"]),
            returnable=Decimal(payment["returnable"]),
        )
        for payment in record.get("order_payments") or []
    ]

    def evaluate(waive):
        return policy_gate_evaluate(
            order=order,
            policy=policy,
            proposal=proposal,
            requested_amount=record["requested_amount"],
            requested_currency=record["requested_currency"] or None,
            item_ids=list(record["item_ids"] or []),
            refund_to=refund_to,
            now=record["decided_at"],
            waive=waive,
            original_method=original,
            position=position,
            # The risk figures read then, judged by the draft's risk rules (approvals.risk).
            risk_figures=record.get("risk") or None,
            # A record from before disputes and payments were kept has none: decided as then.
            disputes=disputes,
            payments=payments,
        )

    waive = frozenset()
    if record.get("policy_exception"):
        # A person's exception is decided again as one: with the rules they waived, as far as the
        # draft still lets a person waive them, and any other rule the draft lets them waive that
        # it breaks (as approvals.services.proposals would have). A shorter window does not flip a window
        # exception; a draft that makes the window unwaivable does (the person could not have asked).
        waivable = frozenset(policy.waivable_rules or ()) & WAIVABLE
        verdict, waive = exception_rules_waive(
            evaluate=evaluate, waivable=waivable, waive=frozenset(record.get("waived_rules") or ()) & waivable
        )
    else:
        verdict = evaluate(waive)
    approvals = 0
    if verdict.outcome == Outcome.APPROVAL_REQUIRED and verdict.allowed_amount:
        exposure = record["order_exposure"] if record["order_exposure"] is not None else refunded
        approvals = approvals_needed(
            policy=policy,
            currency=record["currency"],
            order_total=record["order_total"],
            amount=verdict.allowed_amount,
            exposure=lambda: exposure,
        )
        if record.get("policy_exception"):
            approvals = max(approvals, EXCEPTION_APPROVALS)
    return verdict, approvals, waive


def decision_record_replayable(record: dict) -> bool:
    """False where the record lacks what the gate needs: no order was named, or a backfilled
    item refund whose lines (units already refunded then) the old rows did not keep."""
    if record["order_id"] is None:
        return False
    return not (record["backfilled"] and record["item_ids"] and not record["order_lines"])


def _replay_one(record: dict, policy: RefundPolicy) -> ReplayedDecision:
    before = record["outcome"]
    if not decision_record_replayable(record):
        # Left as it was decided: counted, never reported as a flip it cannot know.
        after, approvals_after, codes_after = before, record["required_approvals"], list(record["codes"] or [])
        allowed_after, waivers_widened = record["allowed_amount"], False
    else:
        verdict, approvals_after, waived = _record_decide(
            record=record, policy=policy, original_version=None, proposal=None
        )
        after, allowed_after, codes_after = verdict.outcome, verdict.allowed_amount, verdict.codes
        # An exception the draft would let go outside a rule the person did not waive.
        waivers_widened = after == Outcome.APPROVAL_REQUIRED and bool(waived - set(record.get("waived_rules") or ()))
    return ReplayedDecision(
        record_id=record["id"],
        source=record["source"],
        ticket_ref=record["ticket_ref"],
        order=record["order_external_id"],
        currency=record["currency"],
        before=before,
        after=after,
        allowed_before=record["allowed_amount"] if before == Outcome.APPROVAL_REQUIRED else None,
        allowed_after=allowed_after if after == Outcome.APPROVAL_REQUIRED else None,
        approvals_before=record["required_approvals"],
        approvals_after=approvals_after,
        codes_before=list(record["codes"] or []),
        codes_after=list(codes_after),
        waivers_widened=waivers_widened,
    )


def _source_counts() -> dict:
    return {"decisions": 0, "flipped": 0, "directions": Counter(), "waivers_widened": 0}


def _money(totals: dict) -> dict:
    return {currency: str(amount) for currency, amount in sorted(totals.items())}


def policy_replay_window(*, days: int, now: datetime | None = None) -> tuple[datetime, datetime]:
    if not isinstance(days, int) or isinstance(days, bool) or not 1 <= days <= MAX_DAYS:
        raise InvalidInput(f"--days is a whole number from 1 to {MAX_DAYS}.", code="bad_days")
    until = now or timezone.now()
    return until - timedelta(days=days), until


def policy_replay_create(*, tenant: Tenant, draft_version: str, days: int = DEFAULT_DAYS, user=None) -> PolicyReplay:
    """A queued replay of `tenant`'s draft `draft_version` over the last `days` days. Only a
    draft of the tenant's own is replayed (InvalidInput otherwise, nothing written)."""
    since, until = policy_replay_window(days=days)
    draft = RefundPolicy.objects.for_tenant(tenant).filter(version=draft_version).first()
    if draft is None:
        raise InvalidInput(f"{tenant.slug} has no policy {draft_version}.", code="unknown_policy")
    if draft.status != RefundPolicy.Status.DRAFT:
        raise InvalidInput(f"{draft_version} is {draft.status}; only drafts are replayed.", code="not_a_draft")
    return PolicyReplay.objects.create(
        tenant=tenant,
        draft=draft,
        draft_fingerprint=refund_policy_fingerprint(draft),
        window_days=days,
        since=since,
        until=until,
        created_by=user,
    )


def policy_replay_run(*, replay_id: int, progress=None) -> PolicyReplay:
    """Run a queued replay: decide each recorded decision of its tenant and window with its draft
    (as the draft was when the replay was made) and store the result on the replay. Reads only;
    the replay row is the one thing written. `progress(done, total)` is called as it goes."""
    replay = PolicyReplay.objects.select_related("draft", "tenant").get(pk=replay_id)
    if replay.status == PolicyReplay.Status.DONE:
        return replay
    draft = replay.draft
    if refund_policy_fingerprint(draft) != replay.draft_fingerprint:
        PolicyReplay.objects.filter(pk=replay.pk).update(
            status=PolicyReplay.Status.FAILED,
            error="The draft changed after this replay was made: replay it again.",
            finished_at=timezone.now(),
        )
        replay.refresh_from_db()
        return replay
    try:
        return _policy_replay_run(replay, draft, progress)
    except Exception as error:
        # The row says why; the task's log has the traceback.
        PolicyReplay.objects.filter(pk=replay.pk).update(
            status=PolicyReplay.Status.FAILED,
            error=f"{type(error).__name__}: {error}"[:2000],
            finished_at=timezone.now(),
        )
        raise


def _policy_replay_run(replay: PolicyReplay, draft: RefundPolicy, progress) -> PolicyReplay:
    policy = policy_as_current(draft)
    records = DecisionRecord.objects.for_tenant(replay.tenant).filter(
        decided_at__gte=replay.since, decided_at__lt=replay.until
    )
    total = records.count()
    PolicyReplay.objects.filter(pk=replay.pk).update(status=PolicyReplay.Status.RUNNING, total=total, done=0)

    directions, rules_before, rules_after = Counter(), Counter(), Counter()
    allowed_before, allowed_after = defaultdict(lambda: ZERO), defaultdict(lambda: ZERO)
    flipped, dual_control, backfilled, not_replayable, done = [], 0, 0, 0, 0
    flipped_count = 0
    # Agent decisions and people's proposals, counted apart (a proposal that flips to `escalate`
    # is one the gate would have refused the person; `waivers_widened`: exceptions that pass only
    # by waiving a rule the person did not).
    by_source = {source: _source_counts() for source in DecisionRecord.Source.values}
    rows = records.order_by("decided_at", "id").values(*RECORD_FIELDS, facts=JSONObject(**{f: f for f in JSON_FIELDS}))
    for record in rows.iterator(chunk_size=READ_CHUNK):
        record.update(record.pop("facts"))
        replayed = _replay_one(record, policy)
        backfilled += record["backfilled"]
        not_replayable += not decision_record_replayable(record)
        if replayed.allowed_before is not None:
            allowed_before[replayed.currency] += replayed.allowed_before
        if replayed.allowed_after is not None:
            allowed_after[replayed.currency] += replayed.allowed_after
        rules_before.update(replayed.codes_before)
        rules_after.update(replayed.codes_after)
        counts = by_source.setdefault(replayed.source, _source_counts())
        counts["decisions"] += 1
        counts["waivers_widened"] += replayed.waivers_widened
        if replayed.dual_control_newly_needed:
            dual_control += 1
        if replayed.flipped:
            flipped_count += 1
            direction = (
                f"{OUTCOME_WORDS.get(replayed.before, replayed.before)} -> "
                f"{OUTCOME_WORDS.get(replayed.after, replayed.after)}"
            )
            directions[direction] += 1
            counts["flipped"] += 1
            counts["directions"][direction] += 1
            if len(flipped) < MAX_FLIPPED_LISTED:
                flipped.append(
                    {
                        "ticket": replayed.ticket_ref,
                        "source": replayed.source,
                        "order": replayed.order,
                        "before": replayed.before,
                        "after": replayed.after,
                        "allowed_before": replayed.allowed_before,
                        "allowed_after": replayed.allowed_after,
                        "currency": replayed.currency,
                        "codes_after": replayed.codes_after,
                    }
                )
        done += 1
        if done % PROGRESS_EVERY == 0:
            PolicyReplay.objects.filter(pk=replay.pk).update(done=done)
            if progress is not None:
                progress(done, total)
    currencies = sorted(set(allowed_before) | set(allowed_after))
    result = {
        "decisions": done,
        "backfilled": backfilled,
        "not_replayable": not_replayable,
        "flipped": flipped_count,
        "directions": dict(sorted(directions.items())),
        "sources": {
            source: {**counts, "directions": dict(sorted(counts["directions"].items()))}
            for source, counts in by_source.items()
        },
        "dual_control_newly_needed": dual_control,
        "allowed_before": _money(allowed_before),
        "allowed_after": _money(allowed_after),
        "difference": {c: str(allowed_after[c] - allowed_before[c]) for c in currencies},
        "rules": {
            code: {"before": rules_before[code], "after": rules_after[code]}
            for code in sorted(set(rules_before) | set(rules_after))
        },
        "flipped_tickets": flipped,
        "flipped_listed": len(flipped),
    }
    with transaction.atomic():
        PolicyReplay.objects.filter(pk=replay.pk).update(
            status=PolicyReplay.Status.DONE,
            done=done,
            total=done,
            flipped=flipped_count,
            result=result,
            finished_at=timezone.now(),
        )
    if progress is not None:
        progress(done, total)
    replay.refresh_from_db()
    return replay


def policy_replay_summary(replay: PolicyReplay) -> str:
    """The contract's one-line summary (docs/api.md): amounts per currency where there are several."""
    result = replay.result or {}

    def amounts(key: str) -> str:
        values = result.get(key) or {}
        if not values:
            return "0.00"
        if len(values) == 1:
            return next(iter(values.values()))
        return ",".join(f"{currency}:{amount}" for currency, amount in values.items())

    return (
        f"replay draft={replay.draft.version} decisions={result.get('decisions', 0)} "
        f"flipped={result.get('flipped', 0)} allowed_before={amounts('allowed_before')} "
        f"allowed_after={amounts('allowed_after')} difference={amounts('difference')}"
    )
