"""The review queue's three custom views, mixed into ApprovalRequestAdmin: deciding a request
(behind the approver's second factor), entering that second factor, and recording a payout made
by hand. Each calls the same service as the API."""

import json
from urllib.parse import urlencode

from django import forms
from django.conf import settings
from django.contrib import messages
from django.core.exceptions import PermissionDenied
from django.http import Http404, HttpResponseRedirect
from django.template.response import TemplateResponse
from django.urls import path, reverse
from django.utils import timezone
from django.utils.http import url_has_allowed_host_and_scheme
from django_otp.forms import OTPTokenForm

from ledger.exceptions import DomainError
from ledger.money import CENT, MoneyFormField
from ledger.services import ledger_refund_record_paid
from ledger.tenancy import tenant_for_user

from ..destinations import approval_legs_screen
from ..second_factor import NO_DEVICE, UNVERIFIED, second_factor_state, second_factor_verify
from ..services.decisions import DECISIONS, approval_decisions_open, approval_request_decide, user_can_decide
from .queue_words import DECISION_LABELS, destination_of_request_words, manual_leg_waiting


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


class ReviewViewsMixin:
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
        waiting = manual_leg_waiting(obj)
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
