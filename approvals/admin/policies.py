"""The admins of refund policy versions (drafts, replays, publishing), their replays and the
recorded decisions replays read."""

from django.contrib import admin, messages
from django.core.exceptions import PermissionDenied
from django.http import Http404, HttpResponseRedirect
from django.template.response import TemplateResponse
from django.urls import path, reverse

from ledger.admin import (
    NoDeleteAdminMixin,
    ReadOnlyAdminMixin,
    TenantScopedAdminMixin,
)
from ledger.exceptions import DomainError
from ledger.money import StrictMoneyAdminMixin

from ..models import (
    DecisionRecord,
    PolicyReplay,
    RefundPolicy,
)
from ..outbox import policy_replay_start
from ..replay import policy_replay_summary
from ..services.policies import policy_draft_publish, policy_replay_latest, refund_policy_draft


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
