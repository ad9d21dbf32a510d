"""The finance review queue (Django admin) and the admins of policies, capabilities and votes.

The ApprovalRequest changelist is the queue: pending first, then oldest first, a constant number
of queries per page. The detail page shows everything needed to judge the one exact action
without leaving it; approve / deny / request changes / escalate go through the same service as
the API (approval_request_decide). Nothing here edits an amount or an argument: to change an
amount, finance requests changes and the agent drafts a new request with its own hash.
"""

import json
from datetime import timedelta
from urllib.parse import urlencode

from django import forms
from django.conf import settings
from django.contrib import admin, messages
from django.core.exceptions import PermissionDenied
from django.core.paginator import Paginator
from django.db.models import Count, IntegerField, OuterRef, Subquery, Value
from django.db.models.functions import Coalesce
from django.http import Http404, HttpResponseRedirect
from django.template.response import TemplateResponse
from django.urls import path, reverse
from django.utils import timezone
from django.utils.functional import cached_property
from django.utils.html import format_html
from django.utils.http import url_has_allowed_host_and_scheme
from django.utils.safestring import mark_safe
from django.utils.timesince import timesince, timeuntil
from django_otp.forms import OTPTokenForm

from ledger.admin import (
    NoDeleteAdminMixin,
    ReadOnlyAdminMixin,
    StrictChangeListAdminMixin,
    TenantScopedAdminMixin,
    admin_tenant,
)
from ledger.exceptions import DomainError
from ledger.money import CENT, MoneyFormField, StrictMoneyAdminMixin
from ledger.selectors import order_ledger, order_refund_position, reconciliation_findings_unresolved
from ledger.services import ledger_refund_record_paid
from ledger.tenancy import tenant_for_user

from .destinations import approval_legs_screen, approval_request_entries
from .models import (
    QUEUE_RANK,
    ApprovalRequest,
    ApprovalVote,
    Capability,
    DecisionRecord,
    PolicyReplay,
    RefundPolicy,
    TenantCapability,
)
from .outbox import policy_replay_start
from .reason_words import destination_words
from .replay import policy_replay_summary
from .review import review_sections
from .second_factor import NO_DEVICE, UNVERIFIED, second_factor_state, second_factor_verify
from .selectors import approval_changes_asked, approvals_refused_by_provider
from .services.decisions import DECISIONS, approval_decisions_open, approval_request_decide, user_can_decide
from .services.policies import policy_draft_publish, policy_replay_latest, refund_policy_draft
from .services.refile import approval_request_payment_retry

BADGE_COLOURS = {
    ApprovalRequest.Status.PENDING: "#205067",
    ApprovalRequest.Status.APPROVED: "#447e9b",
    ApprovalRequest.Status.EXECUTED: "#2e7d32",
    ApprovalRequest.Status.FAILED: "#ba2121",
    ApprovalRequest.Status.DENIED: "#6b6b6b",
    ApprovalRequest.Status.CHANGES_REQUESTED: "#8a6d3b",
    ApprovalRequest.Status.ESCALATED: "#8a6d3b",
    ApprovalRequest.Status.EXPIRED: "#6b6b6b",
    ApprovalRequest.Status.INVALIDATED: "#6b6b6b",
    ApprovalRequest.Status.PAYMENT_FAILED: "#ba2121",
}
DECISION_LABELS = {
    "approve": "Approve",
    "deny": "Deny",
    "request_changes": "Request changes",
    "escalate": "Escalate",
}


def status_badge_html(request: ApprovalRequest):
    colour = BADGE_COLOURS.get(request.status, "#6b6b6b")
    label = "FAILED" if request.status == ApprovalRequest.Status.FAILED else status_words(request.status)
    return format_html(
        '<span class="ra-badge ra-badge-{}" style="background:{};color:#fff;padding:2px 7px;border-radius:9px;'
        'font-weight:600;white-space:nowrap">{}</span>',
        request.status,
        colour,
        label,
    )


class ExpiryFilter(admin.SimpleListFilter):
    title = "expiry"
    parameter_name = "expiry"

    def lookups(self, request, model_admin):
        return [("expired", "expired"), ("24h", "expiring within 24h"), ("later", "later")]

    def queryset(self, request, queryset):
        now = timezone.now()
        if self.value() == "expired":
            return queryset.filter(expires_at__lte=now)
        if self.value() == "24h":
            return queryset.filter(expires_at__gt=now, expires_at__lte=now + timedelta(hours=24))
        if self.value() == "later":
            return queryset.filter(expires_at__gt=now + timedelta(hours=24))
        return queryset


