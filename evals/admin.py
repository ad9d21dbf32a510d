"""Evals in the admin: cases (data, editable: enable/disable, expectations), runs and results
(read-only evidence). A run's failed results come first; each result shows its stored trace."""

import json

from django.contrib import admin
from django.urls import reverse
from django.utils.html import format_html, format_html_join

from ledger.admin import ReadOnlyAdminMixin, StrictChangeListAdminMixin

from .models import EvalCase, EvalResult, EvalRun


def _bad_flag(value) -> str:
    """The flags that mark a failure (false allow, missing citation, money moved by the agent):
    raised is red, clear is a quiet "no" (the stock boolean icon would show a passing result red)."""
    if value:
        return format_html('<strong class="ra-flag-raised" style="color:#cf222e">{}</strong>', "YES")
    return format_html('<span class="ra-flag-clear" style="color:#57606a">{}</span>', "no")


class BadFlagsMixin:
    @admin.display(description="false allow", ordering="false_allow")
    def false_allow_flag(self, obj):
        return _bad_flag(obj.false_allow)

    @admin.display(description="missing citation", ordering="missing_citation")
    def missing_citation_flag(self, obj):
        return _bad_flag(obj.missing_citation)

    @admin.display(description="money moved by agent", ordering="money_moved_by_agent")
    def money_moved_by_agent_flag(self, obj):
        return _bad_flag(obj.money_moved_by_agent)


def _pretty(value) -> str:
    return format_html(
        "<pre style='white-space:pre-wrap;max-width:100ch'>{}</pre>",
        json.dumps(value, indent=2, sort_keys=True, default=str),
    )


@admin.register(EvalCase)
class EvalCaseAdmin(StrictChangeListAdminMixin, admin.ModelAdmin):
    list_display = ("name", "suite", "tag_list", "enabled", "expected_stop", "expected_amount", "updated_at")
    list_filter = ("suite", "enabled")
    search_fields = ("name", "description")
    list_editable = ("enabled",)
    readonly_fields = ("created_at", "updated_at")

    @admin.display(description="tags")
    def tag_list(self, obj):
        return ", ".join(obj.tags or [])

    @admin.display(description="expected stop")
    def expected_stop(self, obj):
        stop = (obj.expected or {}).get("stop_reason") or (obj.expected or {}).get("ticket_error")
        return " | ".join(stop) if isinstance(stop, list) else stop

    @admin.display(description="expected approval")
    def expected_amount(self, obj):
        return (obj.expected or {}).get("approval_amount") or "—"

    def has_delete_permission(self, request, obj=None):
        return False  # results keep pointing at their case; disable a case instead

    # The installation's cases (every tenant's release gate): superusers only, whatever groups say.
    def has_add_permission(self, request):
        return request.user.is_superuser

    def has_change_permission(self, request, obj=None):
        return request.user.is_superuser


class EvalResultInline(BadFlagsMixin, ReadOnlyAdminMixin, admin.TabularInline):
    model = EvalResult
    extra = 0
    can_delete = False
    fields = (
        "result_link",
        "passed",
        "attempt",
        "false_allow_flag",
        "missing_citation_flag",
        "money_moved_by_agent_flag",
        "draft_quality",
        "why",
        "duration_ms",
    )
    readonly_fields = fields
    ordering = ("passed", "case__name", "attempt")  # failed first

    @admin.display(description="case")
    def result_link(self, obj):
        url = reverse("admin:evals_evalresult_change", args=[obj.pk])
        return format_html('<a href="{}">{}</a>', url, obj.case.name)

    @admin.display(description="why it failed")
    def why(self, obj):
        return "; ".join(obj.failures)[:300]

    def get_queryset(self, request):
        return super().get_queryset(request).select_related("case")


