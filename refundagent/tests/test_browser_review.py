"""`issues show 11`, review screens that fit: finance decides at 1280x800 without scrolling
sideways. Playwright drives Debian's chromium (launch settings shared with test_browser.py)
against the live server on the demo data; screenshots go to artifacts/screenshots/.
"""

from pathlib import Path

import pytest
from django.conf import settings

from refundagent.tests.test_browser import (  # noqa: F401 - the shared launch fixtures
    _sync_orm_under_playwright,
    browser_type_launch_args,
    pytestmark,
    registry,
)

SCREENSHOTS = Path(settings.BASE_DIR) / "artifacts" / "screenshots"
LAPTOP = {"width": 1280, "height": 800}


def shot(page, name):
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    path = SCREENSHOTS / name
    page.screenshot(path=str(path), full_page=True)
    print(f"screenshot: {path}")


def admin_log_in(page, base, username, next_url):
    page.goto(f"{base}/admin/login/?next={next_url}")
    page.fill("#id_username", username)
    page.fill("#id_password", "demo")
    page.locator("#login-form [type=submit]").click()
    page.wait_for_url(f"{base}{next_url}")


def assert_no_sideways_scroll(page):
    scroll_width, inner_width = page.evaluate("[document.documentElement.scrollWidth, window.innerWidth]")
    assert scroll_width <= inner_width, f"page is {scroll_width}px wide in a {inner_width}px window"


def assert_inside_viewport(locator):
    """On screen without sideways scrolling: the box is inside the window's width, and (scrolling
    only vertically to it) its centre is not clipped by a scrolling container or covered."""
    box = locator.bounding_box()
    assert box is not None, "not rendered"
    assert box["x"] >= 0 and box["x"] + box["width"] <= LAPTOP["width"], box
    on_top = locator.evaluate(
        """el => {
            const r = el.getBoundingClientRect();
            window.scrollTo(window.scrollX, window.scrollY + r.top - window.innerHeight / 3);
            const s = el.getBoundingClientRect();
            const hit = document.elementFromPoint(s.left + Math.min(s.width / 2, 20), s.top + s.height / 2);
            return hit !== null && (el.contains(hit) || hit.contains(el));
        }"""
    )
    assert on_top, f"{locator} is clipped or covered"


@pytest.fixture
def two_requests(live_server, registry, demo, file_ticket):  # noqa: F811
    """Two pending requests: 120.00 on ORD-5001 (one approver) and 750.00 on ORD-5006 (two
    approvers, acme-finance has approved once)."""
    from approvals.models import ApprovalRequest
    from approvals.services.decisions import approval_request_decide
    from refundagent.models import Ticket

    small = file_ticket(order="ORD-5001", amount="200.00")
    large = file_ticket(order="ORD-5006", message="The espresso machine leaks. Please refund it.")
    assert Ticket.objects.get(pk=large.pk).status == "approval_required"
    large_request = ApprovalRequest.objects.get(ticket_ref=large.pk)
    assert large_request.required_approvals == 2
    from django.contrib.auth import get_user_model

    approval_request_decide(
        request_id=large_request.pk,
        user=get_user_model().objects.get(username="acme-finance"),
        decision="approve",
        args_hash=large_request.args_hash,
        note="First look: fine.",
    )
    return ApprovalRequest.objects.get(ticket_ref=small.pk), ApprovalRequest.objects.get(pk=large_request.pk)


def test_the_approval_list_fits_a_laptop_screen(live_server, page, two_requests):
    from playwright.sync_api import expect

    small, large = two_requests
    base = live_server.url
    # Given finance at 1280x800
    page.set_viewport_size(LAPTOP)
    # When they open the review queue
    admin_log_in(page, base, "acme-finance2", "/admin/approvals/approvalrequest/")
    # Then nothing scrolls sideways and the approvals and expiry cells are on screen
    row = page.locator("#result_list tbody tr", has_text="ORD-5006")
    expect(row.locator("td.field-approvals_display")).to_have_text("1/2")
    shot(page, "admin-approval-list-1280.png")
    assert_no_sideways_scroll(page)
    for column in (
        "approvals_display",
        "time_to_expiry",
        "amount_display",
        "order_id_display",
        "customer",
        "policy_version",
    ):
        assert_inside_viewport(row.locator(f"td.field-{column}, th.field-{column}").first)
    expect(
        page.locator("#result_list tbody tr", has_text="ORD-5001").locator("td.field-approvals_display")
    ).to_have_text("0/1")


def test_the_review_page_fits_a_laptop_screen_and_offers_only_what_can_succeed(live_server, page, two_requests):
    from playwright.sync_api import expect

    small, large = two_requests
    base = live_server.url
    page.set_viewport_size(LAPTOP)
    # Given the first approver of the 750.00 request opens it at 1280x800
    admin_log_in(page, base, "acme-finance", f"/admin/approvals/approvalrequest/{large.pk}/change/")
    # Then everything needed to decide is on screen without sideways scrolling
    expect(page.locator("#ra-amount")).to_contain_text("750.00 USD")
    expect(page.locator("#ra-approvals")).to_contain_text("1 of 2")
    shot(page, "admin-review-page-1280.png")
    assert_no_sideways_scroll(page)
    for cell in ("#ra-approvals", "#ra-expiry", "#ra-gate", "#ra-policy-line"):
        expect(page.locator(cell)).to_be_visible()
        assert_inside_viewport(page.locator(cell))
    trace = page.locator("#ra-trace")
    for header in ("tool", "reason"):
        assert_inside_viewport(trace.locator("th", has_text=header).first)
    assert_inside_viewport(trace.locator("tbody tr td.ra-reason").last)
    # And the stock form underneath does not repeat the review
    expect(page.locator("fieldset.module")).to_have_count(1)
    expect(page.locator("fieldset.module").first).to_contain_text("Decided by")
    expect(page.locator("fieldset.module").first).not_to_contain_text("Amount")
    # And having approved once, they are not offered Approve again
    expect(page.locator("#ra-approve")).to_have_count(0)
    expect(page.locator("#ra-already-voted")).to_be_visible()
    page.goto(f"{base}/admin/approvals/approvalrequest/{large.pk}/decide/approve/")
    expect(page.locator("#ra-confirm")).to_have_count(0)
    expect(page.locator("#ra-cannot")).to_contain_text("already approved")
    shot(page, "admin-confirm-refused-1280.png")


def test_a_support_user_at_the_admin_is_sent_to_the_support_app(live_server, page, registry, demo):  # noqa: F811
    from playwright.sync_api import expect

    base = live_server.url
    page.set_viewport_size(LAPTOP)
    # Given a support user (not staff) who signs in to the admin
    page.goto(f"{base}/admin/")
    page.fill("#id_username", "acme-support")
    page.fill("#id_password", "demo")
    page.locator("#login-form [type=submit]").click()
    # Then the login page tells them to use the support app, and its link takes them there
    note = page.locator("#ra-use-support-app")
    expect(note).to_contain_text("support app")
    shot(page, "admin-login-support-user.png")
    note.get_by_role("link").click()
    page.wait_for_url(f"{base}/login/?next=/tickets/")
    page.fill("#id_username", "acme-support")
    page.fill("#id_password", "demo")
    page.get_by_role("button", name="Sign in").click()
    page.wait_for_url(f"{base}/tickets/")