class PolicyVersionFilter(admin.SimpleListFilter):
    """The policy versions of the reviewer's tenant, from the policies (a few rows), not a
    SELECT DISTINCT over every approval request."""

    title = "policy version"
    parameter_name = "policy_version"

    def lookups(self, request, model_admin):
        policies = RefundPolicy.objects.order_by("version")
        tenant = None if request.user.is_superuser else admin_tenant(request)
        if tenant is not None:
            policies = policies.filter(tenant=tenant)
        elif not request.user.is_superuser:
            policies = policies.none()
        versions = dict.fromkeys(policies.values_list("version", flat=True))
        return [(v, v) for v in versions]

    def queryset(self, request, queryset):
        return queryset.filter(policy_version=self.value()) if self.value() else queryset


def destination_of_request_words(request) -> str:
    """Where the request's refund goes, in words with the exact method: "the original payment
    method (card_4242)" (the args' destination kind is a code)."""
    args = request.args or {}
    method = args.get("destination_method")
    return destination_words(args.get("destination") or "original") + (f" ({method})" if method else "")


def status_words(status: str) -> str:
    """An approval status as the queue writes it: the model's label with a capital first letter,
    so "Pending" and "Executed and verified" read alike (filter, badge, review page)."""
    words = ApprovalRequest.Status(status).label if status in ApprovalRequest.Status.values else str(status)
    return words[:1].upper() + words[1:]


class StatusFilter(admin.SimpleListFilter):
    title = "status"
    parameter_name = "status__exact"

    def lookups(self, request, model_admin):
        return [(code, status_words(code)) for code in ApprovalRequest.Status.values]

    def queryset(self, request, queryset):
        return queryset.filter(status=self.value()) if self.value() else queryset


class CappedCountPaginator(Paginator):
    """Counts at most QUEUE_COUNT_CAP requests: a COUNT(*) over a tenant's whole history on
    every page load is what made the queue slow at 100k. Past the cap, the page says so and
    the last pages are not offered; nobody reviews that far back (filter or search instead)."""

    @cached_property
    def count(self):
        return self.object_list.order_by().values("pk")[:QUEUE_COUNT_CAP].count()


# The support app's page of a ticket (its URL is the product's, docs/api.md): the queue and the
# review page link a request to the ticket it was made for.
SUPPORT_TICKET_URL = "/tickets/{}/"

# The evaluator's checks (approvals.services.verification) in words for the review page; a check without
# an entry is shown humanised ("new_check" -> "New check"), never as its code.
VERIFICATION_CHECK_WORDS = {
    "one_entry_under_key": "One ledger entry under the request's key",
    "args_match_hash": "The executed arguments match the approved hash",
    "entry_on_order": "The entry is on the request's order",
    "entry_same_tenant": "The entry is in the request's shop",
    "entry_recorded_on_request": "The request records the entry",
    "approval_ref": "The entry names the approval",
    "amount_exact": "The amount is the approved amount",
    "amount_within_refundable_at_request": "Within what was refundable when requested",
    "currency_exact": "The currency is the approved currency",
    "destination": "Paid to the approved destination",
    "destination_method_exact": "Paid to the approved payment method",
    "items_exact": "The items are the approved items",
    "distinct_approvers": "Enough distinct finance approvers",
    "filer_not_approver": "Nobody approved what they filed or proposed",
    "within_policy_window": "Within the policy's refund window",
    "exception_within_policy": "The exception waives only waivable rules",
    "entry_succeeded": "The ledger entry succeeded",
    "order_refunds_within_total": "The order's refunds stay within its total",
    "provider_has_refund": "The payment provider has the refund",
    "provider_status": "The provider says it succeeded",
    "provider_amount": "The provider's amount matches",
    "provider_refund_id": "The provider's refund id matches",
    "provider_metadata_approval": "The provider's record names the approval",
    "one_entry_per_leg": "One ledger entry per approved leg",
    "legs_sum": "The legs add up to the approved amount",
    "leg_payment": "Paid back to the leg's payment",
    "leg_method": "Paid to the leg's payment method",
    "leg_amount": "The leg's amount is the approved one",
    "leg_tender": "Paid the way the leg's tender is paid",
    "leg_provider_payment": "The provider refunded the leg's payment",
}


def verification_check_words(name: str) -> str:
    return VERIFICATION_CHECK_WORDS.get(name) or str(name).replace("_", " ").capitalize()


# The count the queue's paginator stops at (200 pages of 50).
QUEUE_COUNT_CAP = 10_000


