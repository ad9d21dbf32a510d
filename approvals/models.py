"""The authority boundary: refund policies, the capability registry and approval requests.

Approvals sit above the ledger and below the agent: they may import `ledger`, never
`refundagent`. The ticket an approval belongs to is therefore kept as an opaque reference
(`ticket_ref`); the agent layer listens to the signals in `approvals.signals`.
"""

import re
from decimal import Decimal, InvalidOperation

from django.conf import settings
from django.core.exceptions import ValidationError
from django.core.serializers.json import DjangoJSONEncoder
from django.db import models
from django.db.models import Case, F, IntegerField, Q, Value, When
from django.utils import timezone

from ledger.exceptions import DomainError, InvalidInput
from ledger.models import MONEY, Order, Tenant, TenantQuerySet
from ledger.money import money_check_currency

from .risk_rules import risk_rules_validate


class PolicyImmutable(Exception):
    """A published policy version cannot be edited: publish a new version instead."""


class RefundPolicyQuerySet(TenantQuerySet):
    def current(self, tenant):
        """The tenant's current policy, as a queryset of one: the newest published version
        (retired versions are no longer published)."""
        return self.for_tenant(tenant).filter(status=RefundPolicy.Status.PUBLISHED).order_by("-published_at", "-id")[:1]

    def current_for(self, tenant):
        return self.current(tenant).first()


def waivable_rules_default() -> list[str]:
    return ["window", "order_status"]


def threshold_rate_parse(rate) -> Decimal | None:
    """A recorded rate as a positive Decimal (from its decimal string), or None when it is not one."""
    if isinstance(rate, bool) or not isinstance(rate, (str, int)):
        return None
    try:
        value = Decimal(str(rate))
    except InvalidOperation:
        return None
    return value if value.is_finite() and value > 0 else None


