"""The agent's records in the Django admin, for reading: tickets with their trace, runs,
drafts and trace events. What the agent produced is never edited here; tickets change through
the services (API, web UI, and the escalation queue's actions and proposal page below, which
call the same services). Non-superusers see their own tenant only. A trace can be exported as
JSON, from a ticket's page or as an action on selected tickets."""

import json

from django.contrib import admin, messages
from django.core.exceptions import PermissionDenied
from django.http import Http404, HttpResponseRedirect, JsonResponse
from django.shortcuts import get_object_or_404
from django.template.response import TemplateResponse
from django.urls import path, reverse
from django.utils.html import format_html, format_html_join
from django.utils.timesince import timesince

from ledger.admin import ReadOnlyAdminMixin, ReadOnlyInline, TenantScopedAdminMixin, admin_tenant
from ledger.exceptions import DomainError
from ledger.selectors import order_refund_position

from .agent.shadow import PROVIDERS as SHADOW_PROVIDERS
from .forms import ProposalForm
from .labels import label, when
from .models import (
    QUEUE_STATUSES,
    AgentRun,
    EscalatedTicket,
    ModelReplay,
    RefundDraft,
    Ticket,
    TicketMessage,
    TraceEvent,
)
from .outbox import model_replay_start
from .selectors import ticket_customer_methods, ticket_customer_orders
from .services import ticket_assign
from .tracing import trace_export


def _pretty(value) -> str:
    return format_html(
        "<pre style='white-space: pre-wrap; max-width: 100ch'>{}</pre>",
        json.dumps(value, indent=2, sort_keys=True, default=str),
    )


class TraceEventInline(ReadOnlyInline):
    model = TraceEvent
    fields = (
        "seq",
        "span",
        "status",
        "decision",
        "reason",
        "tool",
        "duration_ms",
        "input_tokens",
        "output_tokens",
        "at",
    )
    ordering = ("seq",)


class TicketMessageInline(ReadOnlyInline):
    """The conversation (email, Zendesk): the sender's words are untrusted; attachments by name only."""

    model = TicketMessage
    fields = ("direction", "sender", "at", "subject", "text", "message_id", "in_reply_to", "attachments")
    ordering = ("at", "id")


class RefundDraftInline(ReadOnlyInline):
    model = RefundDraft
    fields = ("recommendation", "amount", "currency", "policy_version", "rationale", "customer_reply", "created_at")


class AgentRunInline(ReadOnlyInline):
    model = AgentRun
    fields = (
        "status",
        "stop_reason",
        "stop_detail",
        "iterations",
        "input_tokens",
        "output_tokens",
        "cost_usd",
        "started_at",
        "finished_at",
    )
    show_change_link = True


@admin.register(Ticket)
class TicketAdmin(TenantScopedAdminMixin, ReadOnlyAdminMixin, admin.ModelAdmin):
    list_display = (
        "id",
        "tenant",
        "order",
        "status_label",
        "stop_reason_label",
        "owner",
        "requested_amount",
        "currency",
        "created",
    )
    list_filter = ("status", "stop_reason", "source")
    search_fields = ("order__external_id", "customer__external_id", "trace_id")
    list_select_related = ("tenant", "order")
    readonly_fields = (
        "tenant",
        "order",
        "customer",
        "source",
        "external_ref",
        "message",
        "requested_amount",
        "currency",
        "items",
        "status",
        "stop_reason",
        "stop_detail",
        "risk_figures",
        "owner",
        "awaiting_person_since",
        "customer_reply",
        "trace_id",
        "trace_json",
        "created_by",
        "created_at",
        "updated_at",
    )
    fields = readonly_fields
    inlines = [TicketMessageInline, AgentRunInline, RefundDraftInline, TraceEventInline]
    actions = ["export_traces"]

    def get_urls(self):
        own = [
            path(
                "<int:ticket_id>/trace.json",
                self.admin_site.admin_view(self.trace_json_view),
                name="refundagent_ticket_trace_json",
            )
        ]
        return own + super().get_urls()

    @admin.display(description="status", ordering="status")
    def status_label(self, obj):
        return label(obj.status, "ticket_status")

    @admin.display(description="stop reason", ordering="stop_reason")
    def stop_reason_label(self, obj):
        return label(obj.stop_reason, "stop_reason")

    @admin.display(description="created", ordering="created_at")
    def created(self, obj):
        return when(obj.created_at)

    @admin.display(description="Risk figures")
    def risk_figures(self, obj):
        """The numbers the policy's risk rules read on the latest draft (approvals.risk) and the
        rules that tripped: what a person weighs before deciding."""
        if obj.pk is None:
            return "—"
        verdict = (
            RefundDraft.objects.filter(ticket=obj).order_by("-id").values_list("gate_verdict", flat=True).first()
        ) or {}
        figures = verdict.get("risk") or {}
        if not figures:
            return "—"
        tripped = [code for code in verdict.get("codes") or [] if code.startswith("risk_")]
        rows = format_html_join(
            "",
            "<tr><th>{}</th><td>{}</td></tr>",
            ((key.replace("_", " "), json.dumps(value, default=str)) for key, value in sorted(figures.items())),
        )
        return format_html("<table>{}</table><p>Rules tripped: {}</p>", rows, ", ".join(tripped) or "none")

    @admin.display(description="trace")
    def trace_json(self, obj):
        if obj.pk is None:
            return "-"
        url = reverse("admin:refundagent_ticket_trace_json", args=[obj.pk])
        return format_html('<a href="{}">Export the trace as JSON</a> ({} events)', url, obj.trace_events.count())

    def trace_json_view(self, request, ticket_id: int):
        ticket = get_object_or_404(self.get_queryset(request), pk=ticket_id)
        if not self.has_view_permission(request, ticket):
            return JsonResponse({"detail": "Not allowed."}, status=403)
        response = JsonResponse(trace_export(ticket), json_dumps_params={"indent": 2})
        response["Content-Disposition"] = f'attachment; filename="trace-ticket-{ticket.pk}.json"'
        return response

    @admin.action(description="Export the traces of the selected tickets as JSON")
    def export_traces(self, request, queryset):
        response = JsonResponse(
            {"traces": [trace_export(t) for t in queryset.order_by("id")]}, json_dumps_params={"indent": 2}
        )
        response["Content-Disposition"] = 'attachment; filename="traces.json"'
        return response


