"""`issues show 4`, in a real browser: support files a ticket, the agent stops at
approval_required, finance approves in the admin review queue and records the payout made by
hand, the ticket shows `refunded` and the ledger entry. Playwright drives Debian's chromium against the live server; tasks run
eagerly, so the agent run and the refund execution happen in-process.

Screenshots go to artifacts/browser/.
"""

import importlib
import os
import shutil
from pathlib import Path

import pytest
from django.conf import settings

CHROMIUM = os.getenv("CHROMIUM_PATH", "/usr/bin/chromium")
IN_CI = os.getenv("CI") == "true"
ARTIFACTS = Path(settings.BASE_DIR) / "artifacts" / "browser"

pytestmark = [
    pytest.mark.browser,
    pytest.mark.skipif(
        not (os.path.exists(CHROMIUM) or shutil.which("chromium")) and not IN_CI,
        reason=f"needs Debian's chromium at {CHROMIUM} (apt-get install -y chromium); required in CI",
    ),
]


@pytest.fixture(scope="session")
def browser_type_launch_args(browser_type_launch_args):
    return {
        **browser_type_launch_args,
        "executable_path": CHROMIUM,
        "headless": True,
        "args": [
            "--no-sandbox",
            "--disable-gpu",
            "--disable-background-networking",
            "--disable-component-update",
            "--disable-sync",
            "--disable-quic",
            "--no-first-run",
        ],
    }


@pytest.fixture(scope="session")
def browser_context_args(browser_context_args):
    return {**browser_context_args, "viewport": {"width": 1366, "height": 900}}


@pytest.fixture(scope="session", autouse=True)
def _sync_orm_under_playwright():
    """Playwright's sync API leaves an event loop running in the main thread for the rest of the
    session, and Django refuses ORM calls there: allow them (the ORM calls are still sync).
    Session-wide, because every later test of the session runs beside that loop too."""
    with pytest.MonkeyPatch.context() as m:
        m.setenv("DJANGO_ALLOW_ASYNC_UNSAFE", "true")
        yield


@pytest.fixture
def registry(transactional_db):
    """The capability registry, as its data migration writes it. A live_server test runs on a
    transactional database, which is flushed after every transactional test, and the flush takes
    the migration's rows with it (serialized_rollback cannot restore them here: Playwright's
    event loop gives this thread a different Django connection object from the one that
    serialized the database)."""
    from django.apps import apps

    for name in ("0002_seed_capabilities", "0004_seed_list_customer_orders"):
        importlib.import_module(f"approvals.migrations.{name}").seed(apps, None)


def shot(page, name, full_page=True):
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=str(ARTIFACTS / name), full_page=full_page)


def log_in(page, base, username):
    page.goto(f"{base}/login/")
    page.fill("#id_username", username)
    page.fill("#id_password", "demo")
    page.get_by_role("button", name="Sign in").click()
    page.wait_for_url(f"{base}/tickets/")


def log_out(page):
    page.locator("form[action='/logout/'] button").click()
    page.wait_for_url("**/login/")