class RefundPolicy(models.Model):
    """One version of a tenant's refund policy. The rules are data; the gate reads them."""

    class Status(models.TextChoices):
        DRAFT = "draft"
        PUBLISHED = "published"
        RETIRED = "retired"

    tenant = models.ForeignKey(Tenant, on_delete=models.PROTECT, related_name="refund_policies")
    version = models.CharField(max_length=100, help_text="What drafts cite, e.g. refund-policy-v4.")
    status = models.CharField(max_length=20, choices=Status.choices, default=Status.DRAFT)
    window_days = models.PositiveIntegerField(
        null=True, blank=True, help_text="Days after purchase; empty = no window."
    )
    full_refund_statuses = models.JSONField(default=list, help_text="Order statuses that allow a refund of the order.")
    item_refund_statuses = models.JSONField(
        default=list, help_text="Order statuses that allow a refund of named items."
    )
    full_refund_destinations = models.JSONField(default=list, help_text="'original' and/or 'gift_card'.")
    item_refund_destinations = models.JSONField(default=list, help_text="'original' and/or 'gift_card'.")
    two_approver_threshold = models.DecimalField(
        **MONEY, null=True, blank=True, help_text="Refunds above this amount need more than one finance approver."
    )
    # The threshold is money: an amount in one currency. An order in another currency is compared
    # at a rate recorded in this version (`threshold_rates`), or else needs the approvals above it.
    two_approver_threshold_currency = models.CharField(
        max_length=3, blank=True, help_text="ISO code of the threshold's currency, e.g. USD."
    )
    threshold_rates = models.JSONField(
        default=dict,
        blank=True,
        help_text='Recorded exchange rates to the threshold\'s currency: {"EUR": "1.08"} is 1 EUR = 1.08 of it. '
        "A refund in a currency without a rate here needs the approvals above the threshold.",
    )
    approvals_above_threshold = models.PositiveSmallIntegerField(default=2)
    waivable_rules = models.JSONField(
        default=waivable_rules_default,
        blank=True,
        help_text="The rules a person's policy exception may waive: 'window' and/or 'order_status'. The hard "
        "limits (refundable amount, currency, the customer's own methods) are never waivable.",
    )
    text = models.TextField(help_text="The policy text that drafts cite.")
    risk_rules = models.JSONField(
        default=dict,
        blank=True,
        help_text="Refund-abuse rules the gate checks (approvals/risk.py): window_days, max_refunds_per_customer, "
        "max_refund_amount_per_customer, max_open_tickets_per_order, unpaid_destination_kinds. A rule that trips "
        "sends the ticket to a person. Empty: none.",
    )
    published_at = models.DateTimeField(null=True, blank=True)
    retired_at = models.DateTimeField(null=True, blank=True)
    supersedes = models.OneToOneField(
        "self", on_delete=models.PROTECT, null=True, blank=True, related_name="superseded_by"
    )
    created_at = models.DateTimeField(auto_now_add=True)

    objects = RefundPolicyQuerySet.as_manager()

    class Meta:
        verbose_name_plural = "refund policies"
        constraints = [
            models.UniqueConstraint(fields=["tenant", "version"], name="policy_version_unique_per_tenant"),
            models.CheckConstraint(condition=Q(approvals_above_threshold__gte=1), name="policy_approvals_at_least_one"),
            models.CheckConstraint(
                condition=Q(two_approver_threshold__isnull=True)
                | Q(two_approver_threshold_currency__regex=r"^[A-Z]{3}$"),
                name="policy_threshold_has_currency",
            ),
        ]

    # Fields that may still change after publication: only the lifecycle.
    LIFECYCLE_FIELDS = {"status", "retired_at"}

    def __str__(self):
        return f"{self.tenant}:{self.version} ({self.status})"

    def save(self, *args, **kwargs):
        if self.pk and not self._state.adding:
            stored = type(self).objects.get(pk=self.pk)
            if stored.status != self.Status.DRAFT:
                changed = {
                    f.attname
                    for f in self._meta.concrete_fields
                    if getattr(stored, f.attname) != getattr(self, f.attname)
                }
                if changed - self.LIFECYCLE_FIELDS:
                    raise PolicyImmutable(
                        f"{self.version} is {stored.status}; its rules cannot change. Publish a new version."
                    )
        super().save(*args, **kwargs)

    def clean(self):
        errors = {}
        currency = self.two_approver_threshold_currency
        if self.two_approver_threshold is not None:
            if not re.fullmatch(r"[A-Z]{3}", currency or ""):
                errors["two_approver_threshold_currency"] = "A threshold is money: give its currency (e.g. USD)."
            else:
                try:
                    money_check_currency(amount=self.two_approver_threshold, currency=currency)
                except DomainError as exc:
                    errors["two_approver_threshold"] = exc.message
        rates = self.threshold_rates if isinstance(self.threshold_rates, dict) else None
        if rates is None:
            errors["threshold_rates"] = 'Rates are an object of currency to rate, e.g. {"EUR": "1.08"}.'
        else:
            for code, rate in rates.items():
                if not re.fullmatch(r"[A-Z]{3}", str(code)) or threshold_rate_parse(rate) is None:
                    errors["threshold_rates"] = f"{code!r}: {rate!r} is not a currency code with a positive rate."
                    break
        try:
            risk_rules_validate(self.risk_rules)
        except InvalidInput as exc:
            errors["risk_rules"] = exc.message
        if errors:
            raise ValidationError(errors)


class Capability(models.Model):
    """One tool in the registry. Operators switch a capability off here (the kill switch)."""

    class SideEffect(models.TextChoices):
        READ = "read"
        WRITE_DRAFT = "write_draft", "write draft"
        MONEY_MOVEMENT = "money_movement", "money movement"
        OUTBOUND = "outbound"

    # Side-effect classes the agent may ever use. Everything else is the runtime's or a person's.
    AGENT_ALLOWED = {SideEffect.READ, SideEffect.WRITE_DRAFT}

    class ApprovalRule(models.TextChoices):
        NONE = "none"
        GATE = "gate", "policy gate decides"
        FINANCE = "finance", "finance approval (two above the policy threshold)"
        FORBIDDEN = "forbidden", "never by the agent"

    name = models.CharField(max_length=100, unique=True, help_text="e.g. refunds.create_draft")
    description = models.TextField(blank=True)
    side_effect = models.CharField(max_length=20, choices=SideEffect.choices)
    enabled = models.BooleanField(default=True)
    timeout_seconds = models.PositiveIntegerField(default=10)
    approval_rule = models.CharField(max_length=20, choices=ApprovalRule.choices, default=ApprovalRule.NONE)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        verbose_name_plural = "capabilities"
        ordering = ["name"]

    def __str__(self):
        return self.name

    @property
    def agent_allowed(self) -> bool:
        return self.side_effect in self.AGENT_ALLOWED


