"""The operator dashboard's data (evals/views.operations_dashboard): one tenant's health at a glance.

It reads every layer (tickets, approvals, the ledger, agent runs, evals, the capability
registry), which is why it lives in the top app. Every panel is one aggregate query, so the
page costs the same number of queries whatever the number of tickets (tested).
"""

from dataclasses import dataclass
from datetime import date, datetime, timedelta
from decimal import Decimal

from axes.models import AccessAttempt
from django.conf import settings
from django.contrib.auth import get_user_model
from django.db.models import Count, Exists, F, JSONField, Max, Min, OuterRef, Subquery, Sum, Window
from django.db.models.functions import Coalesce, JSONObject, TruncDate
from django.utils import timezone

from approvals.followups import approval_followups_undelivered
from approvals.models import ApprovalRequest, Capability, TenantCapability
from ledger.models import RefundEntry, RefundEntryEvent
from refundagent.models import AgentRun, Ticket, TicketReply
from refundagent.selectors import runs_waiting_on_provider

from .selectors import eval_runs_recent

DAYS = 14
LIST_LIMIT = 20  # rows of each failure list (the newest)
WIDTH, HEIGHT, PAD_LEFT, PAD_RIGHT, PAD_TOP, PAD_BOTTOM = 720, 200, 56, 16, 16, 36


@dataclass
class Queue:
    count: int
    oldest: datetime | None

    @property
    def age(self) -> timedelta | None:
        return timezone.now() - self.oldest if self.oldest else None