class QueueReasonFilter(admin.SimpleListFilter):
    title = "reason"
    parameter_name = "reason"

    def lookups(self, request, model_admin):
        return [(status, label(status, "queue_reason")) for status in QUEUE_STATUSES]

    def queryset(self, request, queryset):
        return queryset.filter(status=self.value()) if self.value() else queryset


class OwnerFilter(admin.SimpleListFilter):
    title = "owner"
    parameter_name = "owner"

    def lookups(self, request, model_admin):
        return [("me", "Mine"), ("none", "Nobody yet")]

    def queryset(self, request, queryset):
        if self.value() == "me":
            return queryset.filter(owner=request.user)
        if self.value() == "none":
            return queryset.filter(owner__isnull=True)
        return queryset


@admin.register(EscalatedTicket)
class EscalationQueueAdmin(TicketAdmin):
    """The escalation queue: tickets a person must finish, the longest waiting first (since they
    entered the queue, `awaiting_person_since`), with the reason in plain words, age and owner.
    Take and hand back are actions (traced, through ticket_assign). A refund is proposed here, on
    the proposal page (`<id>/propose/`: the support app's ProposalForm, posted to the same
    `ticket_refund_propose` as the API and the support app); closing with a reply is on the
    ticket's page in the support app."""

    list_display = ("id", "order", "reason", "age", "owner", "resolve")
    list_filter = (QueueReasonFilter, OwnerFilter)
    list_select_related = ("tenant", "order", "owner")
    ordering = ("awaiting_person_since", "id")
    # The conversation only: an email from an unknown sender is matched to a customer from it.
    inlines = [TicketMessageInline]
    actions = ["take", "hand_back"]
    readonly_fields = ("resolve", *TicketAdmin.readonly_fields)
    fields = readonly_fields

    def get_queryset(self, request):
        return super().get_queryset(request).filter(status__in=QUEUE_STATUSES)

    def get_urls(self):
        own = [
            path(
                "<path:object_id>/propose/",
                self.admin_site.admin_view(self.propose_view),
                name="refundagent_escalatedticket_propose",
            )
        ]
        return own + super().get_urls()

    @admin.display(description="reason")
    def reason(self, obj):
        detail = (
            f" ({label(obj.stop_reason, 'stop_reason')})" if obj.stop_reason and obj.stop_reason != obj.status else ""
        )
        return label(obj.status, "queue_reason") + detail

    @admin.display(description="waiting", ordering="awaiting_person_since")
    def age(self, obj):
        if obj.awaiting_person_since is None:
            return "—"
        return format_html(
            '<span title="waiting since {}; filed {}">{}</span>',
            when(obj.awaiting_person_since),
            when(obj.created_at),
            timesince(obj.awaiting_person_since),
        )

    @admin.display(description="resolve")
    def resolve(self, obj):
        if obj.pk is None:
            return "—"
        return format_html(
            '<a href="{}">Propose a refund</a> · <a href="{}">Close or open in the support app</a>',
            reverse("admin:refundagent_escalatedticket_propose", args=[obj.pk]),
            reverse("ticket", args=[obj.pk]),
        )

    def propose_view(self, request, object_id):
        """A person's refund proposal from the admin: the support app's form, the same service
        (`ticket_refund_propose`: the gate's hard limits, maker-checker, the trace). Bad input is
        a form error (422) and nothing is written; a refusal of the service keeps its status
        (422 the hard limits, 403 a role, 409 a ticket that left the queue)."""
        # The URL takes any text (admin's own object_id convention); a non-numeric id is no object.
        if not object_id.isascii() or not object_id.isdigit():
            raise Http404("No such ticket.")
        # Any ticket of the caller's tenant: one that left the queue gets the service's 409, not a 404.
        found = TicketAdmin.get_queryset(self, request).filter(pk=int(object_id)).first()
        if found is None or not self.has_view_permission(request, found):
            raise Http404("No such ticket.")
        ticket = Ticket.objects.select_related("order", "customer", "refund_to", "owner", "tenant").get(pk=found.pk)
        status = 200
        # A ticket filed without an order: the form picks one of the customer's orders.
        orders = ticket_customer_orders(ticket) if ticket.order_id is None else None
        # "Refund to" picks among the customer's own methods, as on the support app's ticket page.
        methods = ticket_customer_methods(ticket)
        if request.method == "POST":
            form = ProposalForm(request.POST, orders=orders, methods=methods)
            if form.is_valid():
                try:
                    made = form.propose(ticket=ticket, user=request.user)
                except DomainError as exc:
                    form.add_domain_error(exc)
                    status = exc.status_code
                else:
                    messages.success(
                        request,
                        format_html(
                            "Refund of {} {} proposed on ticket #{} (request #{}): finance decides it in the "
                            '<a href="{}">review queue</a>; you cannot approve what you proposed.',
                            made.amount,
                            made.currency,
                            ticket.pk,
                            made.pk,
                            reverse("admin:approvals_approvalrequest_change", args=[made.pk]),
                        ),
                    )
                    return HttpResponseRedirect(reverse("admin:refundagent_escalatedticket_changelist"))
            else:
                status = 422
        else:
            form = ProposalForm(orders=orders, methods=methods)
        order = ticket.order
        context = {
            **self.admin_site.each_context(request),
            "opts": self.opts,
            "original": ticket,
            "title": f"Propose a refund: ticket #{ticket.pk}",
            "form": form,
            "in_queue": ticket.status in QUEUE_STATUSES,
            "reason": self.reason(ticket),
            "position": order_refund_position(order) if order is not None else None,
            "methods": methods,
            "change_url": reverse("admin:refundagent_escalatedticket_change", args=[ticket.pk])
            if ticket.status in QUEUE_STATUSES
            else reverse("admin:refundagent_ticket_change", args=[ticket.pk]),
        }
        return TemplateResponse(request, "admin/refundagent/escalatedticket/propose.html", context, status=status)

    def _assign(self, request, queryset, to_me: bool):
        done = 0
        for ticket in queryset:
            try:
                ticket_assign(ticket=ticket, user=request.user, to_me=to_me)
                done += 1
            except DomainError as exc:
                self.message_user(request, exc.message, messages.WARNING)
        self.message_user(request, f"{done} ticket(s) {'taken' if to_me else 'handed back'}.")

    @admin.action(description="Take the selected tickets")
    def take(self, request, queryset):
        self._assign(request, queryset, True)

    @admin.action(description="Hand the selected tickets back")
    def hand_back(self, request, queryset):
        self._assign(request, queryset, False)


