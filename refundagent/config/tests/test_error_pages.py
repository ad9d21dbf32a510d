"""The product's own error pages in production settings, the favicon, and the admin login's
word to support people (`issues show 11`)."""

import pytest
from django.contrib.auth import get_user_model
from django.test import Client, override_settings
from django.urls import include, path


def boom(request):
    raise RuntimeError("a bug")


# A root URLconf with the product's routes plus one view that raises.
urlpatterns = [path("boom/", boom), path("", include("refundagent.config.urls"))]


@override_settings(DEBUG=False, ROOT_URLCONF=__name__)
def test_a_crash_shows_the_products_500_page_in_production():
    # given a production client that gets the response rather than the exception
    client = Client(raise_request_exception=False)
    # when a view raises
    response = client.get("/boom/")
    # then the product's own page is served, with no traceback
    assert response.status_code == 500
    html = response.content.decode()
    assert 'id="error-500"' in html and "Back to the refund desk" in html
    assert "RuntimeError" not in html and "Traceback" not in html


@pytest.mark.django_db
@override_settings(DEBUG=False)
def test_an_unknown_page_shows_the_products_404_page_in_production():
    response = Client().get("/no-such-page/")
    assert response.status_code == 404
    html = response.content.decode()
    assert "Nothing here" in html and "refundagent" in html


def test_the_favicon_is_linked_and_served(client, db):
    # the support app and the admin both link it
    assert 'rel="icon"' in client.get("/login/").content.decode()
    assert 'rel="icon"' in client.get("/admin/login/").content.decode()
    # and /favicon.ico leads to it
    response = client.get("/favicon.ico")
    assert response.status_code == 301 and response["Location"].endswith("refundagent/favicon.svg")


@pytest.mark.django_db
def test_a_non_staff_user_at_the_admin_login_is_sent_to_the_support_app(client):
    # given a support user who is not staff
    get_user_model().objects.create_user("helpdesk", password="pw-helpdesk-1")
    # when they sign in to the admin
    response = client.post(
        "/admin/login/?next=/admin/", {"username": "helpdesk", "password": "pw-helpdesk-1", "next": "/admin/"}
    )
    # then the login page says to use the support app, with a link to it
    assert response.status_code == 200
    html = response.content.decode()
    note = html.split('id="ra-use-support-app"', 1)[1].split("</p>", 1)[0]
    assert "support app" in note and '<a href="/">' in note
    assert 'class="errornote" id="ra-use-support-app"' in html