class TenantCapability(models.Model):
    """One tenant's own kill switch for one capability. The registry's `enabled` is the
    installation's (superusers only); a tenant's operator switches a capability off for that
    tenant alone here. A tool runs for a tenant only when both are on (no row: on)."""

    tenant = models.ForeignKey(Tenant, on_delete=models.CASCADE, related_name="capability_switches")
    capability = models.ForeignKey(Capability, on_delete=models.CASCADE, related_name="tenant_switches")
    enabled = models.BooleanField(default=True, help_text="Off: this tenant's agent may not use the capability.")
    updated_at = models.DateTimeField(auto_now=True)

    objects = TenantQuerySet.as_manager()

    class Meta:
        verbose_name = "tenant capability switch"
        verbose_name_plural = "tenant capability switches"
        ordering = ["capability__name"]
        constraints = [
            models.UniqueConstraint(fields=["tenant", "capability"], name="tenant_capability_one_switch"),
        ]

    def __str__(self):
        return f"{self.capability.name} for {self.tenant.slug}: {'on' if self.enabled else 'off'}"


# The review queue's rank: pending requests first (the admin orders by it; an index has it).
# Pending requests and refused payments (both back with finance) first.
QUEUE_RANK = Case(
    When(status__in=("pending", "payment_failed"), then=Value(0)), default=Value(1), output_field=IntegerField()
)