@admin.register(AgentRun)
class AgentRunAdmin(TenantScopedAdminMixin, ReadOnlyAdminMixin, admin.ModelAdmin):
    tenant_field = "ticket__tenant"
    list_display = (
        "id",
        "ticket",
        "status",
        "stop_reason",
        "provider",
        "model",
        "iterations",
        "input_tokens",
        "output_tokens",
        "cost_usd",
        "started_at",
        "finished_at",
    )
    list_filter = ("status", "stop_reason", "provider")
    list_select_related = ("ticket",)
    readonly_fields = (
        "ticket",
        "status",
        "provider",
        "model",
        "claimed_by",
        "claimed_at",
        "lease_expires_at",
        "iterations",
        "invalid_args_retries",
        "input_tokens",
        "output_tokens",
        "cache_creation_input_tokens",
        "cache_read_input_tokens",
        "cost_usd",
        "stop_reason",
        "stop_detail",
        "started_at",
        "finished_at",
        "created_at",
        "transcript",
        "loop_state",
    )
    exclude = ("messages", "state")

    @admin.display(description="transcript")
    def transcript(self, obj):
        return _pretty(obj.messages)

    @admin.display(description="state")
    def loop_state(self, obj):
        return _pretty(obj.state)


@admin.register(RefundDraft)
class RefundDraftAdmin(TenantScopedAdminMixin, ReadOnlyAdminMixin, admin.ModelAdmin):
    tenant_field = "ticket__tenant"
    list_display = ("id", "ticket", "recommendation", "amount", "currency", "policy_version", "outcome", "created_at")
    list_filter = ("recommendation",)
    list_select_related = ("ticket",)
    readonly_fields = (
        "run",
        "ticket",
        "recommendation",
        "amount",
        "currency",
        "policy_version",
        "rationale",
        "customer_reply",
        "verdict",
        "created_at",
    )
    exclude = ("gate_verdict",)

    @admin.display(description="gate outcome")
    def outcome(self, obj):
        return (obj.gate_verdict or {}).get("outcome", "")

    @admin.display(description="gate verdict")
    def verdict(self, obj):
        return _pretty(obj.gate_verdict)


