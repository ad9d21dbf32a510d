"""The operator dashboard in a real browser: an operator at 1280x800 sees every panel
without scrolling sideways, on data like the demo's (tickets, an executed refund, a refund the
provider declined, agent runs, eval runs, a switched-off capability). Playwright drives Debian's
chromium (launch settings shared with refundagent/tests/test_browser.py) against the live
server. The screenshot goes to artifacts/browser/operations.png."""

import re
from decimal import Decimal

import pytest

from refundagent.tests.test_browser import (  # noqa: F401 - the browser fixtures, shared
    _sync_orm_under_playwright,
    browser_type_launch_args,
    log_in,
    pytestmark,
    registry,
    shot,
)

# Every panel of the page, by its heading (docs/operations.md, "The operator dashboard").
PANELS = [
    r"Tickets filed today",
    r"Waiting for people",
    r"Kill switches",
    r"Refunds executed per day",
    r"Payout failures",
    r"Execution and verification failures",
    r"Model cost per day",
    r"Eval gate trend",
]


@pytest.fixture(scope="session")
def browser_context_args(browser_context_args):
    return {**browser_context_args, "viewport": {"width": 1280, "height": 800}}


@pytest.fixture
def operations_data(live_server, registry, demo, fake_stripe):  # noqa: F811
    """acme's day: tickets in several statuses with agent runs, one refund paid at Stripe and
    verified, one Stripe declined, one waiting for finance; eval runs; a kill switch off."""
    from django.contrib.auth import get_user_model
    from django.utils import timezone

    from approvals.models import ApprovalRequest, Capability
    from evals.models import EvalRun
    from ledger.models import Order
    from refundagent.models import AgentRun, Ticket
    from refundagent.tests.payments_support import approve, ticket_awaiting_approval

    users = get_user_model().objects
    support, finance = users.get(username="acme-support"), users.get(username="acme-finance")
    acme = demo["acme"]
    for i, status in enumerate(["queued", "running", "escalated", "closed", "escalated"]):
        order = Order.objects.get(tenant=acme, external_id=f"ORD-500{i + 2}")
        ticket = Ticket.objects.create(
            tenant=acme,
            order=order,
            customer=order.customer,
            message="Refund please.",
            created_by=support,
            status=status,
        )
        AgentRun.objects.create(
            ticket=ticket, status="stopped", input_tokens=4200, output_tokens=380, cost_usd=Decimal("0.0183")
        )
    order = Order.objects.get(tenant=acme, external_id="ORD-5001")
    # Declined first (it frees its amount), then paid, then one left for finance.
    fake_stripe.fail_next("402")
    declined_ticket, declined = ticket_awaiting_approval(order=order, filer=support, amount="45.00", key="ops-b-1")
    approve(declined, finance)
    paid_ticket, paid = ticket_awaiting_approval(order=order, filer=support, amount="60.00", key="ops-b-2")
    approve(paid, finance)
    ticket_awaiting_approval(order=order, filer=support, amount="20.00", key="ops-b-3")
    declined.refresh_from_db()
    paid.refresh_from_db()
    assert declined.status == ApprovalRequest.Status.PAYMENT_FAILED
    assert paid.status == ApprovalRequest.Status.EXECUTED
    for rate, false_allow, passed in [(0.92, 0, True), (0.88, 1, False), (0.95, 0, True)]:
        EvalRun.objects.create(
            suite="all",
            trigger="test",
            provider="offline",
            total=25,
            passed_count=round(25 * rate),
            failed_count=25 - round(25 * rate),
            metrics={"pass_rate": rate, "false_allow": false_allow},
            passed=passed,
            finished_at=timezone.now(),
        )
    Capability.objects.filter(name="orders.lookup_order").update(enabled=False)
    return {"declined": declined, "declined_ticket": declined_ticket, "paid": paid}


def test_an_operator_sees_every_panel_on_a_laptop_screen(live_server, page, operations_data):
    from playwright.sync_api import expect

    base = live_server.url
    # given the operator signed in at 1280x800
    log_in(page, base, "ops")
    # when they open the dashboard from the nav
    page.get_by_role("link", name="Operations").click()
    page.wait_for_url(f"{base}/evals/operations/")

    # then every panel's heading is visible and nothing scrolls sideways
    for heading in PANELS:
        expect(page.get_by_role("heading", name=re.compile(heading))).to_be_visible()
    scroll_width, inner_width = page.evaluate("[document.documentElement.scrollWidth, window.innerWidth]")
    assert scroll_width <= inner_width, f"page is {scroll_width}px wide in a {inner_width}px window"
    shot(page, "operations.png")

    # and the declined refund is listed with Stripe's reason, inside the window's width
    declined = operations_data["declined"]
    row = page.locator(f"tr[data-entry='{declined.ledger_entry_id}']")
    expect(row).to_contain_text("ORD-5001")
    expect(row).to_contain_text("45.00 USD")
    expect(row).to_contain_text("card_declined")
    box = row.bounding_box()
    assert box is not None and box["x"] >= 0 and box["x"] + box["width"] <= 1280, box
    # and the numbers say what happened: 1 pending approval, the switch off, one refund executed
    expect(page.locator("#queues")).to_contain_text("Pending approvals: 1")
    expect(page.locator("#kill-switches")).to_contain_text("Off: orders.lookup_order")
    expect(page.locator("#refunds-table")).to_contain_text("60.00")
    # and the eval trend has its three runs, the one that failed the gate in red
    expect(page.locator("svg[aria-label='Eval pass rate and false allows per run'] circle")).to_have_count(3)
    expect(page.locator("svg circle.dot.failed")).to_have_count(1)
    # and the link leads to the ticket the refund was for; `ops` has neither the support nor the
    # finance role, so the ticket page (customer message, card digits) is the 403 page that says so
    row.get_by_role("link", name=f"ticket #{operations_data['declined_ticket'].pk}").click()
    page.wait_for_url(f"{base}/tickets/{operations_data['declined_ticket'].pk}/")
    expect(page.locator(".error-page")).to_contain_text("needs the support or finance role")
