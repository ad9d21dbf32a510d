"""The finance review queue: the ApprovalRequest changelist (pending first, then oldest first, a
constant number of queries per page) and the detail page that shows everything needed to judge
the one exact action without leaving it; the votes beside it. The decision, second-factor and
payout views are approvals.admin.review_views."""

import json
from datetime import timedelta

from django.contrib import admin, messages
from django.core.paginator import Paginator
from django.db.models import Count, IntegerField, OuterRef, Subquery, Value
from django.db.models.functions import Coalesce
from django.urls import reverse
from django.utils import timezone
from django.utils.functional import cached_property
from django.utils.html import format_html
from django.utils.safestring import mark_safe
from django.utils.timesince import timesince, timeuntil

from ledger.admin import (
    ReadOnlyAdminMixin,
    TenantScopedAdminMixin,
    admin_tenant,
)
from ledger.exceptions import DomainError
from ledger.selectors import order_ledger, order_refund_position, reconciliation_findings_unresolved

from ..destinations import approval_legs_screen
from ..models import (
    QUEUE_RANK,
    ApprovalRequest,
    ApprovalVote,
    RefundPolicy,
)
from ..review import review_sections
from ..selectors import approval_changes_asked, approvals_refused_by_provider
from ..services.decisions import approval_decisions_open, user_can_decide
from ..services.refile import approval_request_payment_retry
from .queue_words import (
    DECISION_LABELS,
    SUPPORT_TICKET_URL,
    destination_of_request_words,
    manual_leg_waiting,
    status_badge_html,
    status_words,
    verification_check_words,
)
from .review_views import ReviewViewsMixin


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


QUEUE_COUNT_CAP = 10_000


@admin.register(ApprovalRequest)
class ApprovalRequestAdmin(ReviewViewsMixin, TenantScopedAdminMixin, ReadOnlyAdminMixin, admin.ModelAdmin):
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
        entry = manual_leg_waiting(obj)
        if entry is None or not user_can_decide(request.user):
            return None
        return {"entry": entry, "url": reverse("admin:approvals_approvalrequest_paid", args=[obj.pk])}


@admin.register(ApprovalVote)
class ApprovalVoteAdmin(TenantScopedAdminMixin, ReadOnlyAdminMixin, admin.ModelAdmin):
    tenant_field = "request__tenant"
    list_display = ("id", "request", "approver", "decision", "created_at")
    list_filter = ("decision",)
    list_select_related = ("request", "approver")
    search_fields = ("request__order__external_id", "approver__username")
