"""The support web UI: login, the ticket list and the new-ticket form."""

from decimal import Decimal

import pytest
from django.urls import reverse

from refundagent.models import Ticket


@pytest.fixture
def ticket_defaults():
    """File tickets without running the agent (its task is left in the on-commit queue)."""
    return {"order": "ORD-5001", "message": "My headphones broke, please refund.", "hold_agent": True}


@pytest.mark.parametrize("name,args", [("tickets", []), ("ticket_new", []), ("ticket", [1]), ("ticket_status", [1])])
def test_pages_require_login(client, demo, name, args):
    url = reverse(name, args=args)

    response = client.get(url)

    assert response.status_code == 302
    assert response["Location"].startswith(reverse("login"))


def test_login_page_logs_in_with_the_demo_password(client, demo):
    response = client.get(reverse("login"))
    assert response.status_code == 200
    assert b"Sign in" in response.content

    response = client.post(reverse("login"), {"username": "acme-support", "password": "demo"})

    assert response.status_code == 302
    assert response["Location"] == reverse("tickets")


def test_login_with_a_wrong_password_shows_an_error(client, demo):
    response = client.post(reverse("login"), {"username": "acme-support", "password": "wrong"})

    assert response.status_code == 200
    assert b"Please enter a correct username and password" in response.content


def test_root_redirects_to_the_ticket_list(login):
    response = login("acme-support").get("/")

    assert response.status_code == 302
    assert response["Location"] == reverse("tickets")


def test_list_shows_the_tenants_tickets_newest_first(login, file_ticket):
    older = file_ticket(order="ORD-5001", requested_amount="200.00")
    newer = file_ticket(order="ORD-5003")

    response = login("acme-support").get(reverse("tickets"))

    assert response.status_code == 200
    html = response.content.decode()
    assert f'href="{reverse("ticket", args=[newer.pk])}"' in html
    assert html.index(f"#{newer.pk}<") < html.index(f"#{older.pk}<")
    assert "200.00 USD" in html
    assert "Acme Retail" in html
    assert "New ticket" in html


def test_list_is_tenant_scoped(login, file_ticket):
    acme = file_ticket()

    response = login("globex-support").get(reverse("tickets"))

    assert response.status_code == 200
    assert list(response.context["page"].object_list) == []
    assert f'href="{reverse("ticket", args=[acme.pk])}"' not in response.content.decode()


def test_list_filters_by_status_and_order(login, file_ticket):
    first = file_ticket(order="ORD-5001")
    second = file_ticket(order="ORD-5003")
    Ticket.objects.filter(pk=first.pk).update(status=Ticket.Status.ESCALATED)
    client = login("acme-support")

    by_status = client.get(reverse("tickets"), {"status": "escalated"})
    by_order = client.get(reverse("tickets"), {"q": "5003"})

    assert [t.pk for t in by_status.context["page"].object_list] == [first.pk]
    assert [t.pk for t in by_order.context["page"].object_list] == [second.pk]


@pytest.mark.parametrize(
    "query,error",
    [
        ({"status": "escalated", "q": "O" * 101}, "Search: Ensure this value has at most 100 characters (it has 101)."),
        ({"status": "<script>"}, "Status: Select a valid choice. &lt;script&gt; is not one of the available choices."),
    ],
)
def test_an_invalid_filter_lists_nothing_and_says_why(login, file_ticket, query, error):
    # given an escalated ticket and a queued one
    escalated = file_ticket(order="ORD-5001")
    queued = file_ticket(order="ORD-5003")
    Ticket.objects.filter(pk=escalated.pk).update(status=Ticket.Status.ESCALATED)

    # when the list is asked for with a filter the form refuses
    response = login("acme-support").get(reverse("tickets"), query)

    # then 400 with the error, and no ticket listed (before: 200, every ticket listed under the
    # "Escalated" the status box still showed)
    assert response.status_code == 400
    html = response.content.decode()
    assert error in html
    assert list(response.context["page"].object_list) == []
    assert f"#{queued.pk}<" not in html and f"#{escalated.pk}<" not in html