class DecisionForm(forms.Form):
    args_hash = forms.CharField(widget=forms.HiddenInput, max_length=64)
    note = forms.CharField(widget=forms.Textarea(attrs={"rows": 4, "cols": 80}), required=False, max_length=4000)
    wanted_amount = MoneyFormField(
        required=False,
        min_value=CENT,
        help_text="Optional: the amount you would approve instead. The agent drafts a new request.",
    )

    def __init__(self, *args, decision: str, **kwargs):
        super().__init__(*args, **kwargs)
        self.decision = decision
        if decision != "request_changes":
            del self.fields["wanted_amount"]
        if decision != "approve":
            self.fields["note"].required = True
            self.fields["note"].help_text = "Required: the ticket and the trace carry it."


@admin.register(ApprovalRequest)
class ApprovalRequestAdmin(TenantScopedAdminMixin, ReadOnlyAdminMixin, admin.ModelAdmin):
    change_form_template = "admin/approvals/approvalrequest/change_form.html"
    change_list_template = "admin/approvals/approvalrequest/change_list.html"
    # Everything finance decides on fits 1280 px beside the filters (the browser test measures it):
    # who filed it and when share a column, and the admin's app menu is folded away on these pages.
    list_display = (
        "id",
        "status_badge",
        "ticket",
        "order_id_display",
        "customer",
        "amount_display",
        "policy_version",
        "approvals_display",
        "time_to_expiry",
        "filed",
        "payment_problem",
    )
    list_display_links = ("id", "order_id_display")
    list_filter = (StatusFilter, PolicyVersionFilter, ExpiryFilter)
    search_fields = ("order__external_id", "ticket_ref__exact", "=idempotency_key")
    search_help_text = "Order id (e.g. ORD-5001), ticket id, or idempotency key."
    list_select_related = ("order", "order__customer", "requested_by")
    list_per_page = 50
    show_full_result_count = False
    paginator = CappedCountPaginator
    actions = ["payment_file_again"]
    # The review above the form shows the action, the keys, the votes and the evidence; the stock
    # form keeps only the record of the decision that the review does not repeat.
    fieldsets = (
        (
            "Decision record",
            {
                "fields": (
                    "decided_by",
                    "decided_at",
                    "decision_note",
                    "requested_amount_change",
                    "replaced_by",
                    "ledger_entry",
                    "approver_role",
                    "updated_at",
                    # the execution's hand-off (the outbox): when it was last published, and why not
                    "dispatched_at",
                    "dispatch_attempts",
                    "dispatch_error",
                )
            },
        ),
    )

    def get_queryset(self, request):
        approvals = (
            ApprovalVote.objects.filter(request=OuterRef("pk"), decision=ApprovalVote.Decision.APPROVE)
            .order_by()
            .values("request")
            .annotate(n=Count("*"))
            .values("n")
        )
        return (
            super()
            .get_queryset(request)
            .annotate(
                approvals_so_far=Coalesce(Subquery(approvals, output_field=IntegerField()), Value(0)),
                # Another pending request on the same order (two tickets asking for the same money).
                shares_order_with=Subquery(
                    ApprovalRequest.objects.filter(order=OuterRef("order"), status=ApprovalRequest.Status.PENDING)
                    .exclude(pk=OuterRef("pk"))
                    .order_by("pk")
                    .values("pk")[:1]
                ),
            )
        )

    def get_ordering(self, request):
        # The queue: pending and refused payments (back with finance) first, then oldest first (the
        # admin adds -pk); served by the index approval_queue_idx, which has this very expression.
        return [QUEUE_RANK, "created_at"]

    # --- columns -------------------------------------------------------------------------

    @admin.display(description="ticket", ordering="ticket_ref")
    def ticket(self, obj):
        if not obj.ticket_ref:
            return "—"
        return format_html('<a href="{}">#{}</a>', SUPPORT_TICKET_URL.format(obj.ticket_ref), obj.ticket_ref)

    @admin.display(description="order", ordering="order__external_id")
    def order_id_display(self, obj):
        other = getattr(obj, "shares_order_with", None)
        if other is None or obj.status != ApprovalRequest.Status.PENDING:
            return obj.order.external_id
        return format_html(
            '{}<br><small class="ra-shared" title="Another pending request asks for money of the same order">'
            "&#9888; also #{}</small>",
            obj.order.external_id,
            other,
        )

    @admin.display(description="customer", ordering="order__customer__external_id")
    def customer(self, obj):
        return obj.order.customer.external_id

    @admin.display(description="amount", ordering="amount")
    def amount_display(self, obj):
        return format_html("<strong>{}&nbsp;{}</strong>", obj.amount, obj.currency)

    @admin.display(description="filed", ordering="created_at")
    def filed(self, obj):
        who = obj.requested_by.get_username() if obj.requested_by_id else "—"
        recent = (timezone.now() - obj.created_at).total_seconds() < 60
        ago = "just now" if recent else f"{timesince(obj.created_at, depth=1)} ago"
        return format_html("{}<br><small>{}</small>", who, ago)

    @admin.display(description="time to expiry", ordering="expires_at")
    def time_to_expiry(self, obj):
        if obj.status != ApprovalRequest.Status.PENDING:
            return "—"
        if obj.expires_at <= timezone.now():
            return mark_safe('<span style="color:#ba2121;font-weight:600">expired</span>')
        return timeuntil(obj.expires_at, depth=1)

    @admin.display(description="approvals")
    def approvals_display(self, obj):
        return f"{getattr(obj, 'approvals_so_far', 0)}/{obj.required_approvals}"

    @admin.display(description="payment")
    def payment_problem(self, obj):
        """The provider's reason when it refused the payout (finance files it again)."""
        if obj.status != ApprovalRequest.Status.PAYMENT_FAILED:
            return "—"
        return format_html('<span style="color:#ba2121">{}</span>', (obj.verification or {}).get("detail", ""))

    @admin.display(description="status", ordering="status")
    def status_badge(self, obj):
        return status_badge_html(obj)

    # --- the review page -----------------------------------------------------------------

    # The admin's app menu would take a quarter of a laptop screen from the queue and the review.
    WIDE = {"is_nav_sidebar_enabled": False}

    @admin.action(description="File a refused payment again (a new request to approve)")
    def payment_file_again(self, request, queryset):
        for obj in queryset:
            try:
                again = approval_request_payment_retry(request_id=obj.pk, user=request.user)
            except DomainError as exc:
                messages.error(request, f"#{obj.pk}: {exc.message}")
            else:
                messages.success(request, f"#{obj.pk} filed again as #{again.pk}: approve it to pay.")

    def changelist_view(self, request, extra_context=None):
        # The queue tells finance when the ledger and the provider disagree.
        tenant = None if request.user.is_superuser else admin_tenant(request)
        if request.user.is_superuser or tenant is not None:
            unresolved = reconciliation_findings_unresolved(tenant=tenant).count()
            if unresolved:
                messages.warning(
                    request,
                    format_html(
                        '{} unresolved payment reconciliation finding(s): <a href="{}">review them</a>.',
                        unresolved,
                        reverse("admin:ledger_reconciliationfinding_changelist"),
                    ),
                )
        payment_failed = approvals_refused_by_provider(self.get_queryset(request)).count()
        if payment_failed:
            messages.error(
                request,
                f"{payment_failed} refund(s) refused by the payment provider: file them again or close the ticket.",
            )
        return super().changelist_view(
            request, {**self.WIDE, "title": "Approval requests to review", **(extra_context or {})}
        )

    def change_view(self, request, object_id, form_url="", extra_context=None):
        extra_context = {**self.WIDE, **(extra_context or {})}
        obj = self.get_object(request, object_id)
        if obj is not None and self.has_view_permission(request, obj):
            extra_context.update(self.review_context(request, obj))
            # In words, not the action's code and the status's ("refunds.issue_refund ... (changes_requested)").
            extra_context.setdefault("subtitle", None)
            extra_context.setdefault(
                "title",
                f"Request #{obj.pk}: refund of {obj.amount} {obj.currency} on {obj.order.external_id} "
                f"({status_words(obj.status)})",
            )
        return super().change_view(request, object_id, form_url, extra_context)

    def review_context(self, request, obj: ApprovalRequest) -> dict:
        order = obj.order
        position = order_refund_position(order)
        now = timezone.now()
        expired = obj.expires_at <= now
        is_maker = request.user.pk in obj.maker_ids
        open_decisions, closed_why = (
            approval_decisions_open(request=obj, user=request.user, now=now)
            if user_can_decide(request.user)
            else ([], "")
        )
        votes = list(obj.votes.select_related("approver"))
        payments = [
            {
                "method": p.get_method_display(),
                "card": f"{p.card_brand or 'card'} ****{p.card_last4}" if p.card_last4 else "",
                "amount": p.amount,
                "currency": p.currency,
                "at": p.created_at,
            }
            for p in order.payments.all()
        ]
        return {
            "review": obj,
            "review_badge": status_badge_html(obj),
            "review_args_json": json.dumps(obj.args, indent=2, sort_keys=True),
            "review_destination": destination_of_request_words(obj),
            "review_votes": votes,
            "review_approvals": sum(1 for v in votes if v.decision == ApprovalVote.Decision.APPROVE),
            "review_order": order,
            "review_customer": order.customer,
            "review_items": list(order.items.all()),
            "review_payments": payments,
            "review_legs": approval_legs_screen(request=obj),
            "review_position": position,
            "review_refundable_changed": position.refundable != obj.refundable_at_request,
            "review_ticket_url": SUPPORT_TICKET_URL.format(obj.ticket_ref) if obj.ticket_ref else "",
            "review_changes_asked": approval_changes_asked(
                tenant=obj.tenant_id, ticket_ref=obj.ticket_ref, exclude_pk=obj.pk
            ),
            "review_ledger": list(order_ledger(order)),
            "review_policy": obj.policy,
            "review_expired": expired,
            "review_verification": obj.verification,
            "review_verification_json": json.dumps(obj.verification, indent=2, default=str) if obj.verification else "",
            "review_checks": [
                {
                    **check,
                    "words": verification_check_words(check.get("name", ""))
                    + (f" (leg {check['leg']})" if check.get("leg") else ""),
                }
                for check in ((obj.verification or {}).get("checks") or [])
            ],
            "review_sections": review_sections(obj),
            "review_decidable": bool(open_decisions),
            "review_is_maker": is_maker,
            "review_closed_why": closed_why,
            "review_already_voted": bool(open_decisions) and "approve" not in open_decisions,
            "review_decisions": [
                (d, DECISION_LABELS[d], reverse("admin:approvals_approvalrequest_decide", args=[obj.pk, d]))
                for d in open_decisions
            ],
            "review_manual_payout": self._manual_payout(request, obj),
        }

    def _manual_payout(self, request, obj: ApprovalRequest) -> dict | None:
        """The payout finance still has to make by hand (the manual gateway), for finance only: the
        first leg still waiting for it (the next is offered once that one is recorded)."""
        entry = _manual_leg_waiting(obj)
        if entry is None or not user_can_decide(request.user):
            return None
        return {"entry": entry, "url": reverse("admin:approvals_approvalrequest_paid", args=[obj.pk])}

    def get_urls(self):
        return [
            path(
                "second-factor/",
                self.admin_site.admin_view(self.second_factor_view),
                name="approvals_approvalrequest_second_factor",
            ),
            path(
                "<path:object_id>/decide/<str:decision>/",
                self.admin_site.admin_view(self.decide_view),
                name="approvals_approvalrequest_decide",
            ),
            path(
                "<path:object_id>/paid/",
                self.admin_site.admin_view(self.paid_view),
                name="approvals_approvalrequest_paid",
            ),
            *super().get_urls(),
        ]

    def paid_view(self, request, object_id):
        """Finance records that they paid the request's refund by hand (POST only): who, when and the
        reference, through the ledger's own service (the same as POST /api/refunds/{id}/paid)."""
        if request.method != "POST":
            raise Http404("Record a payout with the form on the review page.")
        if not user_can_decide(request.user):
            raise PermissionDenied("Recording a payout needs the finance role and permission.")
        if not object_id.isascii() or not object_id.isdigit():
            raise Http404("No such approval request.")
        obj = self.get_queryset(request).filter(pk=int(object_id)).first()
        if obj is None or not self.has_view_permission(request, obj) or obj.ledger_entry_id is None:
            raise Http404("No such approval request.")
        change_url = reverse("admin:approvals_approvalrequest_change", args=[obj.pk])
        # The leg waiting for a payout by hand (a request paid in legs may have one after store credit).
        waiting = _manual_leg_waiting(obj)
        try:
            entry = ledger_refund_record_paid(
                entry_id=waiting.pk if waiting is not None else obj.ledger_entry_id,
                tenant=tenant_for_user(request.user),
                reference=request.POST.get("reference", ""),
                user=request.user,
            )
        except DomainError as exc:
            messages.error(request, f"Not recorded: {exc.message}")
            return HttpResponseRedirect(change_url)
        messages.success(
            request,
            f"Refund #{entry.pk} recorded as paid by hand (reference {entry.provider_ref}); it is {entry.status}.",
        )
        return HttpResponseRedirect(change_url)

    def decide_view(self, request, object_id, decision):
        """Confirm one decision with a note (approving shows the exact amount and order once more),
        then post it with the args hash that was shown."""
        if decision not in DECISIONS:
            raise Http404("Unknown decision.")
        if not user_can_decide(request.user):
            raise PermissionDenied("Deciding approval requests needs the finance role and permission.")
        # The second factor, before anything of the request is shown or decided.
        factor = second_factor_state(user=request.user)
        if factor == NO_DEVICE:
            raise PermissionDenied(
                "Deciding refunds needs a confirmed second factor (a TOTP device): ask an administrator "
                "to create one for you (manage.py otp_device_create)."
            )
        if factor == UNVERIFIED:
            verify = reverse("admin:approvals_approvalrequest_second_factor")
            return HttpResponseRedirect(f"{verify}?{urlencode({'next': request.get_full_path()})}")
        # The URL takes any text (admin's own object_id convention); a non-numeric id is no object.
        if not object_id.isascii() or not object_id.isdigit():
            raise Http404("No such approval request.")
        obj = self.get_queryset(request).select_related("order", "order__customer").filter(pk=int(object_id)).first()
        if obj is None or not self.has_view_permission(request, obj):
            raise Http404("No such approval request.")
        change_url = reverse("admin:approvals_approvalrequest_change", args=[obj.pk])
        open_decisions, closed_why = approval_decisions_open(request=obj, user=request.user)
        # Only a decision that can still succeed gets a confirm button. A post is always put to the
        # service, which has the last word (and says why it refuses).
        cannot = "" if decision in open_decisions else (closed_why or "This decision is no longer open.")
        if request.method == "POST":
            form = DecisionForm(request.POST, decision=decision)
            if form.is_valid():
                try:
                    approval_request_decide(
                        request_id=obj.pk,
                        user=request.user,
                        decision=decision,
                        args_hash=form.cleaned_data["args_hash"],
                        note=form.cleaned_data["note"],
                        wanted_amount=form.cleaned_data.get("wanted_amount"),
                    )
                except DomainError as exc:
                    field = (exc.details or {}).get("field")
                    if field not in form.fields:
                        messages.error(request, f"Not decided: {exc.message}")
                        return HttpResponseRedirect(change_url)
                    # About one field (a wanted amount above the cap): the same form, what was
                    # typed kept, the reason at the field.
                    form.add_error(field, exc.message)
                else:
                    obj.refresh_from_db()
                    messages.success(
                        request,
                        f"Request #{obj.pk}: {DECISION_LABELS[decision].lower()} recorded; "
                        f"it is now {obj.get_status_display()}.",
                    )
                    return HttpResponseRedirect(change_url)
        else:
            form = DecisionForm(initial={"args_hash": obj.args_hash}, decision=decision)
        context = {
            **self.admin_site.each_context(request),
            "opts": self.opts,
            "original": obj,
            "decision": decision,
            "decision_label": DECISION_LABELS[decision],
            "form": form,
            "change_url": change_url,
            "title": f"{DECISION_LABELS[decision]}: request #{obj.pk}",
            "args_json": json.dumps(obj.args, indent=2, sort_keys=True),
            "destination": destination_of_request_words(obj),
            "legs": approval_legs_screen(request=obj),
            "expired": obj.expires_at <= timezone.now(),
            "cannot": cannot,
            "is_nav_sidebar_enabled": False,
            # The embedded demo may run without the second factor; it says so where money is decided.
            "second_factor_off": not settings.APPROVER_SECOND_FACTOR,
        }
        return TemplateResponse(
            request, "admin/approvals/approvalrequest/decide.html", context, status=422 if form.errors else 200
        )

    def second_factor_view(self, request):
        """Enter the authenticator's code once per session; then back to the decision asked for."""
        back = request.POST.get("next") or request.GET.get("next") or ""
        if not url_has_allowed_host_and_scheme(back, allowed_hosts={request.get_host()}):
            back = reverse("admin:approvals_approvalrequest_changelist")
        if second_factor_state(user=request.user) == NO_DEVICE:
            raise PermissionDenied(
                "You have no confirmed second factor (a TOTP device): ask an administrator to create one."
            )
        data = request.POST.copy() if request.method == "POST" else None
        devices = [value for value, _ in OTPTokenForm.device_choices(request.user) if value]
        if data is not None and not data.get("otp_device") and len(devices) == 1:
            data["otp_device"] = devices[0]  # one device: no need to pick it
        form = OTPTokenForm(request.user, request, data)
        if request.method == "POST" and form.is_valid():
            second_factor_verify(request=request, device=request.user.otp_device)
            return HttpResponseRedirect(back)
        context = {
            **self.admin_site.each_context(request),
            "opts": self.opts,
            "form": form,
            "next": back,
            "title": "Confirm your second factor",
            "is_nav_sidebar_enabled": False,
        }
        return TemplateResponse(
            request, "admin/approvals/approvalrequest/second_factor.html", context, status=422 if form.errors else 200
        )


