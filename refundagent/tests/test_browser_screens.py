"""Screens a support agent and a finance reviewer use, at a laptop's 1280x800 and a phone's
390x844: no page wider than the window, and the API docs with no network. Playwright drives
Debian's chromium (launch settings shared with test_browser.py) against the live server on the
demo data. Screenshots go to artifacts/screens/ (their paths are printed; CI keeps the folder)."""

from pathlib import Path
from urllib.parse import urlparse

import pytest
from django.conf import settings

from refundagent.tests.test_browser import (  # noqa: F401 - the shared launch fixtures
    _sync_orm_under_playwright,
    browser_type_launch_args,
    pytestmark,
    registry,
)

SCREENS = Path(settings.BASE_DIR) / "artifacts" / "screens"
SIZES = {"1280": {"width": 1280, "height": 800}, "390": {"width": 390, "height": 844}}


# The screens docs/ui.md shows: also saved as a small JPEG of the window's first screenful.
DOCUMENTED = {"ticket", "queue", "review-queue", "review-page"}


def shot(page, name):
    SCREENS.mkdir(parents=True, exist_ok=True)
    path = SCREENS / name
    page.screenshot(path=str(path), full_page=True)
    print(f"screenshot: {path}")
    if name.rsplit("-", 1)[0] in DOCUMENTED:
        small = path.with_suffix(".jpg")
        page.screenshot(path=str(small), type="jpeg", quality=50)
        print(f"screenshot: {small}")


def offline(page, live_server) -> list[str]:
    """Every request to a host other than the live server's is refused, as with no network;
    the list collects what was attempted."""
    local = urlparse(live_server.url).netloc
    attempted = []

    def route(route_):
        if urlparse(route_.request.url).netloc == local:
            return route_.continue_()
        attempted.append(route_.request.url)
        return route_.abort("internetdisconnected")

    page.route("**/*", route)
    return attempted


def test_the_api_docs_load_with_no_network(live_server, page, registry, demo):  # noqa: F811
    from playwright.sync_api import expect

    # given a browser with no network beyond the server
    attempted = offline(page, live_server)
    page.set_viewport_size(SIZES["1280"])
    # when it opens the API docs
    page.goto(f"{live_server.url}/api/docs")
    # then Swagger UI renders the API from files the server serves itself
    expect(page.locator(".swagger-ui .information-container .title")).to_be_visible(timeout=15_000)
    expect(page.locator(".opblock").first).to_be_visible()
    shot(page, "api-docs-1280.png")
    assert attempted == []


def log_in(page, base, username, next_url="/tickets/"):
    page.goto(f"{base}/login/?next={next_url}")
    page.fill("#id_username", username)
    page.fill("#id_password", "demo")
    page.locator("form [type=submit]").click()
    page.wait_for_url(f"{base}{next_url}")


def admin_log_in(page, base, username, next_url):
    page.goto(f"{base}/admin/login/?next={next_url}")
    page.fill("#id_username", username)
    page.fill("#id_password", "demo")
    page.locator("#login-form [type=submit]").click()
    page.wait_for_url(f"{base}{next_url}")


def page_width(page) -> tuple[int, int]:
    return page.evaluate("[document.documentElement.scrollWidth, window.innerWidth]")


def on_screen(page, locator) -> None:
    """In the window's width (scrolling down only) and not hidden."""
    locator.scroll_into_view_if_needed()
    box = locator.bounding_box()
    width = page.viewport_size["width"]
    assert box is not None and box["x"] >= 0 and box["x"] + box["width"] <= width, (locator, box)


@pytest.fixture
def screens(live_server, registry, demo, file_ticket):  # noqa: F811
    """A ticket waiting for finance (ORD-5001) and an escalated one (ORD-5002, outside the window)."""
    from approvals.models import ApprovalRequest
    from refundagent.models import Ticket

    waiting = file_ticket(order="ORD-5001", amount="200.00")
    escalated = file_ticket(order="ORD-5002", message="The lamp flickers; please refund it.")
    assert Ticket.objects.get(pk=waiting.pk).status == "approval_required"
    assert Ticket.objects.get(pk=escalated.pk).status == "escalated"
    return {"waiting": waiting, "escalated": escalated, "request": ApprovalRequest.objects.get(ticket_ref=waiting.pk)}