def test_support_files_a_ticket_finance_approves_and_the_ticket_shows_the_refund(live_server, page, registry, demo):
    from playwright.sync_api import expect

    from refundagent.models import Ticket

    base = live_server.url

    # Given support is signed in
    page.goto(f"{base}/tickets/")
    expect(page).to_have_url(f"{base}/login/?next=/tickets/")
    log_in(page, base, "acme-support")
    expect(page.get_by_role("heading", name="Refund tickets")).to_be_visible()

    # When they file a ticket for ORD-5001 asking 200.00
    page.get_by_role("link", name="New ticket", exact=True).click()
    page.fill("#id_order", "ORD-5001")
    page.fill("#id_customer", "CUST-1001")
    page.fill("#id_message", "My wireless headphones stopped working after a week. Please refund $200.")
    page.fill("#id_requested_amount", "200.00")
    page.get_by_role("button", name="File ticket").click()

    # Then the ticket page shows the agent's stop: approval required for the 120.00 that is refundable
    page.wait_for_url(f"{base}/tickets/*/")
    ticket = Ticket.objects.get()
    badge = page.locator("#ticket-status .badge")
    expect(badge).to_have_attribute("data-status", "approval_required", timeout=30_000)
    expect(page.locator("#approval-status")).to_have_attribute("data-status", "pending")
    expect(page.locator("#approval")).to_contain_text("120.00 USD")
    expect(page.locator("#draft")).to_contain_text("refund-policy-v4")
    expect(page.locator("#trace-rows tr").first).to_contain_text("filed")
    expect(page.locator("#ledger")).to_contain_text("No refund recorded for this order.")
    shot(page, "ticket-approval-required.png")

    # When finance opens the request in the admin review queue and approves it
    log_out(page)
    approve_in_admin(page, base, ticket)

    # Then, back on the ticket page, the ticket is refunded and the ledger has the 120.00 entry
    log_in(page, base, "acme-support")
    page.goto(f"{base}/tickets/{ticket.pk}/")
    expect(page.locator("#ticket-status .badge")).to_have_attribute("data-status", "refunded", timeout=30_000)
    expect(page.locator("#approval-status")).to_have_attribute("data-status", "executed")
    entries = page.locator("#ledger-entries tbody tr")
    expect(entries).to_have_count(1)
    expect(entries.first).to_contain_text("120.00 USD")
    expect(entries.first).to_contain_text("this ticket")
    expect(page.locator("#refunded-total")).to_have_text("120.00 USD")
    shot(page, "ticket-refunded.png")
    ticket.refresh_from_db()
    assert ticket.status == Ticket.Status.REFUNDED
    assert [str(e.amount) for e in ticket.order.refund_entries.all()] == ["120.00"]


def test_ticket_page_follows_the_agent_live_and_copies_the_reply(live_server, page, registry, demo, user, monkeypatch):
    from playwright.sync_api import expect

    from refundagent import services
    from refundagent.agent.loop import agent_run_ticket

    base = live_server.url
    page.context.grant_permissions(["clipboard-read", "clipboard-write"], origin=base)
    # Given a ticket whose agent run has not started yet (nothing enqueued)
    with monkeypatch.context() as m:
        m.setattr(services, "ticket_run_enqueue", lambda ticket_id: None)
        ticket = services.ticket_create(
            user=user("acme-support"),
            order="ORD-5001",
            customer="CUST-1001",
            message="Headphones broke.",
            requested_amount="200.00",
        )
    log_in(page, base, "acme-support")
    page.goto(f"{base}/tickets/{ticket.pk}/")
    expect(page.locator("#ticket-status .badge")).to_have_attribute("data-status", "queued")
    expect(page.locator("#live-hint")).to_be_visible()

    # When the agent runs (as a worker would) while the page is open
    agent_run_ticket(ticket_id=ticket.pk)
    ticket.refresh_from_db()
    assert ticket.status == "approval_required", ticket.stop_detail

    # Then the page notices by itself and renders the stop, the draft and the approval
    expect(page.locator("#ticket-status .badge")).to_have_attribute("data-status", "approval_required", timeout=15_000)
    expect(page.locator("#approval-status")).to_have_attribute("data-status", "pending")
    expect(page.locator("#live-hint")).to_be_hidden()
    # And the reply draft is copied to the clipboard, not sent
    page.get_by_role("button", name="Copy").click()
    expect(page.get_by_role("button", name="Copied ✓")).to_be_visible()
    copied = page.evaluate("navigator.clipboard.readText()")
    assert copied.strip() == page.locator("#reply-text").inner_text().strip()
    assert "ORD-5001" in copied