@admin.register(ApprovalVote)
class ApprovalVoteAdmin(TenantScopedAdminMixin, ReadOnlyAdminMixin, admin.ModelAdmin):
    tenant_field = "request__tenant"
    list_display = ("id", "request", "approver", "decision", "created_at")
    list_filter = ("decision",)
    list_select_related = ("request", "approver")
    search_fields = ("request__order__external_id", "approver__username")


@admin.register(RefundPolicy)
class RefundPolicyAdmin(StrictMoneyAdminMixin, TenantScopedAdminMixin, NoDeleteAdminMixin, admin.ModelAdmin):
    list_display = (
        "version",
        "tenant",
        "status",
        "window_days",
        "two_approver_threshold",
        "two_approver_threshold_currency",
        "approvals_above_threshold",
        "published_at",
        "retired_at",
    )
    list_filter = ("status", "tenant")
    list_select_related = ("tenant",)
    search_fields = ("version",)
    actions = ["copy_to_draft", "replay", "publish"]
    LIFECYCLE = ("status", "published_at", "retired_at", "supersedes", "created_at")

    def get_readonly_fields(self, request, obj=None):
        if obj is not None and obj.status != RefundPolicy.Status.DRAFT:
            # Published and retired versions are history: publish a new version instead.
            return [f.name for f in self.model._meta.concrete_fields]
        return self.LIFECYCLE

    def get_urls(self):
        return [
            path(
                "<path:object_id>/publish/",
                self.admin_site.admin_view(self.publish_view),
                name="approvals_refundpolicy_publish",
            ),
            *super().get_urls(),
        ]

    @admin.action(description="Copy into a draft (edit it, replay it, then publish it)", permissions=["add"])
    def copy_to_draft(self, request, queryset):
        for policy in queryset:
            n = 1
            while RefundPolicy.objects.filter(tenant=policy.tenant, version=f"{policy.version}-next{n}").exists():
                n += 1
            try:
                draft = refund_policy_draft(
                    tenant=policy.tenant, name=f"{policy.version}-next{n}", source_version=policy.version
                )
            except DomainError as error:
                messages.error(request, error.message)
                continue
            messages.success(
                request, f"Draft {draft.version} created from {policy.version}: edit it, replay it, then publish it."
            )

    @admin.action(description="Replay the selected drafts over the last 30 days", permissions=["change"])
    def replay(self, request, queryset):
        replays = []
        for policy in queryset:
            try:
                replays.append(
                    policy_replay_start(tenant=policy.tenant, draft_version=policy.version, user=request.user)
                )
            except DomainError as error:
                messages.error(request, error.message)
        if len(replays) == 1:
            return HttpResponseRedirect(reverse("admin:approvals_policyreplay_change", args=[replays[0].pk]))
        for replay in replays:
            messages.success(request, f"Replay #{replay.pk} of {replay.draft.version} is queued.")
        return None

    @admin.action(description="Publish the selected draft (shows its latest replay first)", permissions=["change"])
    def publish(self, request, queryset):
        drafts = list(queryset[:2])
        if len(drafts) != 1:
            messages.error(request, "Publish one draft at a time: each is confirmed with its own replay.")
            return None
        return HttpResponseRedirect(reverse("admin:approvals_refundpolicy_publish", args=[drafts[0].pk]))

    def publish_view(self, request, object_id):
        """The confirmation step: the draft's latest replay of exactly this draft, or (for an
        operator) a written reason to publish without one."""
        if not self.has_change_permission(request):
            raise PermissionDenied("Publishing a policy needs the change permission.")
        if not object_id.isascii() or not object_id.isdigit():
            raise Http404("No such policy.")
        policy = self.get_queryset(request).filter(pk=int(object_id)).first()
        if policy is None:
            raise Http404("No such policy.")
        replay = policy_replay_latest(draft=policy)
        may_skip = user_is_operator(request.user)
        error = ""
        if request.method == "POST":
            reason = request.POST.get("without_replay_reason", "") if may_skip else ""
            try:
                policy_draft_publish(
                    tenant=policy.tenant, policy=policy, without_replay_reason=reason, user=request.user
                )
            except DomainError as exc:
                error = exc.message
            else:
                messages.success(request, f"{policy.version} is now the current policy of {policy.tenant}.")
                return HttpResponseRedirect(reverse("admin:approvals_refundpolicy_changelist"))
        context = {
            **self.admin_site.each_context(request),
            "opts": self.model._meta,
            "original": policy,
            "title": f"Publish {policy.version}",
            "replay": replay,
            "summary": policy_replay_summary(replay) if replay else "",
            "may_skip": may_skip,
            "error": error,
            "is_draft": policy.status == RefundPolicy.Status.DRAFT,
        }
        return TemplateResponse(request, "admin/approvals/refundpolicy/publish.html", context)


