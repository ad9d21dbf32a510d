"""The agent's records: tickets, durable agent runs, drafts and the trace."""

import uuid

from django.conf import settings
from django.core.serializers.json import DjangoJSONEncoder
from django.db import models
from django.db.models import Q
from django.db.models.functions import Lower
from django.utils import timezone

from ledger.models import MONEY, Customer, Order, PaymentMethod, Tenant, TenantQuerySet


class Ticket(models.Model):
    class Status(models.TextChoices):
        QUEUED = "queued"
        RUNNING = "running"
        DRAFT_READY = "draft_ready", "draft ready"
        APPROVAL_REQUIRED = "approval_required", "approval required"
        APPROVED = "approved"
        REFUNDED = "refunded"
        ESCALATED = "escalated"
        DENIED = "denied"
        FAILED = "failed"
        CLOSED = "closed"
        PAYMENT_FAILED = "payment_failed", "payment failed"

    class StopReason(models.TextChoices):
        DRAFT_READY = "draft_ready"
        APPROVAL_REQUIRED = "approval_required"
        ESCALATED = "escalated"
        DENIED = "denied"
        FAILED = "failed"
        BUDGET_EXHAUSTED = "budget_exhausted"
        NO_PROGRESS = "no_progress"

    class Source(models.TextChoices):
        """Where the ticket came from: the form, the API, the support inbox, a Zendesk ticket."""

        WEB = "web", "web form"
        API = "api", "API"
        EMAIL = "email", "email"
        ZENDESK = "zendesk", "Zendesk"

    tenant = models.ForeignKey(Tenant, on_delete=models.PROTECT, related_name="tickets")
    order = models.ForeignKey(
        Order,
        on_delete=models.PROTECT,
        null=True,
        blank=True,
        related_name="tickets",
        help_text="The order the ticket is about. Blank on a customer-level ticket until the agent's draft names "
        "one of the customer's orders and the runtime accepts it.",
    )
    customer = models.ForeignKey(
        Customer,
        on_delete=models.PROTECT,
        null=True,
        blank=True,
        related_name="tickets",
        help_text="Blank on a ticket from an unknown or unverified sender: escalated for a person to match, "
        "never a refund path.",
    )
    source = models.CharField(max_length=10, choices=Source.choices, default=Source.WEB)
    external_ref = models.CharField(
        max_length=100, blank=True, help_text="The ticket's id where it came from (a Zendesk ticket id), or blank."
    )
    message = models.TextField(help_text="The customer's words. Untrusted input, never an instruction.")
    requested_amount = models.DecimalField(**MONEY, null=True, blank=True)
    currency = models.CharField(max_length=3)
    items = models.JSONField(default=list, blank=True, help_text="Item ids the ticket is about (optional).")
    refund_to = models.ForeignKey(
        PaymentMethod,
        on_delete=models.PROTECT,
        null=True,
        blank=True,
        related_name="+",
        help_text="The customer's chosen refund destination (one of their payment methods); "
        "blank = the order's original payment method.",
    )
    status = models.CharField(max_length=20, choices=Status.choices, default=Status.QUEUED)
    stop_reason = models.CharField(max_length=20, choices=StopReason.choices, null=True, blank=True)
    stop_detail = models.TextField(blank=True)
    trace_id = models.UUIDField(default=uuid.uuid4, unique=True, editable=False)
    created_by = models.ForeignKey(
        settings.AUTH_USER_MODEL,
        on_delete=models.PROTECT,
        null=True,
        blank=True,
        related_name="filed_tickets",
        help_text="The person who filed it; blank on a ticket that came in by email or from Zendesk.",
    )
    owner = models.ForeignKey(
        settings.AUTH_USER_MODEL,
        on_delete=models.PROTECT,
        null=True,
        blank=True,
        related_name="owned_tickets",
        help_text="The person who took the ticket from the escalation queue (blank: nobody yet).",
    )
    customer_reply = models.TextField(
        blank=True,
        help_text="The reply support may send now, written by the runtime from the ticket's current "
        "outcome (the model's draft stays on the draft).",
    )
    # The outbox: a `queued` row IS the agent-run instruction (written with the ticket, or with
    # the "request changes" that re-queued it); this is when it was last handed to Celery. The
    # sweep re-enqueues queued tickets whose last hand-off is older than SWEEP_GRACE_SECONDS.
    run_dispatched_at = models.DateTimeField(null=True, blank=True, help_text="Last time the agent run was enqueued.")
    # Written only by ticket_transition (refundagent.ticket_state), with the status.
    awaiting_person_since = models.DateTimeField(
        null=True,
        blank=True,
        help_text="When the ticket entered the escalation queue (escalated, failed or payment failed) and began "
        "waiting for a person: the queue's order and age. Kept while it moves within the queue; blank outside it.",
    )
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    objects = TenantQuerySet.as_manager()

    class Meta:
        ordering = ["-created_at", "-id"]
        indexes = [
            models.Index(fields=["tenant", "status"], name="ticket_tenant_status_idx"),
            # The escalation queue's order within a tenant (oldest wait first), over queued tickets only.
            models.Index(
                fields=["tenant", "awaiting_person_since", "id"],
                condition=Q(status__in=["escalated", "failed", "payment_failed"]),
                name="ticket_queue_idx",
            ),
        ]
        constraints = [
            models.CheckConstraint(
                condition=Q(requested_amount__isnull=True) | Q(requested_amount__gt=0),
                name="ticket_requested_amount_positive",
            ),
            # One product ticket per ticket elsewhere (a Zendesk ticket delivered twice files once).
            models.UniqueConstraint(
                fields=["tenant", "source", "external_ref"],
                condition=~Q(external_ref=""),
                name="ticket_external_ref_once",
            ),
        ]

    def __str__(self):
        about = self.order if self.order_id else f"customer {self.customer}" if self.customer_id else "no customer"
        return f"ticket #{self.pk} {about} ({self.status})"


