"""The admins of the capability registry and of each tenant's capabilities."""

from django import forms
from django.contrib import admin

from ledger.admin import (
    NoDeleteAdminMixin,
    StrictChangeListAdminMixin,
    TenantScopedAdminMixin,
    admin_tenant,
)

from ..models import (
    Capability,
    TenantCapability,
)


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