def operations_overview(*, tenant, now: datetime | None = None) -> dict:
    """Every panel of the dashboard for `tenant` (tickets, approvals, refunds, runs are its own;
    the eval trend and the kill switches are the installation's)."""
    now = now or timezone.now()
    today = timezone.localtime(now).replace(hour=0, minute=0, second=0, microsecond=0)
    since = today - timedelta(days=DAYS - 1)
    days = [(since + timedelta(days=n)).date() for n in range(DAYS)]

    statuses = dict(
        Ticket.objects.filter(tenant=tenant, created_at__gte=today).values_list("status").annotate(n=Count("pk"))
    )
    pending = ApprovalRequest.objects.filter(tenant=tenant, status=ApprovalRequest.Status.PENDING).aggregate(
        count=Count("pk"), oldest=Min("created_at")
    )
    escalated = Ticket.objects.filter(tenant=tenant, status=Ticket.Status.ESCALATED).aggregate(
        count=Count("pk"), oldest=Min("awaiting_person_since")
    )
    # Runs waiting out the model provider's 429/529 answers (a dead worker's stale mark excluded).
    provider_waits = (
        runs_waiting_on_provider(now=now)
        .filter(ticket__tenant=tenant)
        .aggregate(count=Count("pk"), oldest=Min("provider_waiting_since"))
    )
    refunds = (
        # Written by this product (approved or by an operator) and paid or being paid: imported history
        # and refunds made at the provider by hand are not "executed"; a refused payout moved no money
        # (it is listed under the payout failures).
        RefundEntry.objects.filter(
            tenant=tenant,
            created_at__gte=since,
            source__in=(RefundEntry.Source.APPROVAL, RefundEntry.Source.MANUAL),
            status__in=(RefundEntry.Status.PENDING, RefundEntry.Status.SUCCEEDED),
        )
        .annotate(day=TruncDate("created_at"))
        .values("day", "currency")
        .annotate(count=Count("pk"), total=Sum("amount"))
        .order_by("day", "currency")
    )
    # Refunds the provider refused or canceled, as the ledger recorded them, with the reason it gave.
    refused = (RefundEntry.Status.FAILED, RefundEntry.Status.CANCELED)
    payout_failures = list(
        RefundEntry.objects.filter(tenant=tenant, status__in=refused)
        .annotate(
            when=Coalesce("status_changed_at", "created_at"),
            order_ref=F("order__external_id"),
            failure_reason=Subquery(
                RefundEntryEvent.objects.filter(entry=OuterRef("pk"), to_status=OuterRef("status"))
                .order_by("-id")
                .values("reason")[:1]
            ),
            # The approval it was executed for (its ticket; whether finance filed it again), in
            # the same query.
            approval=Subquery(
                ApprovalRequest.objects.filter(tenant=tenant, ledger_entry_id=OuterRef("pk"))
                .order_by("-id")
                .values(
                    json=JSONObject(pk="pk", ticket_ref="ticket_ref", status="status", replaced_by_id="replaced_by_id")
                )[:1],
                output_field=JSONField(),
            ),
        )
        .filter(when__gte=since)
        .order_by("-when", "-pk")
        .values(
            "pk",
            "order_ref",
            "amount",
            "currency",
            "gateway",
            "provider_ref",
            "status",
            "when",
            "failure_reason",
            "source",
            "approval",
        )[:LIST_LIMIT]
    )
    # Approvals whose ledger write was refused or whose evaluator found a mismatch: no payout happened
    # or it does not match the ledger.
    execution_failures = list(
        ApprovalRequest.objects.filter(tenant=tenant, status=ApprovalRequest.Status.FAILED, updated_at__gte=since)
        .order_by("-updated_at")
        .values("pk", "amount", "currency", "updated_at", "ticket_ref", "verification")[:LIST_LIMIT]
    )
    # Approval events a ticket has not taken yet (its receiver failed; the sweep retries them in
    # order): the ticket disagrees with its approval, and its money, until they are delivered.
    followups = list(
        approval_followups_undelivered()
        .filter(tenant=tenant)
        .annotate(waiting=Window(Count("pk")))
        .order_by("id")
        .values(
            "pk",
            "request_id",
            "ticket_ref",
            "event",
            "attempts",
            "last_error",
            "created_at",
            "next_attempt_at",
            "waiting",
        )[:LIST_LIMIT]
    )
    # Customer emails that could not be delivered after every retry: the customer heard nothing.
    replies_failed = list(
        TicketReply.objects.filter(tenant=tenant, status=TicketReply.Status.FAILED)
        .order_by("-created_at")
        .values("pk", "ticket_id", "outcome", "attempts", "last_error", "created_at")[:LIST_LIMIT]
    )
    usage = (
        AgentRun.objects.filter(ticket__tenant=tenant, created_at__gte=since)
        .annotate(day=TruncDate("created_at"))
        .values("day")
        .annotate(
            runs=Count("pk"),
            tokens=Sum(
                F("input_tokens") + F("output_tokens") + F("cache_creation_input_tokens") + F("cache_read_input_tokens")
            ),
            cost=Sum("cost_usd"),
            tickets=Count("ticket", distinct=True),
            input=Sum("input_tokens"),
            cache_write=Sum("cache_creation_input_tokens"),
            cache_read=Sum("cache_read_input_tokens"),
            output=Sum("output_tokens"),
        )
        .order_by("day")
    )
    runs = eval_runs_recent(limit=30)
    # The installation's switches, and this tenant's own (an operator switches its tenant only).
    tenant_off = TenantCapability.objects.filter(capability=OuterRef("pk"), tenant=tenant, enabled=False)
    capabilities = list(
        Capability.objects.order_by("name")
        .annotate(tenant_off=Exists(tenant_off))
        .values("name", "side_effect", "enabled", "updated_at", "tenant_off")
    )

    by_day = {row["day"]: {**row, **_per_ticket(row)} for row in usage}
    budget = settings.DASHBOARD_DAILY_MODEL_BUDGET_USD
    cost_per_day = [(day, Decimal(by_day[day]["cost"] or 0) if day in by_day else Decimal(0)) for day in days]
    count_per_day = {day: 0 for day in days}
    for row in refunds:
        count_per_day[row["day"]] = count_per_day.get(row["day"], 0) + row["count"]
    return {
        "today": today.date(),
        "statuses": [(label, statuses.get(value, 0)) for value, label in Ticket.Status.choices],
        "tickets_today": sum(statuses.values()),
        "pending": Queue(pending["count"], pending["oldest"]),
        "escalated": Queue(escalated["count"], escalated["oldest"]),
        "provider_waits": Queue(provider_waits["count"], provider_waits["oldest"]),
        "refunds": refunds,
        "refund_chart": bar_chart([(day, Decimal(count_per_day[day])) for day in days], unit=""),
        "payout_failures": payout_failures,
        "execution_failures": [
            {**f, "stage": (f["verification"] or {}).get("stage", ""), "reason": _failure_reason(f["verification"])}
            for f in execution_failures
        ],
        "followups": followups,
        "replies_failed": replies_failed,
        "followups_count": followups[0]["waiting"] if followups else 0,
        "usage": [{"day": day, **by_day.get(day, EMPTY_USAGE)} for day in days],
        "usage_today": by_day.get(days[-1], EMPTY_USAGE),
        "cost_chart": bar_chart(cost_per_day, budget=budget or None, unit="$"),
        "budget": budget,
        "cost_today": cost_per_day[-1][1],
        "budget_used_today": round(cost_per_day[-1][1] / budget * 100, 1) if budget else None,
        "over_budget": [day for day, cost in cost_per_day if budget and cost > budget],
        "eval_runs": runs,
        "capabilities": capabilities,
        "switched_off": [c["name"] for c in capabilities if not c["enabled"] or c["tenant_off"]],
        "lockouts": sign_in_lockouts(tenant=tenant, now=now),
    }


