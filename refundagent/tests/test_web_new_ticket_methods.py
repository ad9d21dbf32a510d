"""The new-ticket form's "Refund to": a picker of the typed customer's own payment methods (the
proposal forms' picker), never a free-text id. Without a script, "Show the customer's payment
methods" posts the form to fill it; with one, tickets/new/methods.json does. Another tenant's
customer reads exactly as an unknown one, and a method that is not the customer's is an error at
the field with nothing written."""

import json
from decimal import Decimal

import pytest
from django.urls import reverse

from ledger.models import Customer, PaymentMethod, Tenant
from refundagent.models import Ticket

GIFT_CARD = "gift_card_cust-1001"
METHODS = reverse("ticket_new_methods")
FORM = {"order": "ORD-5005", "customer": "CUST-1001", "message": "Socks arrived torn.", "items": "ITEM-6"}


def _options(html: str) -> list[str]:
    """The values of the refund_to select's options, in order."""
    select = html.split('<select name="refund_to"', 1)[1].split("</select>", 1)[0]
    return [part.split('"', 1)[0] for part in select.split('<option value="')[1:]]


def test_the_empty_form_offers_the_original_payment_method_and_a_way_to_load_the_rest(login, demo):
    html = login("acme-support").get(reverse("ticket_new")).content.decode()

    assert _options(html) == [""]
    assert "The original payment method (the order&#x27;s own payment)" in html
    assert 'name="show_methods"' in html and f'data-methods-url="{METHODS}"' in html
    assert "refundagent/ticket_new.js" in html
    assert 'placeholder="blank: the original payment method"' not in html  # no free-text id any more


def test_without_a_script_show_methods_fills_the_picker_and_files_nothing(login, demo):
    response = login("acme-support").post(reverse("ticket_new"), {**FORM, "show_methods": "1"})

    assert response.status_code == 200
    html = response.content.decode()
    assert _options(html) == ["", "card_4242", GIFT_CARD]
    assert "Card visa ****4242 (card_4242)" in html and f"Gift card, balance 25.00 ({GIFT_CARD})" in html
    assert "The payment methods of customer CUST-1001." in html
    # what was typed stays, and nothing is refused or written yet
    assert "Socks arrived torn." in html and 'value="ORD-5005"' in html
    assert 'class="errorlist"' not in html
    assert Ticket.objects.count() == 0


def test_another_tenants_customer_reads_exactly_as_an_unknown_one(login, demo):
    client = login("acme-support")

    globex = client.post(reverse("ticket_new"), {**FORM, "customer": "CUST-2001", "show_methods": "1"})
    unknown = client.post(reverse("ticket_new"), {**FORM, "customer": "CUST-9999", "show_methods": "1"})

    assert globex.status_code == unknown.status_code == 200
    strip = [(globex, "CUST-2001"), (unknown, "CUST-9999")]
    pages = [r.content.decode().replace(customer, "CUST-X") for r, customer in strip]
    # the pages differ only in the CSRF token: compare what the picker and its note say
    assert _options(pages[0]) == _options(pages[1]) == [""]
    assert "Customer CUST-X not found: only the original payment method can be picked." in pages[0]
    assert "Customer CUST-X not found: only the original payment method can be picked." in pages[1]
    assert "card_1881" not in pages[0] and "John Roe" not in pages[0]  # globex's card and customer


def test_a_picked_method_of_the_customer_is_filed(login, demo, django_capture_on_commit_callbacks):
    with django_capture_on_commit_callbacks(execute=False):
        response = login("acme-support").post(reverse("ticket_new"), {**FORM, "refund_to": GIFT_CARD})

    assert response.status_code == 302
    assert Ticket.objects.get().refund_to.external_id == GIFT_CARD


@pytest.fixture
def other_customer(demo):
    """Another acme customer with a card of their own."""
    customer = Customer.objects.create(
        tenant=Tenant.objects.get(slug="acme"), external_id="CUST-1002", name="Max Other", email="max@example.com"
    )
    PaymentMethod.objects.create(customer=customer, external_id="card_9999", kind="card", brand="visa", last4="9999")
    return customer


@pytest.mark.parametrize(
    "refund_to",
    ["card_9999", "card_1881", "gift_card_cust-2001", "no_such_method", "original", "<script>x</script>"],
    ids=["another_customers", "another_tenants", "another_tenants_gift_card", "unknown", "a_word", "markup"],
)
def test_a_method_that_is_not_the_customers_is_an_error_at_the_field_and_nothing_is_written(
    login, other_customer, refund_to
):
    response = login("acme-support").post(reverse("ticket_new"), {**FORM, "refund_to": refund_to})

    assert response.status_code == 422
    errors = response.context["form"].errors
    assert list(errors) == ["refund_to"]
    assert errors["refund_to"] == [
        f"{refund_to} is not a payment method of customer CUST-1001: pick one from the list."
    ]
    html = response.content.decode()
    assert 'id="refund_to-errors"' in html and "<script>x</script>" not in html
    # the form comes back with the customer's own methods to pick from, and what was typed
    assert _options(html) == ["", "card_4242", GIFT_CARD]
    assert "Socks arrived torn." in html
    assert Ticket.objects.count() == 0