class ApprovalRequest(models.Model):
    """One exact action waiting for finance: these args, this hash, this key, nothing else."""

    class Origin(models.TextChoices):
        AGENT = "agent"
        HUMAN = "human", "proposed by a person"

    class Status(models.TextChoices):
        PENDING = "pending"
        APPROVED = "approved", "approved (executing)"
        EXECUTED = "executed", "executed and verified"
        DENIED = "denied"
        CHANGES_REQUESTED = "changes_requested", "changes requested"
        ESCALATED = "escalated"
        EXPIRED = "expired"
        INVALIDATED = "invalidated", "invalidated (facts changed)"
        FAILED = "failed", "execution or verification failed"
        WITHDRAWN = "withdrawn", "withdrawn (ticket closed or escalated)"
        PAYMENT_FAILED = "payment_failed", "payment failed (the provider refused it)"

    tenant = models.ForeignKey(Tenant, on_delete=models.PROTECT, related_name="approval_requests")
    action = models.CharField(max_length=100, default="refunds.issue_refund")
    order = models.ForeignKey(Order, on_delete=models.PROTECT, related_name="approval_requests")
    amount = models.DecimalField(**MONEY)
    currency = models.CharField(max_length=3)
    args = models.JSONField(help_text="The canonical arguments of the action.")
    args_hash = models.CharField(max_length=64, help_text="SHA-256 of the canonical args.")
    idempotency_key = models.CharField(max_length=200)  # unique: see Meta.constraints
    policy = models.ForeignKey("RefundPolicy", on_delete=models.PROTECT, related_name="approval_requests")
    policy_version = models.CharField(max_length=100)
    refundable_at_request = models.DecimalField(
        **MONEY, help_text="What was still refundable when the request was made (re-checked before approval)."
    )
    trace_id = models.CharField(max_length=64, blank=True)
    ticket_ref = models.PositiveBigIntegerField(null=True, blank=True, db_index=True, help_text="The ticket's id.")
    origin = models.CharField(max_length=10, choices=Origin.choices, default=Origin.AGENT)
    policy_exception = models.BooleanField(
        default=False,
        help_text="A person's proposal outside the policy's waivable rules (two approvers, never the proposer).",
    )
    waived_rules = models.JSONField(default=list, blank=True, help_text="The policy rules the exception waives.")
    proposal_reason = models.TextField(blank=True, help_text="The proposer's written reason (human proposals).")
    approver_role = models.CharField(max_length=40, default="finance")
    required_approvals = models.PositiveSmallIntegerField(default=1)
    expires_at = models.DateTimeField()
    status = models.CharField(max_length=20, choices=Status.choices, default=Status.PENDING)
    requested_by = models.ForeignKey(
        settings.AUTH_USER_MODEL,
        on_delete=models.PROTECT,
        null=True,
        blank=True,
        related_name="+",
        help_text="A maker: who filed the ticket (the agent's requests), or the person who proposed the refund. "
        "Never an approver of this request.",
    )
    filed_by = models.ForeignKey(
        settings.AUTH_USER_MODEL,
        on_delete=models.PROTECT,
        null=True,
        blank=True,
        related_name="+",
        help_text="A maker too: who filed the ticket the request is for (on a person's proposal, requested_by is "
        "the proposer). Never an approver of this request.",
    )
    decided_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.PROTECT, null=True, blank=True, related_name="+"
    )
    decided_at = models.DateTimeField(null=True, blank=True)
    decision_note = models.TextField(blank=True)
    requested_amount_change = models.DecimalField(
        **MONEY, null=True, blank=True, help_text="With 'request changes': the amount finance wants instead."
    )
    replaced_by = models.OneToOneField(
        "self",
        on_delete=models.PROTECT,
        null=True,
        blank=True,
        related_name="replaces",
        help_text="When facts changed before approval, the new request that replaced this one.",
    )
    ledger_entry = models.ForeignKey(
        "ledger.RefundEntry",
        on_delete=models.PROTECT,
        null=True,
        blank=True,
        related_name="approval_requests",
        help_text="The refund entry written.",
    )
    verification = models.JSONField(null=True, blank=True, help_text="The evaluator's verdict and evidence.")
    # The outbox: an `approved` row IS the execution instruction (written with the decision);
    # this is when it was last handed to Celery. The sweep re-enqueues approved rows whose last
    # hand-off (or decision) is older than SWEEP_GRACE_SECONDS.
    dispatched_at = models.DateTimeField(null=True, blank=True, help_text="Last time the execution was enqueued.")
    dispatch_attempts = models.PositiveIntegerField(default=0)
    dispatch_error = models.TextField(blank=True, help_text="Why the last enqueue failed (the broker's error).")
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    objects = TenantQuerySet.as_manager()

    class Meta:
        ordering = ["created_at"]
        permissions = [("approve_approvalrequest", "Can approve or decide refund approval requests")]
        constraints = [
            models.CheckConstraint(condition=Q(amount__gt=0), name="approval_amount_positive"),
            models.CheckConstraint(condition=Q(required_approvals__gte=1), name="approval_required_at_least_one"),
            # A constraint rather than unique=True: no second, `_like` index (approvals/0012).
            models.UniqueConstraint(fields=["idempotency_key"], name="approvals_approvalrequest_idempotency_key_key"),
        ]
        indexes = [
            # The review queue and the expiry sweep read pending requests by age.
            models.Index(fields=["created_at"], condition=Q(status="pending"), name="approval_pending_idx"),
            # The admin review queue's order within a tenant (pending first, oldest first, then
            # the admin's -pk): a page is read from the index, not sorted from the whole table.
            models.Index(F("tenant"), QUEUE_RANK, F("created_at"), F("id").desc(), name="approval_queue_idx"),
            # The sweep reads approved (not yet executed) requests.
            models.Index(fields=["decided_at"], condition=Q(status="approved"), name="approval_approved_idx"),
            # The review queue's banner counts the tenant's refunds the provider refused and nobody
            # filed again: a few rows, not a scan of every request (benchmarks/admin_queue.py).
            models.Index(
                fields=["tenant"],
                condition=Q(status="payment_failed", replaced_by__isnull=True),
                name="approval_payment_failed_idx",
            ),
        ]

    def __str__(self):
        return f"approval #{self.pk} {self.action} {self.amount} {self.currency} ({self.status})"

    @property
    def maker_ids(self) -> frozenset[int]:
        """The users who may never decide this request (maker-checker): the ticket's filer and,
        on a person's proposal, the proposer."""
        return frozenset(pk for pk in (self.requested_by_id, self.filed_by_id) if pk is not None)


class ApprovalVote(models.Model):
    """One finance user's decision on a request. Unique per person: approving twice counts once."""

    class Decision(models.TextChoices):
        APPROVE = "approve"
        DENY = "deny"
        REQUEST_CHANGES = "request_changes", "request changes"
        ESCALATE = "escalate"

    request = models.ForeignKey(ApprovalRequest, on_delete=models.PROTECT, related_name="votes")
    approver = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.PROTECT, related_name="+")
    decision = models.CharField(max_length=20, choices=Decision.choices)
    args_hash = models.CharField(max_length=64)
    note = models.TextField(blank=True)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["created_at"]
        constraints = [models.UniqueConstraint(fields=["request", "approver"], name="one_vote_per_approver")]