@admin.register(EvalRun)
class EvalRunAdmin(StrictChangeListAdminMixin, ReadOnlyAdminMixin, admin.ModelAdmin):
    list_display = (
        "id",
        "started_at",
        "suite",
        "trigger",
        "provider",
        "release_gate",
        "pass_rate",
        "false_allow",
        "total",
        "failed_count",
        "duration_s",
        "code_version_short",
    )
    list_filter = ("suite", "passed", "trigger", "provider")
    date_hierarchy = "started_at"
    inlines = [EvalResultInline]
    fields = (
        "suite",
        "trigger",
        "provider",
        "model",
        "code_version",
        "repeat",
        "release_gate",
        "gate_failures_pretty",
        "metrics_pretty",
        "total",
        "passed_count",
        "failed_count",
        "error",
        "started_at",
        "finished_at",
        "duration_ms",
    )
    readonly_fields = fields

    @admin.display(description="release gate", ordering="passed")
    def release_gate(self, obj):
        if obj.passed is None:
            return "running" if not obj.error else "crashed"
        if obj.passed:
            return format_html('<strong style="color:#1a7f37">{}</strong>', "passed")
        return format_html('<strong style="color:#cf222e">{}</strong>', "FAILED")

    @admin.display(description="pass rate")
    def pass_rate(self, obj):
        if not obj.total:
            return format_html('<span style="color:#cf222e">{}</span>', "no cases")
        return obj.metrics.get("pass_rate", "—")

    @admin.display(description="false allow")
    def false_allow(self, obj):
        return obj.metrics.get("false_allow", "—")

    @admin.display(description="seconds", ordering="duration_ms")
    def duration_s(self, obj):
        return f"{obj.duration_ms / 1000:.1f}"

    @admin.display(description="code")
    def code_version_short(self, obj):
        return obj.code_version[:10]

    @admin.display(description="release gate failures")
    def gate_failures_pretty(self, obj):
        if not obj.gate_failures:
            return "none"
        return format_html_join(
            "",
            "<div style='color:#cf222e'>{} = {} (needs {}){}</div>",
            (
                (f["metric"], f["value"], f["threshold"], f": {f['why']}" if f.get("why") else "")
                for f in obj.gate_failures
            ),
        )

    @admin.display(description="metrics")
    def metrics_pretty(self, obj):
        return _pretty(obj.metrics)


@admin.register(EvalResult)
class EvalResultAdmin(StrictChangeListAdminMixin, BadFlagsMixin, ReadOnlyAdminMixin, admin.ModelAdmin):
    list_display = (
        "case",
        "run_link",
        "attempt",
        "passed",
        "false_allow_flag",
        "missing_citation_flag",
        "money_moved_by_agent_flag",
        "draft_quality",
        "stop_reason",
        "first_failure",
        "trace_link",
    )
    # One suite menu (the case's): a second "By suite" for the run's suite listed the same names twice.
    list_filter = (
        "passed",
        "case__suite",
        "false_allow",
        "missing_citation",
        "money_moved_by_agent",
        "draft_quality",
        "run__trigger",
    )
    search_fields = ("case__name", "trace_id")
    list_select_related = ("case", "run")
    fields = (
        "run_link",
        "case",
        "attempt",
        "passed",
        "failures_pretty",
        "false_allow_flag",
        "missing_citation_flag",
        "money_moved_by_agent_flag",
        "draft_quality",
        "duration_ms",
        "trace_id",
        "trace_link",
        "trace_table",
        "observed_pretty",
    )
    readonly_fields = fields

    @admin.display(description="run")
    def run_link(self, obj):
        url = reverse("admin:evals_evalrun_change", args=[obj.run_id])
        return format_html('<a href="{}">#{} {}</a>', url, obj.run_id, obj.run.suite)

    @admin.display(description="stop")
    def stop_reason(self, obj):
        return (obj.observed.get("ticket") or {}).get("stop_reason") or obj.observed.get("ticket_error") or "—"

    @admin.display(description="why it failed")
    def first_failure(self, obj):
        return (obj.failures or [""])[0][:160]

    @admin.display(description="trace")
    def trace_link(self, obj):
        if not obj.trace:
            return "—"
        url = reverse("evals:result_trace", args=[obj.pk])
        return format_html('<a href="{}">trace ({} events, JSON)</a>', url, len(obj.trace))

    @admin.display(description="why it failed")
    def failures_pretty(self, obj):
        if not obj.failures:
            return "passed"
        return format_html_join("", "<div style='color:#cf222e'>{}</div>", ((f,) for f in obj.failures))

    @admin.display(description="trace (stored with the result)")
    def trace_table(self, obj):
        if not obj.trace:
            return "no trace (no ticket was filed)"
        rows = format_html_join(
            "",
            "<tr><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td></tr>",
            (
                (e.get("seq"), e.get("span"), e.get("status"), e.get("decision"), e.get("tool"), e.get("reason"))
                for e in obj.trace
            ),
        )
        return format_html(
            "<table><thead><tr><th>#</th><th>span</th><th>status</th><th>decision</th><th>tool</th><th>reason</th>"
            "</tr></thead><tbody>{}</tbody></table>",
            rows,
        )

    @admin.display(description="observed outcome")
    def observed_pretty(self, obj):
        return _pretty(obj.observed)