def approve_in_admin(page, base, ticket):
    """Finance's path through the review queue (approvals/admin/review_queue.py): the queue, the request's
    review page, Approve, then the confirmation that posts the args hash that was shown."""
    from playwright.sync_api import expect

    from approvals.models import ApprovalRequest

    request = ApprovalRequest.objects.get(ticket_ref=ticket.pk)
    page.goto(f"{base}/admin/login/?next=/admin/approvals/approvalrequest/")
    page.fill("#id_username", "acme-finance")
    page.fill("#id_password", "demo")
    page.locator("#login-form [type=submit]").click()
    page.wait_for_url(f"{base}/admin/approvals/approvalrequest/")
    queue_row = page.locator("#result_list tbody tr", has_text="ORD-5001")
    expect(queue_row).to_contain_text("120.00")
    queue_row.locator(f"a[href$='/approvalrequest/{request.pk}/change/']").first.click()

    expect(page.locator("#content")).to_contain_text("120.00")
    expect(page.locator("#content")).to_contain_text(request.args_hash[:12])
    shot(page, "admin-approval.png", full_page=False)
    page.locator(f"a[href$='/approvalrequest/{request.pk}/decide/approve/']").first.click()

    confirm = page.locator("form:has(input[name=args_hash])")
    expect(confirm).to_be_visible()
    expect(confirm.locator("input[name=args_hash]")).to_have_value(request.args_hash)
    confirm.locator("[type=submit]").click()
    page.wait_for_url(f"**/admin/approvals/approvalrequest/{request.pk}/change/")
    expect(page.locator(".messagelist")).to_contain_text("approve recorded")
    shot(page, "admin-approved.png", full_page=False)
    # the manual gateway: approved and written, not paid; finance pays by hand and records it here
    page.reload()  # the execution ran as the decision committed; the page shows what it wrote
    payout = page.locator("#ra-record-payout")
    expect(payout).to_contain_text("Approved, not paid yet", timeout=30_000)
    payout.get_by_label("Payout reference").fill("BANK-TRF-2026-0001")
    payout.get_by_role("button", name="Record payout").click()
    page.wait_for_url(f"**/admin/approvals/approvalrequest/{request.pk}/change/")
    expect(page.locator(".messagelist")).to_contain_text("recorded as paid by hand")
    request.refresh_from_db()
    assert request.status == ApprovalRequest.Status.EXECUTED
    page.locator("#logout-form [type=submit]").click()


def test_the_new_ticket_form_picks_refund_to_among_the_typed_customers_methods(live_server, page, registry, demo):
    from playwright.sync_api import expect

    from refundagent.models import Ticket

    base = live_server.url
    log_in(page, base, "acme-support")
    page.goto(f"{base}/tickets/new/")
    options = page.locator("#id_refund_to option")
    # Given no customer typed: only the original payment method, and the script replaces the post button
    expect(options).to_have_count(1)
    expect(page.locator("#show-methods")).to_be_hidden()

    # When support types another tenant's customer: nothing of theirs, the answer for an unknown one
    page.fill("#id_customer", "CUST-2001")
    page.locator("#id_message").click()  # leaving the field is the change
    expect(page.locator("#refund-to-note")).to_contain_text("Customer CUST-2001 not found")
    expect(options).to_have_count(1)

    # When they type their own customer: that customer's card and gift card are offered
    page.fill("#id_customer", "CUST-1001")
    page.locator("#id_message").click()
    expect(options).to_have_count(3)
    expect(page.locator("#id_refund_to")).to_contain_text("Gift card, balance 25.00 (gift_card_cust-1001)")
    page.fill("#id_order", "ORD-5005")
    page.fill("#id_items", "ITEM-6")
    page.fill("#id_message", "The socks arrived torn.")
    page.select_option("#id_refund_to", "gift_card_cust-1001")
    shot(page, "ticket-new-refund-to.png")
    page.get_by_role("button", name="File ticket").click()

    # Then the ticket is filed to exactly that gift card
    page.wait_for_url(f"{base}/tickets/*/")
    assert Ticket.objects.get().refund_to.external_id == "gift_card_cust-1001"
    expect(page.locator("#evidence")).to_contain_text("gift_card_cust-1001")