# The escalation queue: tickets the agent could not finish, waiting for a person (the index above
# spells the same statuses).
QUEUE_STATUSES = (Ticket.Status.ESCALATED, Ticket.Status.FAILED, Ticket.Status.PAYMENT_FAILED)


class EscalatedTicket(Ticket):
    """The escalation queue in the admin: tickets a person must finish (a proxy, no table)."""

    class Meta:
        proxy = True
        verbose_name = "escalated ticket"
        verbose_name_plural = "escalation queue"


class AgentRun(models.Model):
    """One run of the agent loop for a ticket. Its state is persisted after every step, so a
    redelivered task resumes where the killed one stopped instead of starting over."""

    class Status(models.TextChoices):
        QUEUED = "queued"
        RUNNING = "running"
        STOPPED = "stopped"

    ticket = models.ForeignKey(Ticket, on_delete=models.PROTECT, related_name="runs")
    status = models.CharField(max_length=20, choices=Status.choices, default=Status.QUEUED)
    provider = models.CharField(max_length=40)
    model = models.CharField(max_length=100, blank=True)
    claimed_by = models.CharField(max_length=200, blank=True, help_text="Worker that holds the run.")
    claimed_at = models.DateTimeField(null=True, blank=True)
    lease_expires_at = models.DateTimeField(null=True, blank=True)
    provider_waiting_since = models.DateTimeField(
        null=True,
        blank=True,
        help_text="Since when the run waits out the model provider's 429/529 answers; cleared when it answers "
        "or the run stops (read through selectors.runs_waiting_on_provider, which ignores a dead worker's).",
    )
    iterations = models.PositiveIntegerField(default=0)
    invalid_args_retries = models.PositiveIntegerField(default=0)
    input_tokens = models.PositiveIntegerField(default=0)
    output_tokens = models.PositiveIntegerField(default=0)
    cache_creation_input_tokens = models.PositiveIntegerField(default=0)
    cache_read_input_tokens = models.PositiveIntegerField(default=0)
    cost_usd = models.DecimalField(max_digits=12, decimal_places=6, default=0)
    messages = models.JSONField(default=list, help_text="The conversation so far (durable loop state).")
    state = models.JSONField(default=dict, help_text="Evidence gathered, calls seen, pending step.")
    stop_reason = models.CharField(max_length=20, choices=Ticket.StopReason.choices, null=True, blank=True)
    stop_detail = models.TextField(blank=True)
    started_at = models.DateTimeField(null=True, blank=True)
    finished_at = models.DateTimeField(null=True, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["created_at", "id"]
        constraints = [
            # At most one unfinished run per ticket: two workers never run one ticket.
            models.UniqueConstraint(fields=["ticket"], condition=~Q(status="stopped"), name="one_open_run_per_ticket"),
        ]

    def __str__(self):
        return f"run #{self.pk} of ticket {self.ticket_id} ({self.status})"


class RefundDraft(models.Model):
    """What the model proposed, and what the runtime's gate made of it. One per run."""

    class Recommendation(models.TextChoices):
        REFUND = "refund"
        ESCALATE = "escalate"
        DENY = "deny"
        REQUEST_INFO = "request_info", "request info"

    run = models.OneToOneField(AgentRun, on_delete=models.PROTECT, related_name="draft")
    ticket = models.ForeignKey(Ticket, on_delete=models.PROTECT, related_name="drafts")
    recommendation = models.CharField(max_length=20, choices=Recommendation.choices)
    amount = models.DecimalField(**MONEY, null=True, blank=True, help_text="The model's amount, as proposed.")
    currency = models.CharField(max_length=3)
    policy_version = models.CharField(max_length=100, blank=True, help_text="The version the model cited.")
    rationale = models.TextField(blank=True)
    customer_reply = models.TextField(blank=True, help_text="A draft for a person to send. Never sent by the product.")
    gate_verdict = models.JSONField(default=dict, help_text="The runtime's decision: outcome, allowed amount, reasons.")
    created_at = models.DateTimeField(auto_now_add=True)

    def __str__(self):
        return f"draft for ticket {self.ticket_id}: {self.recommendation} {self.amount}"


class TraceEvent(models.Model):
    """One event of a ticket's trace. Redacted before it is stored (refundagent.redaction)."""

    class Span(models.TextChoices):
        RUN = "run"
        POLICY = "policy"
        TOOL = "tool"
        MODEL = "model"
        DRAFT = "draft"
        APPROVAL = "approval"
        STOP = "stop"
        LEDGER = "ledger"
        VERIFY = "verify"
        EVAL = "eval"
        REPLY = "reply"

    ticket = models.ForeignKey(Ticket, on_delete=models.PROTECT, related_name="trace_events")
    run = models.ForeignKey(AgentRun, on_delete=models.PROTECT, null=True, blank=True, related_name="trace_events")
    trace_id = models.UUIDField(db_index=True)
    seq = models.PositiveIntegerField()
    span = models.CharField(max_length=20, choices=Span.choices)
    status = models.CharField(max_length=20, blank=True, help_text="ok / denied / error / ...")
    decision = models.CharField(max_length=40, blank=True)
    reason = models.CharField(max_length=200, blank=True)
    tool = models.CharField(max_length=100, blank=True)
    duration_ms = models.PositiveIntegerField(null=True, blank=True)
    input_tokens = models.PositiveIntegerField(null=True, blank=True)
    output_tokens = models.PositiveIntegerField(null=True, blank=True)
    data = models.JSONField(default=dict, blank=True)
    # When the event happened: set as it is recorded, not when the step that carries it is written.
    at = models.DateTimeField(default=timezone.now, editable=False)

    class Meta:
        ordering = ["ticket", "seq"]
        constraints = [models.UniqueConstraint(fields=["ticket", "seq"], name="trace_event_seq_unique")]

    def __str__(self):
        return f"{self.trace_id}#{self.seq} {self.span} {self.decision}"


class ModelReplay(models.Model):
    """One shadow run of another model or provider over recorded tickets (agent.shadow): its
    progress and how its drafts compare with what happened. The only row a model replay writes."""

    class Status(models.TextChoices):
        QUEUED = "queued"
        RUNNING = "running"
        DONE = "done"
        FAILED = "failed"

    tenant = models.ForeignKey(Tenant, on_delete=models.PROTECT, related_name="+")
    provider = models.CharField(max_length=40)
    model = models.CharField(max_length=100, blank=True)
    window_days = models.PositiveIntegerField(default=30)
    limit = models.PositiveIntegerField(null=True, blank=True)
    since = models.DateTimeField()
    until = models.DateTimeField()
    status = models.CharField(max_length=10, choices=Status.choices, default=Status.QUEUED)
    total = models.PositiveIntegerField(default=0)
    done = models.PositiveIntegerField(default=0)
    agreed = models.PositiveIntegerField(default=0)
    input_tokens = models.PositiveBigIntegerField(default=0)
    output_tokens = models.PositiveBigIntegerField(default=0)
    cost_usd = models.DecimalField(max_digits=12, decimal_places=6, default=0)
    result = models.JSONField(default=dict, blank=True, encoder=DjangoJSONEncoder)
    error = models.TextField(blank=True)
    created_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.PROTECT, null=True, blank=True, related_name="+"
    )
    created_at = models.DateTimeField(auto_now_add=True)
    finished_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["-created_at", "-id"]

    def __str__(self):
        return f"model replay #{self.pk} {self.provider} {self.model} ({self.status})"

    @property
    def agreement(self) -> float | None:
        return None if not self.done else self.agreed / self.done