class ApprovalFollowUp(models.Model):
    """One approval event that one receiver has not handled yet (approvals.followups).

    Written in the transaction that made the change, so it commits with it: either the receiver
    raised (its savepoint was rolled back; `attempts` 1 and `last_error`), or an earlier event of
    the same ticket still waits for that receiver, and this one queues behind it (`attempts` 0).
    The periodic sweep delivers them, oldest first per receiver and ticket, with a backoff, until
    the receiver takes them (`delivered_at`). Rows are kept as the record of what was late."""

    tenant = models.ForeignKey(Tenant, on_delete=models.PROTECT, related_name="+")
    request = models.ForeignKey(ApprovalRequest, on_delete=models.PROTECT, related_name="followups")
    ticket_ref = models.PositiveBigIntegerField(
        null=True, blank=True, help_text="The request's ticket: one ticket's follow-ups are delivered in order."
    )
    event = models.CharField(max_length=60, help_text="The signal's name in approvals.signals.")
    receiver = models.CharField(max_length=200, help_text="The receiver's dispatch_uid (or its qualified name).")
    arguments = models.JSONField(
        default=dict, encoder=DjangoJSONEncoder, help_text="What the signal carried besides the request."
    )
    attempts = models.PositiveIntegerField(default=0)
    last_error = models.TextField(blank=True)
    created_at = models.DateTimeField(default=timezone.now, help_text="When the event happened.")
    next_attempt_at = models.DateTimeField(default=timezone.now)
    delivered_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["id"]
        indexes = [
            # The sweep reads the undelivered rows that are due; health and the dashboard count them.
            models.Index(
                fields=["next_attempt_at"], condition=Q(delivered_at__isnull=True), name="approval_followup_due_idx"
            ),
            # Every event sent asks whether its ticket already has one waiting.
            models.Index(
                fields=["tenant", "ticket_ref"],
                condition=Q(delivered_at__isnull=True),
                name="approval_followup_ticket_idx",
            ),
        ]

    def __str__(self):
        return f"follow-up #{self.pk} {self.event} of approval #{self.request_id} for {self.receiver}"


class DecisionRecord(models.Model):
    """The facts one gate decision was taken on, as they were then: the order's status, age,
    total and refunded amount, its lines, the ticket's request, items and destination, the
    model's (or the person's) proposal, the risk figures, the policy version and the outcome, and
    on a person's proposal who made it and the rules it waived. A later change to
    the order cannot alter it (a PostgreSQL trigger refuses UPDATE and DELETE, approvals/0016);
    a policy replay (approvals.replay) decides these facts again with a draft."""

    class Source(models.TextChoices):
        AGENT = "agent", "the agent's draft"
        PROPOSAL = "proposal", "a person's proposal"

    tenant = models.ForeignKey(Tenant, on_delete=models.PROTECT, related_name="+")
    order = models.ForeignKey(Order, on_delete=models.PROTECT, null=True, blank=True, related_name="+")
    ticket_ref = models.PositiveBigIntegerField(null=True, blank=True, help_text="The ticket's id.")
    source = models.CharField(max_length=10, choices=Source.choices, default=Source.AGENT)
    decided_at = models.DateTimeField()
    # The order as the gate read it.
    order_external_id = models.CharField(max_length=100, blank=True)
    order_status = models.CharField(max_length=20, blank=True)
    order_placed_at = models.DateTimeField(null=True, blank=True)
    order_age_days = models.IntegerField(null=True, blank=True)
    order_total = models.DecimalField(**MONEY, null=True, blank=True)
    currency = models.CharField(max_length=3)
    order_refunded = models.DecimalField(
        **MONEY, null=True, blank=True, help_text="What the ledger had refunded on the order (pending included)."
    )
    order_exposure = models.DecimalField(
        **MONEY,
        null=True,
        blank=True,
        help_text="Refunded plus requests in flight: what dual control counts (approvals.requests).",
    )
    order_lines = models.JSONField(
        default=list, blank=True, help_text="[{line_no, item_id, price, quantity, refunded_quantity}]"
    )
    # The ticket's request.
    requested_amount = models.DecimalField(**MONEY, null=True, blank=True)
    requested_currency = models.CharField(max_length=3, blank=True)
    item_ids = models.JSONField(default=list, blank=True)
    destination = models.JSONField(
        default=dict, blank=True, help_text="{kind, method, method_kind, foreign}: where the refund would go."
    )
    proposal = models.JSONField(
        default=dict, blank=True, help_text="{recommendation, amount, policy_version, destination, customer_reply}"
    )
    risk = models.JSONField(
        default=dict, blank=True, encoder=DjangoJSONEncoder, help_text="The risk figures the gate exposed, if any."
    )
    # The decision.
    policy = models.ForeignKey(RefundPolicy, on_delete=models.PROTECT, null=True, blank=True, related_name="+")
    policy_version = models.CharField(max_length=100, blank=True)
    outcome = models.CharField(max_length=20)
    allowed_amount = models.DecimalField(**MONEY, null=True, blank=True)
    order_disputes = models.JSONField(
        default=list, blank=True, help_text="The order's open disputes then (provider ref, status, reason)."
    )
    order_payments = models.JSONField(
        default=list, blank=True, help_text="What each of the order's payments could still return then."
    )
    codes = models.JSONField(default=list, blank=True)
    required_approvals = models.PositiveSmallIntegerField(default=0, help_text="0 when no approval was needed.")
    # A person's proposal (source `proposal`, approvals.services.proposals): who proposed it, and the
    # exception they asked for. A replay decides it again with the same rules waived.
    proposed_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.PROTECT, null=True, blank=True, related_name="+"
    )
    policy_exception = models.BooleanField(
        default=False, help_text="A person's policy exception: two distinct approvers at least, whatever the amount."
    )
    waived_rules = models.JSONField(
        default=list,
        blank=True,
        help_text="The policy rules the person's exception went outside (window, order_status).",
    )
    backfilled = models.BooleanField(
        default=False, help_text="Rebuilt from a draft recorded before facts were kept (see missing_facts)."
    )
    missing_facts = models.JSONField(
        default=list, blank=True, help_text="On a backfilled record: the facts the old rows did not keep."
    )

    objects = TenantQuerySet.as_manager()

    class Meta:
        ordering = ["decided_at", "id"]
        indexes = [models.Index(fields=["tenant", "decided_at"], name="decision_record_window_idx")]

    def __str__(self):
        return f"decision #{self.pk} {self.order_external_id} {self.outcome} under {self.policy_version}"