@admin.register(TraceEvent)
class TraceEventAdmin(TenantScopedAdminMixin, ReadOnlyAdminMixin, admin.ModelAdmin):
    tenant_field = "ticket__tenant"
    list_display = ("trace_id", "ticket", "seq", "span", "status", "decision", "reason", "tool", "duration_ms", "at")
    list_filter = ("span", "status")
    search_fields = ("=trace_id", "decision", "reason", "tool")
    list_select_related = ("ticket",)
    ordering = ("-ticket_id", "seq")
    readonly_fields = (
        "ticket",
        "run",
        "trace_id",
        "seq",
        "span",
        "status",
        "decision",
        "reason",
        "tool",
        "duration_ms",
        "input_tokens",
        "output_tokens",
        "payload",
        "at",
    )
    exclude = ("data",)

    @admin.display(description="data")
    def payload(self, obj):
        return _pretty(obj.data)


@admin.register(ModelReplay)
class ModelReplayAdmin(TenantScopedAdminMixin, admin.ModelAdmin):
    """Model replays in shadow (docs/replay.md): the add page starts one on the operator's own
    tenant; a replay's page shows its progress (it refreshes itself), then the comparison."""

    list_display = ("id", "provider", "model", "status", "done", "total", "agreed", "cost_usd", "created_at")
    list_filter = ("status", "provider")
    change_form_template = "admin/refundagent/modelreplay/result.html"
    add_form_template = "admin/refundagent/modelreplay/start.html"

    def has_change_permission(self, request, obj=None):
        return False

    def has_delete_permission(self, request, obj=None):
        return False

    def add_view(self, request, form_url="", extra_context=None):
        if not self.has_add_permission(request):
            raise PermissionDenied
        error = ""
        if request.method == "POST":
            tenant = admin_tenant(request)
            try:
                if tenant is None:
                    raise DomainError("Your user belongs to no tenant.")
                replay = model_replay_start(
                    tenant=tenant,
                    provider=request.POST.get("provider", ""),
                    model=request.POST.get("model", ""),
                    days=_whole(request.POST.get("days", ""), "days"),
                    limit=_whole(request.POST.get("limit", ""), "limit") if request.POST.get("limit") else None,
                    user=request.user,
                )
            except DomainError as exc:
                error = exc.message
            else:
                return HttpResponseRedirect(reverse("admin:refundagent_modelreplay_change", args=[replay.pk]))
        context = {
            **self.admin_site.each_context(request),
            "opts": self.model._meta,
            "title": "Replay recorded tickets with another model",
            "providers": SHADOW_PROVIDERS,
            "error": error,
        }
        return TemplateResponse(request, self.add_form_template, context, status=422 if error else 200)

    def change_view(self, request, object_id, form_url="", extra_context=None):
        replay = self.get_queryset(request).filter(pk=_whole_or_none(object_id)).first()
        return super().change_view(request, object_id, form_url, {**(extra_context or {}), "replay": replay})


def _whole(value: str, field: str) -> int:
    value = (value or "").strip()
    if not value.isascii() or not value.isdigit():
        raise DomainError(f"--{field} is a whole number.")
    return int(value)


def _whole_or_none(value):
    return int(value) if isinstance(value, str) and value.isascii() and value.isdigit() else None
