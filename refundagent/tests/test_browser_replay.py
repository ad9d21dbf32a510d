"""The policy replay's result page in a real browser (docs/replay.md): finance opens the replay of
a draft that shortens the window and sees the flipped ticket linked. Playwright drives Debian's
chromium (launch settings shared with test_browser.py); the screenshot goes to
artifacts/browser/policy-replay.png, and docs/replay-result.png is a copy of it."""

from pathlib import Path

from django.conf import settings

from refundagent.tests.test_browser import (  # noqa: F401 - the shared launch fixtures
    _sync_orm_under_playwright,
    browser_type_launch_args,
    pytestmark,
    registry,
)

ARTIFACTS = Path(settings.BASE_DIR) / "artifacts" / "browser"


def test_the_replay_result_page_shows_the_flipped_ticket(live_server, registry, demo, file_ticket, page):  # noqa: F811
    from approvals.replay import policy_replay_create, policy_replay_run
    from approvals.services.policies import refund_policy_draft
    from ledger.models import Tenant

    # given decided tickets on ORD-5001 (12 days old) and ORD-5003 (5 days), and a 7-day draft replayed
    flipped = file_ticket(order="ORD-5001", message="Broken on arrival. Please refund me.")
    file_ticket(order="ORD-5003", message="Wrong colour. Please refund me.")
    acme = Tenant.objects.get(slug="acme")
    refund_policy_draft(tenant=acme, name="refund-policy-v5", changes={"window_days": 7})
    replay = policy_replay_run(replay_id=policy_replay_create(tenant=acme, draft_version="refund-policy-v5").pk)
    assert replay.status == "done" and replay.flipped == 1

    # when finance opens the replay's page
    path = f"/admin/approvals/policyreplay/{replay.pk}/change/"
    page.set_viewport_size({"width": 1280, "height": 800})
    page.goto(f"{live_server.url}/admin/login/?next={path}")
    page.fill("#id_username", "acme-finance")
    page.fill("#id_password", "demo")
    page.locator("#login-form [type=submit]").click()
    page.wait_for_url(f"{live_server.url}{path}")

    # then the summary, the money and the flipped ticket (linked to its page) are on it
    assert "difference=-120.00" in page.locator("#ra-replay-summary").inner_text()
    link = page.locator("#ra-replay-flipped a")
    assert link.count() == 1 and link.get_attribute("href") == f"/tickets/{flipped.pk}/"
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=str(ARTIFACTS / "policy-replay.png"), full_page=True)
