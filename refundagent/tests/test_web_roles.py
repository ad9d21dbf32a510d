"""Every page of the support web UI checks the role it needs, by the rule the API checks
(ledger/tenancy.py ROLE_RULES): a member of the tenant without the support or finance role reads
no ticket, no customer message and no card digits, on the web as on the API."""

import pytest
from django.urls import reverse

from tests.factories import user_build


@pytest.fixture
def ticket_defaults():
    return {"order": "ORD-5001", "message": "My card 4242 was charged twice, please refund.", "hold_agent": True}


@pytest.fixture
def member(demo):
    """A user of acme with the given roles (none, or only operator)."""

    def make(username, *roles):
        return user_build(username=username, tenant=demo["acme"], roles=roles)

    return make


PAGES = [
    ("tickets", False),
    ("ticket", True),
    ("ticket_status", True),
    ("ticket_queue", False),
]


@pytest.mark.parametrize("roles", [(), ("operator",)], ids=["no-role", "operator-only"])
@pytest.mark.parametrize("name,with_ticket", PAGES)
def test_a_member_without_the_support_or_finance_role_reads_no_ticket_page(
    client, member, file_ticket, api_client, roles, name, with_ticket
):
    ticket = file_ticket()
    someone = member("bystander", *roles)
    client.force_login(someone)

    response = client.get(reverse(name, args=[ticket.pk] if with_ticket else []))

    assert response.status_code == 403
    html = response.content.decode()
    assert "needs the support or finance role" in html
    assert "charged twice" not in html and "4242" not in html
    assert "jane.doe@example.com" not in html and "Jane Doe" not in html  # the customer's contact too
    # The API refuses the same user by the same rule.
    api = api_client(someone).get(f"/api/tickets/{ticket.pk}")
    assert api.status_code == 403
    assert api.json()["code"] == "role_required"


@pytest.mark.parametrize("roles", [(), ("operator",)], ids=["no-role", "operator-only"])
@pytest.mark.parametrize("action", ["escalate", "close", "assign", "propose"])
def test_a_member_without_a_role_changes_no_ticket_from_the_web(client, member, file_ticket, roles, action):
    ticket = file_ticket()
    before = (ticket.status, ticket.owner_id)
    client.force_login(member("bystander", *roles))

    response = client.post(
        reverse(f"ticket_{action}", args=[ticket.pk]),
        {"note": "x", "reply": "x", "to": "me", "amount": "1.00", "reason": "x"},
    )

    assert response.status_code == 403
    ticket.refresh_from_db()
    assert (ticket.status, ticket.owner_id) == before


@pytest.mark.parametrize("username", ["acme-support", "acme-finance"])
def test_support_and_finance_still_read_the_ticket_pages(client, user, file_ticket, username):
    ticket = file_ticket()
    client.force_login(user(username))

    for name, with_ticket in PAGES:
        response = client.get(reverse(name, args=[ticket.pk] if with_ticket else []))
        assert response.status_code == 200, name