def sign_in_lockouts(*, tenant, now: datetime) -> list[dict]:
    """The tenant's people whose sign-in django-axes has locked (failed attempts at its limit,
    within the cool-off), newest first: an operator sees who is locked out and resets them in
    the admin ("Access attempts") or with `manage.py axes_reset_username`. Names of other
    tenants' people are not listed."""
    members = get_user_model().objects.filter(membership__tenant=tenant).values("username")
    recent = AccessAttempt.objects.filter(username__in=Subquery(members))
    if settings.AXES_COOLOFF_TIME:
        recent = recent.filter(attempt_time__gte=now - settings.AXES_COOLOFF_TIME)
    return list(
        recent.values("username")
        .annotate(failures=Sum("failures_since_start"), last_attempt=Max("attempt_time"))
        .filter(failures__gte=settings.AXES_FAILURE_LIMIT)
        .order_by("-last_attempt")[:LIST_LIMIT]
    )


EMPTY_USAGE = {
    "runs": 0,
    "tokens": 0,
    "cost": Decimal(0),
    "tickets": 0,
    "cost_per_ticket": None,
    "cache_read_share": None,
}


def _per_ticket(row: dict) -> dict:
    """A day's cost per ticket the agent worked on, and the share of its input read from the
    prompt cache (input, cache writes and cache reads are all input)."""
    read = row["cache_read"] or 0
    all_input = (row["input"] or 0) + (row["cache_write"] or 0) + read
    return {
        "cost_per_ticket": (Decimal(row["cost"] or 0) / row["tickets"]).quantize(Decimal("0.0001"))
        if row["tickets"]
        else None,
        "cache_read_share": round(read / all_input, 2) if all_input else None,
    }


def _failure_reason(verification) -> str:
    verification = verification or {}
    return verification.get("detail") or ", ".join(verification.get("failed") or []) or verification.get("error", "")


def bar_chart(values: list[tuple[date, Decimal]], *, budget: Decimal | None = None, unit: str = "") -> dict:
    """Coordinates of an SVG bar chart, one bar per day, with an optional budget line."""
    plot_w, plot_h = WIDTH - PAD_LEFT - PAD_RIGHT, HEIGHT - PAD_TOP - PAD_BOTTOM
    top = max([v for _, v in values] + [budget or 0, Decimal(1)])
    slot = plot_w / max(len(values), 1)
    bars, labels = [], []
    for i, (day, value) in enumerate(values):
        height = float(value) / float(top) * plot_h
        x = PAD_LEFT + slot * i
        bars.append(
            {
                "x": round(x + slot * 0.15, 1),
                "y": round(PAD_TOP + plot_h - height, 1),
                "w": round(slot * 0.7, 1),
                "h": round(height, 1),
                "day": day,
                "value": value,
                "over": budget is not None and value > budget,
            }
        )
        if i % 2 == 0 or len(values) <= 7:
            labels.append({"x": round(x + slot / 2, 1), "text": day.strftime("%m-%d")})
    budget_y = round(PAD_TOP + plot_h * (1 - float(budget) / float(top)), 1) if budget else None
    return {
        "width": WIDTH,
        "height": HEIGHT,
        "left": PAD_LEFT,
        "right": WIDTH - PAD_RIGHT,
        "top": PAD_TOP,
        "bottom": HEIGHT - PAD_BOTTOM,
        "label_y": HEIGHT - PAD_BOTTOM + 16,
        "bars": bars,
        "labels": labels,
        "max": f"{unit}{top:.2f}" if unit else f"{top:.0f}",
        "budget_y": budget_y,
        "budget": budget,
        "unit": unit,
    }