def test_list_paginates(login, file_ticket):
    for _ in range(23):
        file_ticket()
    client = login("acme-support")

    first = client.get(reverse("tickets"))
    second = client.get(reverse("tickets"), {"page": 2})

    assert len(first.context["page"].object_list) == 20
    assert len(second.context["page"].object_list) == 3
    assert "Page 1 of 2" in first.content.decode()
    # newest first: the next page holds older tickets, and a filter stays on the links
    assert 'href="?page=2">Older →</a>' in first.content.decode()
    assert "← Newer" not in first.content.decode()
    assert 'href="?page=1">← Newer</a>' in second.content.decode()
    filtered = client.get(reverse("tickets"), {"order": "ORD-5001"}).content.decode()
    assert 'href="?order=ORD-5001&amp;page=2">Older →</a>' in filtered


def test_finance_sees_the_review_queue_link_and_no_new_ticket(login):
    response = login("acme-finance").get(reverse("tickets"))

    html = response.content.decode()
    assert "/admin/approvals/approvalrequest/" in html
    assert reverse("ticket_new") not in html


def test_new_ticket_form_is_refused_to_finance_with_a_403_page(login):
    client = login("acme-finance")

    get = client.get(reverse("ticket_new"))
    post = client.post(reverse("ticket_new"), {"order": "ORD-5001", "customer": "CUST-1001", "message": "x"})

    assert get.status_code == 403
    assert "needs the support role" in get.content.decode()
    assert post.status_code == 403
    assert Ticket.objects.count() == 0


def test_user_without_a_tenant_gets_a_403(client, demo, django_user_model):
    client.force_login(django_user_model.objects.create_user("drifter", password="x"))

    response = client.get(reverse("tickets"))

    assert response.status_code == 403
    assert "belongs to no tenant" in response.content.decode()


@pytest.mark.parametrize(
    "data,field,error",
    [
        ({"order": "ORD-9999"}, "order", "Order ORD-9999 not found."),
        ({"order": "ORD-7001"}, "order", "Order ORD-7001 not found."),  # globex's order: as if it did not exist
        ({"customer": "CUST-9999"}, "customer", "Customer CUST-9999 not found."),
        ({"customer": "CUST-2001"}, "customer", "Customer CUST-2001 not found."),
        ({"requested_amount": "-5"}, "requested_amount", "The requested amount must be positive."),
        ({"requested_amount": "abc"}, "requested_amount", "Enter a number."),
        ({"requested_amount": "1.234"}, "requested_amount", "Ensure that there are no more than 2 decimal places."),
        ({"items": "ITEM-1, ITEM-99"}, "items", "Items ITEM-99 are not on order ORD-5001."),
        ({"message": "   "}, "message", "This field is required."),
    ],
)
def test_new_ticket_errors_are_shown_next_to_the_field_and_nothing_is_written(login, data, field, error):
    form = {"order": "ORD-5001", "customer": "CUST-1001", "message": "Broken on arrival.", **data}

    response = login("acme-support").post(reverse("ticket_new"), form)

    assert response.status_code == 422
    assert response.context["form"].errors[field] == [error]
    html = response.content.decode()
    assert f'id="{field}-errors"' in html
    assert Ticket.objects.count() == 0


def test_customer_mismatch_is_shown_on_the_customer_field(login, demo):
    from ledger.models import Customer, Tenant

    Customer.objects.create(tenant=Tenant.objects.get(slug="acme"), external_id="CUST-1002")

    response = login("acme-support").post(
        reverse("ticket_new"), {"order": "ORD-5001", "customer": "CUST-1002", "message": "Refund please."}
    )

    assert response.status_code == 422
    assert response.context["form"].errors["customer"] == ["Order ORD-5001 does not belong to customer CUST-1002."]
    assert Ticket.objects.count() == 0


def test_new_ticket_is_filed_and_redirects_to_its_page(login, django_capture_on_commit_callbacks):
    client = login("acme-support")
    form = {
        "order": " ORD-5001 ",
        "customer": "CUST-1001",
        "message": "Broken.",
        "requested_amount": "200.00",
        "items": "ITEM-1",
    }

    with django_capture_on_commit_callbacks(execute=False) as callbacks:
        response = client.post(reverse("ticket_new"), form)

    ticket = Ticket.objects.get()
    assert response.status_code == 302
    assert response["Location"] == reverse("ticket", args=[ticket.pk])
    assert ticket.order.external_id == "ORD-5001"
    assert ticket.requested_amount == Decimal("200.00")
    assert ticket.items == ["ITEM-1"]
    assert ticket.created_by.username == "acme-support"
    assert len(callbacks) == 1  # the agent run is queued once the ticket is committed
    page = client.get(response["Location"])
    assert f"Ticket #{ticket.pk} filed." in page.content.decode()