def user_is_operator(user) -> bool:
    """Publishing without a replay is an operator's call (docs/replay.md)."""
    return user.is_superuser or user.groups.filter(name="operator").exists()


@admin.register(PolicyReplay)
class PolicyReplayAdmin(TenantScopedAdminMixin, NoDeleteAdminMixin, admin.ModelAdmin):
    """A replay's page: its progress while it runs (the page refreshes itself), then the result."""

    list_display = ("id", "draft", "tenant", "status", "done", "total", "flipped", "created_at", "finished_at")
    list_filter = ("status",)
    list_select_related = ("draft", "tenant")
    change_form_template = "admin/approvals/policyreplay/result.html"

    def has_add_permission(self, request):
        return False

    def has_change_permission(self, request, obj=None):
        return False

    def change_view(self, request, object_id, form_url="", extra_context=None):
        replay = self.get_queryset(request).select_related("draft", "tenant").filter(pk=_int_or_none(object_id)).first()
        extra = {"replay": replay}
        if replay is not None and replay.status == PolicyReplay.Status.DONE:
            extra["summary"] = policy_replay_summary(replay)
            extra["currencies"] = sorted(set(replay.result["allowed_before"]) | set(replay.result["allowed_after"]))
        return super().change_view(request, object_id, form_url, {**(extra_context or {}), **extra})


