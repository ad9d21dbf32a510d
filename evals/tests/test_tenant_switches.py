"""The installation's kill switches and the eval cases belong to superusers; a tenant's operator
changes only its own tenant, through its own switches (TenantCapability)."""

import pytest

from approvals.models import Capability, TenantCapability
from evals.models import EvalCase
from refundagent.agent.loop import agent_run_ticket
from refundagent.agent.providers.scripted import ScriptedProvider
from refundagent.models import RefundDraft, Ticket
from tests.factories import user_build
from tests.helpers import signed_in

pytestmark = pytest.mark.django_db

ADD_SWITCH = "/admin/approvals/tenantcapability/add/"


@pytest.fixture
def operator(demo):
    """acme's operator: the operator role, staff (works in the admin), not a superuser."""

    def make(slug="acme"):
        return user_build(username=f"{slug}-operator", tenant=demo[slug], roles=("operator",), is_staff=True)

    return make


def run(ticket):
    provider = ScriptedProvider([{"tool": "orders_lookup_order", "input": {"order_id": ticket.order.external_id}}])
    agent_run_ticket(ticket_id=ticket.pk, provider=provider)
    ticket.refresh_from_db()
    return ticket, provider


def test_a_tenants_operator_cannot_switch_the_installation_off(operator):
    capability = Capability.objects.get(name="refunds.create_draft")
    client = signed_in(operator())

    listing = client.get("/admin/approvals/capability/")
    change = client.post(
        f"/admin/approvals/capability/{capability.pk}/change/",
        {"description": capability.description, "enabled": "", "timeout_seconds": capability.timeout_seconds},
    )
    bulk = client.post(
        "/admin/approvals/capability/",
        {
            "form-TOTAL_FORMS": "1",
            "form-INITIAL_FORMS": "1",
            "form-0-id": capability.pk,
            "form-0-enabled": "",
            "_save": "Save",
        },
    )

    assert listing.status_code == 200  # they see the installation's switches
    assert 'name="form-0-enabled"' not in listing.content.decode()
    assert change.status_code == 403
    assert bulk.status_code in (200, 403)
    capability.refresh_from_db()
    assert capability.enabled


def test_a_superuser_still_switches_the_installation(user):
    capability = Capability.objects.get(name="orders.lookup_order")

    response = signed_in(user("ops")).post(
        f"/admin/approvals/capability/{capability.pk}/change/",
        {"description": capability.description, "enabled": "", "timeout_seconds": capability.timeout_seconds},
    )

    assert response.status_code == 302
    capability.refresh_from_db()
    assert not capability.enabled


def test_an_operators_switch_stops_its_own_tenants_agent_and_no_other(operator, file_ticket, demo):
    create_draft = Capability.objects.get(name="refunds.create_draft")
    client = signed_in(operator("acme"))
    # when acme's operator switches refunds.create_draft off, naming globex in the post
    response = client.post(ADD_SWITCH, {"capability": create_draft.pk, "enabled": "", "tenant": demo["globex"].pk})
    assert response.status_code == 302
    switch = TenantCapability.objects.get()
    assert (switch.tenant, switch.capability, switch.enabled) == (demo["acme"], create_draft, False)
    # then an acme ticket goes to the human queue without a model call
    acme, acme_model = run(file_ticket())
    assert acme.status == Ticket.Status.ESCALATED and "kill switch" in acme.stop_detail
    assert acme_model.calls == 0 and not RefundDraft.objects.filter(ticket=acme).exists()
    # and a globex ticket runs as before: the installation's switch is still on
    globex, globex_model = run(file_ticket(username="globex-support", customer="CUST-2001", order="ORD-7001"))
    assert globex_model.calls > 0
    assert "kill switch" not in (globex.stop_detail or "")
    assert Capability.objects.get(name="refunds.create_draft").enabled


def test_an_operator_sees_and_changes_only_its_tenants_switches(operator, demo):
    create_draft = Capability.objects.get(name="refunds.create_draft")
    acme_switch = TenantCapability.objects.create(tenant=demo["acme"], capability=create_draft, enabled=False)
    client = signed_in(operator("globex"))

    listing = client.get("/admin/approvals/tenantcapability/")
    change = client.post(f"/admin/approvals/tenantcapability/{acme_switch.pk}/change/", {"enabled": "on"})

    assert listing.status_code == 200 and "refunds.create_draft" not in listing.content.decode()
    assert change.status_code in (302, 404)
    acme_switch.refresh_from_db()
    assert not acme_switch.enabled


def test_a_second_switch_for_the_same_capability_is_refused_not_a_500(operator, demo):
    create_draft = Capability.objects.get(name="refunds.create_draft")
    TenantCapability.objects.create(tenant=demo["acme"], capability=create_draft, enabled=False)

    response = signed_in(operator("acme")).post(ADD_SWITCH, {"capability": create_draft.pk, "enabled": "on"})

    assert response.status_code == 200
    assert "already has a switch" in response.content.decode()
    assert TenantCapability.objects.count() == 1


def test_a_tenants_operator_cannot_edit_eval_expectations(operator):
    case = EvalCase.objects.create(
        name="refund-in-window",
        suite="release_gate",
        ticket_input={"order": "ORD-1"},
        expected={"stop_reason": "approval_required"},
    )
    client = signed_in(operator())

    response = client.post(
        f"/admin/evals/evalcase/{case.pk}/change/",
        {
            "name": case.name,
            "suite": case.suite,
            "tags": "[]",
            "ticket_input": '{"order": "ORD-1"}',
            "fixture": "{}",
            "expected": '{"stop_reason": "denied"}',
            "enabled": "",
        },
    )

    assert response.status_code == 403
    case.refresh_from_db()
    assert case.expected == {"stop_reason": "approval_required"} and case.enabled
