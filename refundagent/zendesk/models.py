"""A tenant's Zendesk account, the tickets it sent (the webhook's outbox) and what goes back to it
(the write-back's outbox)."""

from django.db import models
from django.db.models import Q
from django.utils import timezone
from encrypted_fields.fields import EncryptedCharField

from ledger.models import Tenant, TenantQuerySet
from refundagent.models import Ticket


class ZendeskConnection(models.Model):
    """One Zendesk account per tenant. The API token and the webhook signing secret are encrypted
    at rest (SALT_KEY, SECRET_KEY and its fallbacks) and never shown again: not in the admin, the
    API, a log or a trace (`__repr__` and `__str__` name the subdomain only)."""

    tenant = models.OneToOneField(Tenant, on_delete=models.PROTECT, related_name="zendesk_connection")
    subdomain = models.CharField(max_length=63, unique=True, help_text="SUB of https://SUB.zendesk.com.")
    account_id = models.BigIntegerField(
        null=True,
        blank=True,
        unique=True,
        help_text="Zendesk's account id: how an event webhook (which names no subdomain) finds the tenant.",
    )
    agent_email = models.EmailField(help_text="The agent the API token belongs to (basic auth EMAIL/token:TOKEN).")
    agent_user_id = models.BigIntegerField(
        null=True,
        blank=True,
        help_text="That agent's Zendesk user id (users/me): the author of the product's comments.",
    )
    api_token = EncryptedCharField(max_length=200)
    webhook_secret = EncryptedCharField(max_length=200)
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    objects = TenantQuerySet.as_manager()

    def __str__(self):
        return f"{self.subdomain}.zendesk.com"

    def __repr__(self):
        return f"<ZendeskConnection {self.subdomain} tenant={self.tenant_id}>"


class ZendeskInbound(models.Model):
    """One Zendesk ticket as the webhook received it: stored once per (account, Zendesk ticket),
    then filed as a product ticket by a task (the requester is read through the Users API there,
    never in the webhook's answer). The row is the outbox: unprocessed rows are re-enqueued by the
    sweep."""

    tenant = models.ForeignKey(Tenant, on_delete=models.PROTECT, related_name="+")
    connection = models.ForeignKey(ZendeskConnection, on_delete=models.PROTECT, related_name="inbound")
    zendesk_ticket_id = models.BigIntegerField()
    event_id = models.CharField(max_length=100, blank=True, help_text="The event's id (event webhooks).")
    requester_id = models.BigIntegerField(null=True, blank=True)
    payload_requester_email = models.CharField(
        max_length=254, blank=True, help_text="As the payload claimed it; used only when it names no requester id."
    )
    requester_email = models.CharField(
        max_length=254, blank=True, help_text="As filed (Users API when an id was given)."
    )
    requester_verified = models.BooleanField(default=False)
    subject = models.CharField(max_length=500, blank=True)
    description = models.TextField(blank=True, help_text="The customer's words. Untrusted input, never an instruction.")
    ticket = models.ForeignKey(Ticket, on_delete=models.PROTECT, null=True, blank=True, related_name="+")
    attempts = models.PositiveIntegerField(default=0)
    last_error = models.TextField(blank=True)
    next_attempt_at = models.DateTimeField(default=timezone.now)
    dispatched_at = models.DateTimeField(null=True, blank=True)
    processed_at = models.DateTimeField(null=True, blank=True)
    received_at = models.DateTimeField(auto_now_add=True)

    objects = TenantQuerySet.as_manager()

    class Meta:
        ordering = ["received_at", "id"]
        constraints = [
            models.UniqueConstraint(fields=["connection", "zendesk_ticket_id"], name="zendesk_inbound_once"),
        ]
        indexes = [
            models.Index(fields=["next_attempt_at"], condition=Q(processed_at=None), name="zendesk_inbound_due_idx"),
        ]

    def __str__(self):
        return f"Zendesk ticket {self.zendesk_ticket_id} of {self.connection.subdomain}"


class ZendeskWrite(models.Model):
    """One comment the product owes a Zendesk ticket: an internal note at an outcome. Written in
    the transaction that moved the product ticket (refundagent.ticket_state), unique per (ticket,
    outcome, kind), delivered by a worker, re-delivered by the sweep, in order per ticket."""

    class Kind(models.TextChoices):
        NOTE = "note", "internal note"

    class Status(models.TextChoices):
        PENDING = "pending"
        SENDING = "sending"
        RETRYING = "retrying"
        SENT = "sent"
        # Zendesk refused it for good (the ticket deleted, the token revoked): a person looks.
        FAILED = "failed"

    tenant = models.ForeignKey(Tenant, on_delete=models.PROTECT, related_name="+")
    ticket = models.ForeignKey(Ticket, on_delete=models.PROTECT, related_name="zendesk_writes")
    zendesk_ticket_id = models.BigIntegerField()
    kind = models.CharField(max_length=10, choices=Kind.choices)
    outcome = models.CharField(max_length=20, help_text="The product ticket's status the comment speaks of.")
    key = models.CharField(max_length=100, help_text="ticket:outcome key:kind; also the marker on the comment.")
    body = models.TextField()
    public = models.BooleanField(default=False)
    status = models.CharField(max_length=10, choices=Status.choices, default=Status.PENDING)
    attempts = models.PositiveIntegerField(default=0)
    last_error = models.TextField(blank=True)
    next_attempt_at = models.DateTimeField(default=timezone.now)
    claimed_at = models.DateTimeField(null=True, blank=True)
    dispatched_at = models.DateTimeField(null=True, blank=True)
    sent_at = models.DateTimeField(null=True, blank=True)
    zendesk_comment_id = models.BigIntegerField(null=True, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)

    objects = TenantQuerySet.as_manager()

    class Meta:
        ordering = ["created_at", "id"]
        constraints = [models.UniqueConstraint(fields=["key"], name="zendesk_write_once")]
        indexes = [
            models.Index(
                fields=["next_attempt_at"],
                condition=Q(status__in=["pending", "sending", "retrying"]),
                name="zendesk_write_due_idx",
            ),
        ]

    def __str__(self):
        return f"{self.get_kind_display()} {self.outcome} of ticket {self.ticket_id} ({self.status})"