def _int_or_none(value):
    return int(value) if isinstance(value, str) and value.isascii() and value.isdigit() else None


@admin.register(DecisionRecord)
class DecisionRecordAdmin(TenantScopedAdminMixin, ReadOnlyAdminMixin, admin.ModelAdmin):
    """The facts each gate decision was taken on: read-only, like the table (a trigger refuses changes)."""

    list_display = (
        "id",
        "decided_at",
        "source",
        "order_external_id",
        "outcome",
        "allowed_amount",
        "currency",
        "policy_version",
        "waived_rules",
    )
    list_filter = ("source", "outcome", "policy_exception", "backfilled")
    search_fields = ("order_external_id",)
    date_hierarchy = "decided_at"


@admin.register(Capability)
class CapabilityAdmin(StrictChangeListAdminMixin, admin.ModelAdmin):
    list_display = ("name", "side_effect", "approval_rule", "enabled", "timeout_seconds", "updated_at")
    list_editable = ("enabled",)
    list_filter = ("enabled", "side_effect")
    readonly_fields = ("name", "side_effect", "approval_rule", "updated_at")
    fields = ("name", "description", "side_effect", "approval_rule", "enabled", "timeout_seconds", "updated_at")

    def has_add_permission(self, request):
        return False

    def has_delete_permission(self, request, obj=None):
        return False

    # Installation-wide: a switch here stops every tenant's agent, so superusers only, whatever
    # groups say; a tenant's operator switches its own tenant (TenantCapabilityAdmin).
    def has_change_permission(self, request, obj=None):
        return request.user.is_superuser


