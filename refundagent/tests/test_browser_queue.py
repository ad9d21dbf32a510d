"""The escalation queue in a real browser: support takes an escalated ticket from the
queue, hands it back, takes it again and proposes a policy exception from the ticket page; another
ticket is closed with a reply. Playwright drives Debian's chromium at 1280x800 against the live
server. Screenshots go to artifacts/browser/."""

import pytest

from refundagent.tests.test_browser import (  # noqa: F401 - the browser fixtures, shared
    _sync_orm_under_playwright,
    browser_type_launch_args,
    log_in,
    pytestmark,
    registry,
    shot,
)


@pytest.fixture(scope="session")
def browser_context_args(browser_context_args):
    return {**browser_context_args, "viewport": {"width": 1280, "height": 800}}


def escalated(order_id, username="acme-support", detail="The agent ran out of steps."):
    from django.contrib.auth import get_user_model

    from ledger.models import Order
    from refundagent.models import Ticket

    order = Order.objects.select_related("customer", "tenant").get(external_id=order_id, tenant__slug="acme")
    return Ticket.objects.create(
        tenant=order.tenant,
        order=order,
        customer=order.customer,
        message="Please help.",
        currency=order.currency,
        created_by=get_user_model().objects.get(username=username),
        status="escalated",
        stop_reason="budget_exhausted",
        stop_detail=detail,
    )


@pytest.mark.usefixtures("registry")
def test_support_takes_hands_back_proposes_and_closes_from_the_queue(live_server, page, demo):
    from playwright.sync_api import expect

    from approvals.models import ApprovalRequest

    base = live_server.url
    # given two escalated tickets: ORD-5002 is 45 days old, outside the 30-day window
    late, other = escalated("ORD-5002"), escalated("ORD-5003", detail="The model stopped making progress.")
    log_in(page, base, "acme-support")

    # when support opens the queue from the nav
    page.get_by_role("link", name="Escalations").click()
    row = page.locator(f'tr[data-ticket="{late.pk}"]')
    expect(row).to_contain_text("Escalated: the agent or finance handed it to a person")
    expect(row.locator(".owner")).to_have_text("nobody")
    assert page.evaluate("document.documentElement.scrollWidth <= window.innerWidth")
    shot(page, "queue.png")
    # and takes, hands back and takes the late ticket
    row.get_by_role("button", name="Take").click()
    expect(page.locator(f'tr[data-ticket="{late.pk}"] .owner')).to_have_text("acme-support")
    page.locator(f'tr[data-ticket="{late.pk}"]').get_by_role("button", name="Hand back").click()
    expect(page.locator(f'tr[data-ticket="{late.pk}"] .owner')).to_have_text("nobody")
    page.locator(f'tr[data-ticket="{late.pk}"]').get_by_role("button", name="Take").click()

    # when they open it and propose a 40.00 policy exception with a reason
    page.goto(f"{base}/tickets/{late.pk}/")
    expect(page.locator("#owner")).to_contain_text("acme-support")
    form = page.locator("#propose-form")
    form.get_by_label("Amount").fill("40.00")
    form.get_by_label("Reason").fill("Goodwill: the lamp broke just after the window.")
    form.get_by_label("Policy exception").check()
    form.get_by_role("button", name="Propose refund").click()
    # then the ticket waits for two finance approvers, and the trace shows every action
    expect(page.locator("#ticket-status .badge")).to_have_attribute("data-status", "approval_required")
    expect(page.locator("#approval-origin")).to_contain_text("Proposed by a person")
    expect(page.locator("#reply-text")).to_contain_text("passed to our team")
    expect(page.locator("#trace-rows")).to_contain_text("human_proposal")
    for decision in ("take", "hand_back"):
        expect(page.locator("#trace-rows")).to_contain_text(decision)
    shot(page, "ticket-human-proposal.png")
    request = ApprovalRequest.objects.get(ticket_ref=late.pk)
    assert (request.origin, str(request.amount), request.required_approvals) == ("human", "40.00", 2)

    # when they close the other ticket with a reply from its page
    page.goto(f"{base}/tickets/{other.pk}/")
    close = page.locator("#close-form")
    close.get_by_label("Reply to the customer").fill("We sent you a replacement case.")
    close.get_by_label("Note").fill("Replacement shipped.")
    close.get_by_role("button", name="Close ticket").click()
    # then it is closed, its reply is the person's and the close is traced
    expect(page.locator("#ticket-status .badge")).to_have_attribute("data-status", "closed")
    expect(page.locator("#reply-text")).to_have_text("We sent you a replacement case.")
    expect(page.locator("#trace-rows")).to_contain_text("Replacement shipped.")