class PolicyReplay(models.Model):
    """One replay of a draft policy over a tenant's recorded decisions (approvals.replay): its
    progress and its result. The only row a replay writes."""

    class Status(models.TextChoices):
        QUEUED = "queued"
        RUNNING = "running"
        DONE = "done"
        FAILED = "failed"

    tenant = models.ForeignKey(Tenant, on_delete=models.PROTECT, related_name="+")
    draft = models.ForeignKey(RefundPolicy, on_delete=models.PROTECT, related_name="replays")
    draft_fingerprint = models.CharField(
        max_length=64, help_text="SHA-256 of the draft's rules when replayed: publishing needs this exact draft."
    )
    window_days = models.PositiveIntegerField(default=30)
    since = models.DateTimeField()
    until = models.DateTimeField()
    status = models.CharField(max_length=10, choices=Status.choices, default=Status.QUEUED)
    total = models.PositiveIntegerField(default=0, help_text="Decisions in the window.")
    done = models.PositiveIntegerField(default=0, help_text="Decisions replayed so far.")
    flipped = models.PositiveIntegerField(default=0)
    result = models.JSONField(default=dict, blank=True, encoder=DjangoJSONEncoder)
    error = models.TextField(blank=True)
    created_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.PROTECT, null=True, blank=True, related_name="+"
    )
    created_at = models.DateTimeField(auto_now_add=True)
    finished_at = models.DateTimeField(null=True, blank=True)

    objects = TenantQuerySet.as_manager()

    class Meta:
        ordering = ["-created_at", "-id"]

    def __str__(self):
        return f"replay #{self.pk} of {self.draft.version} ({self.status})"


class PolicyPublication(models.Model):
    """How a draft became current: after which replay, or without one and why (kept)."""

    tenant = models.ForeignKey(Tenant, on_delete=models.PROTECT, related_name="+")
    policy = models.OneToOneField(RefundPolicy, on_delete=models.PROTECT, related_name="publication")
    replay = models.ForeignKey(PolicyReplay, on_delete=models.PROTECT, null=True, blank=True, related_name="+")
    without_replay_reason = models.TextField(blank=True)
    published_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.PROTECT, null=True, blank=True, related_name="+"
    )
    published_at = models.DateTimeField(default=timezone.now)

    def __str__(self):
        return f"publication of {self.policy.version}"