@admin.register(TenantCapability)
class TenantCapabilityAdmin(TenantScopedAdminMixin, NoDeleteAdminMixin, admin.ModelAdmin):
    """A tenant's own kill switches: its operators switch a capability off (or back on) for their
    tenant alone; it never turns on what the installation switched off."""

    list_display = ("capability", "enabled", "tenant", "updated_at")
    list_editable = ("enabled",)
    list_filter = ("enabled", "tenant")
    readonly_fields = ("updated_at",)

    def get_fields(self, request, obj=None):
        fields = ("capability", "enabled", "updated_at")
        return ("tenant", *fields) if request.user.is_superuser else fields

    def get_readonly_fields(self, request, obj=None):
        # A switch stays on its capability and tenant; make another for another.
        return ("tenant", "capability", "updated_at") if obj is not None else ("updated_at",)

    def get_form(self, request, obj=None, **kwargs):
        form = super().get_form(request, obj, **kwargs)
        tenant = None if request.user.is_superuser else admin_tenant(request)

        class TenantForm(form):
            def clean(self):
                cleaned = super().clean()
                if tenant is not None and self.instance.pk is None:
                    # The operator's own tenant, never one they choose.
                    self.instance.tenant = tenant
                    capability = cleaned.get("capability")
                    if TenantCapability.objects.filter(tenant=tenant, capability=capability).exists():
                        raise forms.ValidationError(
                            f"{tenant.slug} already has a switch for {capability}: change that one."
                        )
                return cleaned

        return TenantForm

    def has_add_permission(self, request):
        return super().has_add_permission(request) and (request.user.is_superuser or admin_tenant(request) is not None)


def _manual_leg_waiting(obj: ApprovalRequest):
    """The request's first leg written for a payout by hand and not recorded paid yet, or None."""
    return approval_request_entries(request=obj).filter(gateway="manual", status="pending").first()