@pytest.mark.parametrize("size", ["1280", "390"])
def test_every_support_page_fits_the_window(live_server, page, screens, size):
    from playwright.sync_api import expect

    base = live_server.url
    page.set_viewport_size(SIZES[size])
    log_in(page, base, "acme-lead")
    pages = {
        "tickets": "/tickets/",
        "new-ticket": "/tickets/new/",
        "ticket": f"/tickets/{screens['waiting'].pk}/",
        "ticket-escalated": f"/tickets/{screens['escalated'].pk}/",
        "queue": "/queue/",
    }
    wide = {}
    for name, url in pages.items():
        page.goto(f"{base}{url}")
        shot(page, f"{name}-{size}.png")
        scroll_width, inner_width = page_width(page)
        if scroll_width > inner_width:
            wide[name] = scroll_width
        # the header's links stay on screen
        for link in ("Tickets", "New ticket"):
            expect(page.locator(".topbar").get_by_role("link", name=link, exact=True)).to_be_visible()
        expect(page.locator(".topbar").get_by_role("button", name="Log out")).to_be_visible()
        on_screen(page, page.locator(".topbar").get_by_role("button", name="Log out"))
    assert wide == {}, f"pages wider than the {SIZES[size]['width']} px window: {wide}"
    # the ticket page's actions are on screen
    page.goto(f"{base}/tickets/{screens['waiting'].pk}/")
    on_screen(page, page.locator("#escalate-confirm summary"))
    page.goto(f"{base}/tickets/{screens['escalated'].pk}/")
    on_screen(page, page.locator("#propose-form button[type=submit]"))


@pytest.mark.parametrize("size", ["1280", "390"])
def test_the_review_queue_and_page_fit_the_window(live_server, page, screens, size):
    base = live_server.url
    page.set_viewport_size(SIZES[size])
    queue = "/admin/approvals/approvalrequest/"
    admin_log_in(page, base, "acme-finance", queue)
    shot(page, f"review-queue-{size}.png")
    assert page_width(page)[0] <= SIZES[size]["width"], "review queue"
    page.goto(f"{base}{queue}{screens['request'].pk}/change/")
    shot(page, f"review-page-{size}.png")
    assert page_width(page)[0] <= SIZES[size]["width"], "review page"
    on_screen(page, page.locator("#ra-approve"))
    on_screen(page, page.locator("#ra-amount"))


def test_the_review_queue_at_1280_keeps_headers_and_order_ids_whole(live_server, page, screens):
    base = live_server.url
    page.set_viewport_size(SIZES["1280"])
    admin_log_in(page, base, "acme-finance", "/admin/approvals/approvalrequest/")
    # no header breaks inside a word: a word that does not fit would overflow its cell
    overflowing = page.evaluate(
        """() => [...document.querySelectorAll('#result_list thead th')]
            .filter(th => th.scrollWidth > th.clientWidth + 1).map(th => th.innerText)"""
    )
    assert overflowing == []
    # and an order id stays on one line
    lines = page.evaluate(
        """() => { const a = document.querySelector('#result_list td.field-order_id_display a, '
                 + '#result_list th.field-order_id_display a');
                 const r = document.createRange(); r.selectNodeContents(a);
                 return new Set([...r.getClientRects()].map(x => Math.round(x.top))).size; }"""
    )
    assert lines == 1


@pytest.mark.parametrize("size", ["1280", "390"])
def test_the_executed_review_page_fits_and_says_its_checks_in_words(live_server, page, screens, size):
    from django.contrib.auth import get_user_model
    from playwright.sync_api import expect

    from approvals.models import ApprovalRequest
    from approvals.services.decisions import approval_request_decide
    from tests.factories import manual_payout_record

    # given finance approved the 120.00 request, and it was paid and verified
    request = screens["request"]
    approval_request_decide(
        request_id=request.pk,
        user=get_user_model().objects.get(username="acme-finance"),
        decision="approve",
        args_hash=request.args_hash,
    )
    # the manual gateway: finance records the payout it made by hand, then it is verified
    assert manual_payout_record(ApprovalRequest.objects.get(pk=request.pk)).status == "executed"
    base = live_server.url
    page.set_viewport_size(SIZES[size])
    admin_log_in(page, base, "acme-finance2", f"/admin/approvals/approvalrequest/{request.pk}/change/")
    expect(page.locator("#ra-verification")).to_be_visible()
    shot(page, f"review-executed-{size}.png")
    # then nothing scrolls sideways, and the evaluator's checks are in words
    assert page_width(page)[0] <= SIZES[size]["width"]
    checks = page.locator("#ra-verification").inner_text()
    assert "one_entry_under_key" not in checks and "args_match_hash" not in checks
    assert "One ledger entry under the request's key" in checks