class TicketReply(models.Model):
    """One email to the customer: the reply a person reviewed and sent for one outcome of the
    ticket. The row is the outbox: written in the transaction that records the person's Send,
    delivered by a worker (refundagent.emails), re-delivered by the sweep. One per (ticket,
    outcome): a double click or a retry finds the row already there and sends nothing more."""

    class Status(models.TextChoices):
        QUEUED = "queued"
        SENDING = "sending"
        RETRYING = "retrying"
        SENT = "sent"
        FAILED = "failed"
        # Not sent: the outcome it spoke of stopped being true before delivery.
        WITHDRAWN = "withdrawn"

    tenant = models.ForeignKey(Tenant, on_delete=models.PROTECT, related_name="+")
    ticket = models.ForeignKey(Ticket, on_delete=models.PROTECT, related_name="replies")
    outcome = models.CharField(max_length=20, help_text="The ticket's outcome the reply speaks of (its status).")
    key = models.CharField(
        max_length=60, help_text="The outcome's key: the status, and for a refund the request (refunded:r17)."
    )
    to = models.EmailField(help_text="The customer's email from the shop's records.")
    subject = models.CharField(max_length=200)
    text = models.TextField()
    message_id = models.CharField(max_length=200, unique=True, help_text="Stable: derived from (ticket, outcome).")
    sent_by = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.PROTECT, related_name="+")
    status = models.CharField(max_length=20, choices=Status.choices, default=Status.QUEUED)
    attempts = models.PositiveIntegerField(default=0)
    last_error = models.TextField(blank=True)
    next_attempt_at = models.DateTimeField(default=timezone.now, help_text="Not delivered before this.")
    claimed_at = models.DateTimeField(null=True, blank=True, help_text="When a worker took it to deliver.")
    dispatched_at = models.DateTimeField(null=True, blank=True, help_text="Last time it was handed to Celery.")
    sent_at = models.DateTimeField(null=True, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["created_at", "id"]
        constraints = [models.UniqueConstraint(fields=["ticket", "key"], name="ticket_reply_once_per_outcome")]
        indexes = [
            # The sweep's work queue: replies not delivered yet.
            models.Index(
                fields=["next_attempt_at"],
                condition=Q(status__in=["queued", "sending", "retrying"]),
                name="ticket_reply_due_idx",
            ),
        ]

    def __str__(self):
        return f"reply {self.outcome} of ticket {self.ticket_id} ({self.status})"


class TicketMessage(models.Model):
    """One message of a ticket's conversation: an email (or helpdesk message) that came in, or a
    reply the product sent. The text is the sender's, untrusted; attachments are listed by name,
    size and type only (their bytes are never stored, and never reach the agent)."""

    class Direction(models.TextChoices):
        IN = "in"
        OUT = "out"

    tenant = models.ForeignKey(Tenant, on_delete=models.PROTECT, related_name="+")
    ticket = models.ForeignKey(Ticket, on_delete=models.PROTECT, related_name="messages")
    direction = models.CharField(max_length=3, choices=Direction.choices)
    sender = models.CharField(max_length=320, blank=True, help_text="The From address, as claimed by the message.")
    at = models.DateTimeField(default=timezone.now)
    subject = models.CharField(max_length=998, blank=True)
    text = models.TextField(blank=True)
    message_id = models.CharField(
        max_length=998, blank=True, help_text="The email's own Message-ID header (without <>): stored once per tenant."
    )
    in_reply_to = models.CharField(max_length=998, blank=True)
    attachments = models.JSONField(
        default=list, blank=True, help_text='[{"name", "size", "content_type", "skipped"?}]: never the bytes.'
    )

    objects = TenantQuerySet.as_manager()

    class Meta:
        ordering = ["at", "id"]
        constraints = [
            models.UniqueConstraint(
                fields=["tenant", "message_id"], condition=~Q(message_id=""), name="ticket_message_id_once"
            ),
        ]

    def __str__(self):
        return f"{self.direction} message {self.pk} of ticket {self.ticket_id}"


class InboxAddress(models.Model):
    """A tenant's support address: mail to it becomes the tenant's tickets (docs/inbox.md). One
    tenant per address, compared without case."""

    tenant = models.OneToOneField(Tenant, on_delete=models.PROTECT, related_name="inbox_address")
    address = models.EmailField(max_length=254)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        verbose_name_plural = "inbox addresses"
        constraints = [models.UniqueConstraint(Lower("address"), name="inbox_address_unique_ci")]

    def __str__(self):
        return self.address