def test_a_method_picked_for_one_customer_is_refused_once_the_customer_is_changed(login, other_customer):
    # given the picker was filled for CUST-1001 and the gift card picked, then the customer changed
    response = login("acme-support").post(
        reverse("ticket_new"), {**FORM, "order": "", "items": "", "customer": "CUST-1002", "refund_to": GIFT_CARD}
    )

    assert response.status_code == 422
    assert response.context["form"].errors["refund_to"] == [
        f"{GIFT_CARD} is not a payment method of customer CUST-1002: pick one from the list."
    ]
    assert _options(response.content.decode()) == ["", "card_9999"]
    assert Ticket.objects.count() == 0


def test_a_method_removed_after_the_page_was_drawn_is_refused_by_the_service(login, demo, monkeypatch):
    # given the page offered the gift card, and the shop removed it before the post reached the service
    from refundagent import views

    real = views.selectors.customer_methods

    def offered_then_removed(**kwargs):
        methods = real(**kwargs)
        PaymentMethod.objects.filter(external_id=GIFT_CARD).delete()
        return methods

    monkeypatch.setattr(views.selectors, "customer_methods", offered_then_removed)
    response = login("acme-support").post(reverse("ticket_new"), {**FORM, "refund_to": GIFT_CARD})

    assert response.status_code == 422
    assert response.context["form"].errors["refund_to"] == [
        f"{GIFT_CARD} is not a payment method of customer CUST-1001."
    ]
    assert Ticket.objects.count() == 0


def test_an_unknown_customer_with_a_blank_refund_to_is_refused_at_the_customer(login, demo):
    response = login("acme-support").post(
        reverse("ticket_new"), {**FORM, "order": "", "items": "", "customer": "CUST-2001"}
    )

    assert response.status_code == 422
    assert response.context["form"].errors == {"customer": ["Customer CUST-2001 not found."]}
    assert Ticket.objects.count() == 0


def test_an_overlong_customer_is_an_error_at_the_field(login, demo):
    response = login("acme-support").post(reverse("ticket_new"), {**FORM, "customer": "C" * 101, "show_methods": "1"})
    assert response.status_code == 200 and _options(response.content.decode()) == [""]

    response = login("acme-support").post(reverse("ticket_new"), {**FORM, "customer": "C" * 101})
    assert response.status_code == 422
    assert "customer" in response.context["form"].errors
    assert Ticket.objects.count() == 0


# --- tickets/new/methods.json, what the script loads -----------------------------------------------


def test_the_endpoint_answers_the_pickers_choices_for_the_customer(login, demo):
    response = login("acme-support").get(METHODS, {"customer": " CUST-1001 "})

    assert response.status_code == 200
    assert response.json() == {
        "customer": "CUST-1001",
        "found": True,
        "choices": [
            {"value": "", "label": "The original payment method (the order's own payment)"},
            {"value": "card_4242", "label": "Card visa ****4242 (card_4242)"},
            {"value": GIFT_CARD, "label": f"Gift card, balance 25.00 ({GIFT_CARD})"},
        ],
        "note": "The payment methods of customer CUST-1001.",
    }


def test_the_endpoint_answers_another_tenants_customer_as_an_unknown_one(login, demo):
    client = login("acme-support")

    globex = client.get(METHODS, {"customer": "CUST-2001"})
    unknown = client.get(METHODS, {"customer": "CUST-9999"})

    assert globex.status_code == unknown.status_code == 404
    assert json.loads(globex.content.decode().replace("CUST-2001", "CUST-X")) == json.loads(
        unknown.content.decode().replace("CUST-9999", "CUST-X")
    )
    assert globex.json()["choices"] == [{"value": "", "label": "The original payment method (the order's own payment)"}]
    # and globex's own support cannot read acme's customer either
    assert login("globex-support").get(METHODS, {"customer": "CUST-1001"}).status_code == 404


@pytest.mark.parametrize("query", [{}, {"customer": ""}, {"customer": "   "}, {"customer": "C" * 101}])
def test_the_endpoint_refuses_a_query_it_cannot_read(login, demo, query):
    response = login("acme-support").get(METHODS, query)
    assert response.status_code == 400
    assert response.json()["detail"].startswith("Customer:")


def test_the_endpoint_is_for_the_people_who_file_tickets(client, login, demo):
    assert client.get(METHODS, {"customer": "CUST-1001"}).status_code == 302  # signed out: to the login
    finance = login("acme-finance").get(METHODS, {"customer": "CUST-1001"})
    assert finance.status_code == 403 and "card_4242" not in finance.content.decode()
    assert login("acme-support").post(METHODS, {"customer": "CUST-1001"}).status_code == 405


def test_hostile_shop_data_in_a_method_stays_text(login, demo):
    # given the shop's import named a gift card with markup
    customer = Customer.objects.get(tenant__slug="acme", external_id="CUST-1001")
    PaymentMethod.objects.create(
        customer=customer, external_id='gc"><img src=x onerror=alert(1)>', kind="gift_card", balance=Decimal("1.00")
    )
    client = login("acme-support")

    page = client.post(reverse("ticket_new"), {**FORM, "show_methods": "1"}).content.decode()
    answer = client.get(METHODS, {"customer": "CUST-1001"}).json()

    assert "<img src=x" not in page and "&lt;img src=x onerror=alert(1)&gt;" in page
    assert any(choice["value"] == 'gc"><img src=x onerror=alert(1)>' for choice in answer["choices"])  # JSON text
