"""Policy drafts, replays and publication in the admin (docs/replay.md): finance copies the current
version into a draft and edits its rules, replays it, watches the replay's page, and publishes it
from a confirmation step that shows the latest replay of exactly that draft."""

import json

import pytest

from approvals.models import PolicyPublication, PolicyReplay, RefundPolicy
from ledger.models import Tenant
from refundagent.agent.loop import agent_run_ticket
from refundagent.agent.providers.offline import OfflineProvider
from tests.helpers import signed_in

CHANGELIST = "/admin/approvals/refundpolicy/"


@pytest.fixture
def ticket_defaults():
    return {"order": "ORD-5001", "message": "It arrived broken. Please refund me."}


@pytest.fixture
def decided(file_ticket):
    tickets = [file_ticket(order=order) for order in ("ORD-5001", "ORD-5003")]
    for ticket in tickets:
        agent_run_ticket(ticket_id=ticket.pk, provider=OfflineProvider())
    return {ticket.order.external_id: ticket for ticket in tickets}


@pytest.fixture
def admin_as(user):
    return lambda username: signed_in(user(username))


def test_finance_drafts_replays_and_publishes_a_policy_in_the_admin(
    decided, admin_as, django_capture_on_commit_callbacks
):
    finance = admin_as("acme-finance")
    acme = Tenant.objects.get(slug="acme")
    current = RefundPolicy.objects.current_for(acme)

    # given finance copies the current version into a draft and shortens its window
    finance.post(CHANGELIST, {"action": "copy_to_draft", "_selected_action": [current.pk]})
    draft = RefundPolicy.objects.get(tenant=acme, status="draft")
    form = finance.get(f"{CHANGELIST}{draft.pk}/change/")
    assert form.status_code == 200 and 'name="window_days"' in form.content.decode()
    saved = finance.post(
        f"{CHANGELIST}{draft.pk}/change/",
        {
            "tenant": acme.pk,
            "version": draft.version,
            "window_days": "7",
            "full_refund_statuses": json.dumps(draft.full_refund_statuses),
            "item_refund_statuses": json.dumps(draft.item_refund_statuses),
            "full_refund_destinations": json.dumps(draft.full_refund_destinations),
            "item_refund_destinations": json.dumps(draft.item_refund_destinations),
            "two_approver_threshold": str(draft.two_approver_threshold),
            "two_approver_threshold_currency": draft.two_approver_threshold_currency,
            "threshold_rates": json.dumps(draft.threshold_rates),
            "approvals_above_threshold": str(draft.approvals_above_threshold),
            "waivable_rules": json.dumps(draft.waivable_rules),
            "text": draft.text,
        },
    )
    assert saved.status_code == 302, saved.content.decode()[:2000]
    draft.refresh_from_db()
    assert draft.window_days == 7 and draft.status == "draft"

    # when they replay it (the task runs on commit) and open its page
    with django_capture_on_commit_callbacks(execute=True):
        response = finance.post(CHANGELIST, {"action": "replay", "_selected_action": [draft.pk]})
    replay = PolicyReplay.objects.get(draft=draft)
    assert response.status_code == 302 and response["Location"].endswith(f"/policyreplay/{replay.pk}/change/")
    page = finance.get(response["Location"]).content.decode()

    # then the page shows the result: ORD-5001 flips, linked to its ticket, and 120.00 less allowed
    assert 'id="ra-replay-summary"' in page and "flipped=1" in page and "difference=-120.00" in page
    assert f'href="/tickets/{decided["ORD-5001"].pk}/"' in page
    assert f'href="/tickets/{decided["ORD-5003"].pk}/"' not in page

    # and the confirmation step shows that replay; confirming publishes after it
    confirm = finance.post(CHANGELIST, {"action": "publish", "_selected_action": [draft.pk]})
    step = finance.get(confirm["Location"]).content.decode()
    assert 'id="ra-publish-replay"' in step and "flipped=1" in step
    finance.post(confirm["Location"], {})
    assert RefundPolicy.objects.current_for(acme) == draft
    assert PolicyPublication.objects.get(policy=draft).replay == replay


def test_a_page_of_a_running_replay_refreshes_itself_with_its_progress(decided, admin_as):
    finance = admin_as("acme-finance")
    from approvals.replay import policy_replay_create
    from approvals.services.policies import refund_policy_draft

    acme = Tenant.objects.get(slug="acme")
    refund_policy_draft(tenant=acme, name="v5", changes={"window_days": 7})
    replay = policy_replay_create(tenant=acme, draft_version="v5")
    PolicyReplay.objects.filter(pk=replay.pk).update(status="running", total=2, done=1)

    page = finance.get(f"/admin/approvals/policyreplay/{replay.pk}/change/").content.decode()

    assert '<meta http-equiv="refresh"' in page and 'id="ra-replay-progress"' in page and "1 of 2" in page


def test_finance_cannot_publish_without_a_replay_even_with_a_reason(decided, admin_as):
    finance = admin_as("acme-finance")
    acme = Tenant.objects.get(slug="acme")
    finance.post(
        CHANGELIST, {"action": "copy_to_draft", "_selected_action": [RefundPolicy.objects.current_for(acme).pk]}
    )
    draft = RefundPolicy.objects.get(tenant=acme, status="draft")

    step = finance.get(f"{CHANGELIST}{draft.pk}/publish/").content.decode()
    response = finance.post(f"{CHANGELIST}{draft.pk}/publish/", {"without_replay_reason": "trust me"})

    assert 'id="ra-publish-no-replay"' in step and "without_replay_reason" not in step
    assert 'id="ra-publish-error"' in response.content.decode()
    draft.refresh_from_db()
    assert draft.status == "draft" and not PolicyPublication.objects.exists()


def test_another_tenants_replay_and_draft_are_not_found(decided, admin_as):
    from approvals.replay import policy_replay_create
    from approvals.services.policies import refund_policy_draft

    acme = Tenant.objects.get(slug="acme")
    refund_policy_draft(tenant=acme, name="v5", changes={"window_days": 7})
    replay = policy_replay_create(tenant=acme, draft_version="v5")
    globex = admin_as("globex-finance")

    assert globex.get(f"/admin/approvals/policyreplay/{replay.pk}/change/").status_code in (302, 404)
    assert globex.get(f"{CHANGELIST}{replay.draft_id}/publish/").status_code == 404
    assert globex.post(f"{CHANGELIST}{replay.draft_id}/publish/", {}).status_code == 404
    assert RefundPolicy.objects.get(pk=replay.draft_id).status == "draft"


def test_the_replay_and_record_lists_open_for_finance_and_operators(decided, admin_as):
    for username in ("acme-finance", "ops"):
        client = admin_as(username)
        for path in (
            "/admin/approvals/policyreplay/",
            "/admin/approvals/decisionrecord/",
            "/admin/refundagent/modelreplay/",
            "/admin/refundagent/modelreplay/add/",
        ):
            status = client.get(path).status_code
            expected = 403 if username == "acme-finance" and "modelreplay" in path else 200
            assert status == expected, (username, path, status)
    records = admin_as("acme-finance").get("/admin/approvals/decisionrecord/").content.decode()
    assert "ORD-5001" in records and "ORD-5003" in records
