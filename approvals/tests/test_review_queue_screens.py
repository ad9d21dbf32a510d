"""The review queue's words and links: its title, finance landing on it, and the ticket column
and the review page linking to the support ticket."""

import pytest
from django.test import Client

pytestmark = pytest.mark.django_db

QUEUE = "/admin/approvals/approvalrequest/"


@pytest.fixture
def finance(user):
    client = Client()
    client.force_login(user("acme-finance"))
    return client


def test_finance_lands_on_the_review_queue_titled_for_what_it_is(finance):
    # when finance opens the admin's front page
    response = finance.get("/admin/")
    # then they are sent to the review queue
    assert response.status_code == 302 and response["Location"] == QUEUE
    html = finance.get(QUEUE).content.decode()
    assert "Select approval request to view" not in html
    assert "<h1>Approval requests to review</h1>" in html


def test_the_admin_front_page_stays_for_people_without_the_finance_role(user):
    ops = Client()
    ops.force_login(user("ops"))
    assert ops.get("/admin/").status_code == 200


def test_the_ticket_column_and_the_review_page_link_to_the_support_ticket(approval_request_make, finance):
    request = approval_request_make(order="ORD-5001", ticket_ref=4321)
    queue = finance.get(QUEUE).content.decode()
    assert 'href="/tickets/4321/"' in queue
    review = finance.get(f"{QUEUE}{request.pk}/change/").content.decode()
    assert 'href="/tickets/4321/"' in review


def test_the_queues_statuses_are_written_one_way(approval_request_make, finance):
    approval_request_make(order="ORD-5001")
    html = finance.get(QUEUE).content.decode()
    filters = html.split('id="changelist-filter"', 1)[1]
    # every status starts with a capital, as the badges do: not "Pending" beside "executed and verified"
    assert "Executed and verified" in filters and "executed and verified" not in filters
    assert "Changes requested" in filters and "Pending" in filters
