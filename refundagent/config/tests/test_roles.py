"""Roles are data every deployment gets: `migrate` (and `manage.py setup_roles`) make the groups
support, finance and operator with the permissions each app declares in its AppConfig."""

from io import StringIO

import pytest
from django.apps import apps
from django.contrib.auth import get_user_model
from django.contrib.auth.models import Group
from django.core.exceptions import ImproperlyConfigured
from django.core.management import call_command
from django.test import Client

from ledger.models import Membership, Tenant
from ledger.tenancy import api_token_create, roles_sync

EXPECTED = {
    "support": {
        "ledger.view_order",
        "ledger.view_customer",
        "ledger.view_refundentry",
        "refundagent.view_ticket",
        "refundagent.view_escalatedticket",
        "refundagent.view_ticketmessage",
    },
    "finance": {
        "approvals.view_approvalrequest",
        "approvals.approve_approvalrequest",
        "approvals.view_approvalvote",
        "approvals.view_refundpolicy",
        "approvals.add_refundpolicy",
        "approvals.change_refundpolicy",
        "approvals.view_policyreplay",
        "approvals.view_decisionrecord",
        "ledger.view_order",
        "ledger.view_customer",
        "ledger.view_payment",
        "ledger.view_refundentry",
        "ledger.view_refundrevision",
        "refundagent.view_ticket",
        "refundagent.view_escalatedticket",
        "refundagent.view_ticketmessage",
        "refundagent.view_traceevent",
        "refundagent.view_refunddraft",
    },
    "operator": {
        # The installation's switches and eval cases are superusers' to change; an operator
        # switches capabilities for its own tenant (approvals.TenantCapability).
        "approvals.view_capability",
        "approvals.view_tenantcapability",
        "approvals.add_tenantcapability",
        "approvals.change_tenantcapability",
        "approvals.view_refundpolicy",
        "approvals.add_refundpolicy",
        "approvals.change_refundpolicy",
        "approvals.view_policyreplay",
        "approvals.view_decisionrecord",
        "refundagent.view_ticket",
        "refundagent.view_escalatedticket",
        "refundagent.view_ticketmessage",
        "refundagent.view_agentrun",
        "refundagent.view_traceevent",
        "refundagent.view_refunddraft",
        "refundagent.view_modelreplay",
        "refundagent.add_modelreplay",
        "evals.view_evalcase",
        "evals.view_evalrun",
        "evals.view_evalresult",
    },
}


def role_permissions() -> dict[str, set[str]]:
    return {
        group.name: {
            f"{p.content_type.app_label}.{p.codename}" for p in group.permissions.select_related("content_type")
        }
        for group in Group.objects.prefetch_related("permissions")
    }


def setup_roles() -> str:
    out = StringIO()
    call_command("setup_roles", stdout=out)
    return out.getvalue()


def test_after_migrate_the_three_roles_exist_with_their_permissions(db):
    # given a database that was only migrated (no seed_demo, no run_evals)
    # then
    assert role_permissions() == EXPECTED


def test_migrate_makes_missing_roles_again(db):
    # given a database whose role groups were deleted
    Group.objects.all().delete()
    # when migrate runs (nothing to apply: post_migrate still fires)
    call_command("migrate", verbosity=0)
    # then the roles are back
    assert role_permissions() == EXPECTED


def test_setup_roles_repairs_the_roles_and_a_second_run_changes_nothing(db):
    # given finance lost a permission, operator was deleted and support got one by hand
    Group.objects.get(name="finance").permissions.remove(
        Group.objects.get(name="finance").permissions.get(codename="approve_approvalrequest")
    )
    Group.objects.filter(name="operator").delete()
    Group.objects.get(name="support").permissions.add(
        Group.objects.get(name="finance").permissions.get(codename="view_payment")
    )
    # when setup_roles runs twice
    first = setup_roles()
    groups_after_first = dict(Group.objects.values_list("name", "pk"))
    second = setup_roles()
    # then the first run said what it did and the second changed nothing
    assert "finance: +approvals.approve_approvalrequest" in first
    assert "operator: created" in first
    assert "support: -ledger.view_payment" in first
    assert second.splitlines() == [
        "finance: unchanged (18 permissions)",
        "operator: unchanged (20 permissions)",
        "support: unchanged (6 permissions)",
    ]
    assert dict(Group.objects.values_list("name", "pk")) == groups_after_first
    assert role_permissions() == EXPECTED


def test_a_finance_user_uses_the_approval_api_and_admin_without_the_demo(db):
    # given a tenant and users in the migrated role groups, and no seed_demo
    tenant = Tenant.objects.create(slug="shop", name="Shop")
    User = get_user_model()
    finance = User.objects.create_user("fin", password="pw", is_staff=True)
    support = User.objects.create_user("sup", password="pw")
    for user, role in ((finance, "finance"), (support, "support")):
        Membership.objects.create(user=user, tenant=tenant)
        user.groups.add(Group.objects.get(name=role))
    # when finance and support call the approvals API, and finance opens the review queue
    as_finance = Client(HTTP_AUTHORIZATION=f"Bearer {api_token_create(user=finance)}")
    as_support = Client(HTTP_AUTHORIZATION=f"Bearer {api_token_create(user=support)}")
    admin = Client()
    admin.force_login(finance)
    # then finance may, support may not
    assert as_finance.get("/api/approvals").status_code == 200
    assert as_support.get("/api/approvals").status_code == 403
    assert admin.get("/admin/approvals/approvalrequest/").status_code == 200
    assert finance.has_perm("approvals.approve_approvalrequest")


def test_an_app_may_declare_only_its_own_permissions(db, monkeypatch):
    # given the ledger declaring a permission of a higher app
    monkeypatch.setattr(
        apps.get_app_config("ledger"), "role_permissions", {"finance": ["approvals.view_approvalrequest"]}
    )
    # then the sync refuses
    with pytest.raises(ImproperlyConfigured, match="only its own permissions"):
        roles_sync()


def test_a_permission_that_does_not_exist_is_an_error(db, monkeypatch):
    # given a typo in a declaration
    monkeypatch.setattr(apps.get_app_config("ledger"), "role_permissions", {"finance": ["ledger.approve_order"]})
    # then the sync says which
    with pytest.raises(ImproperlyConfigured, match="ledger.approve_order"):
        roles_sync()
