"""Accounts that approve money are hard to take over: Django's full password validators (at least
12 characters) wherever a password is chosen, and django-axes throttling with a lockout, in the
database, on the support login and the admin login alike, visible to operators."""

import pytest
from django.contrib.auth import get_user_model
from django.test import Client

WRONG = "not-the-password"


@pytest.fixture(autouse=True)
def _limit(settings):
    """The default limit, said here: these tests count to it."""
    settings.AXES_FAILURE_LIMIT = 5


def sign_in(client, url, username, password):
    return client.post(url, {"username": username, "password": password})


@pytest.mark.parametrize(
    "url,username",
    [("/login/", "acme-support"), ("/admin/login/", "acme-finance")],
    ids=["support-login", "admin-login"],
)
def test_after_the_failure_limit_even_the_right_password_is_refused(demo, settings, url, username):
    client = Client()
    # given as many wrong passwords as the limit allows: the form again each time, then the lockout
    answers = [sign_in(client, url, username, WRONG).status_code for _ in range(settings.AXES_FAILURE_LIMIT)]
    assert answers == [200] * (settings.AXES_FAILURE_LIMIT - 1) + [429]
    # when the right one comes
    response = sign_in(client, url, username, settings.DEMO_PASSWORD)
    # then the sign-in is locked: no session, the lockout page says why
    assert response.status_code == 429
    assert "Sign-in locked" in response.content.decode()
    assert "_auth_user_id" not in client.session
    # and from another address too: the username is locked, not only the address
    other = Client(REMOTE_ADDR="10.9.8.7")
    assert sign_in(other, url, username, settings.DEMO_PASSWORD).status_code == 429
    assert "_auth_user_id" not in other.session


def test_the_limit_counts_failures_on_both_logins_together(demo, settings):
    client = Client()
    for attempt in range(settings.AXES_FAILURE_LIMIT):
        sign_in(client, "/login/" if attempt % 2 else "/admin/login/", "acme-finance", WRONG)

    assert sign_in(client, "/login/", "acme-finance", settings.DEMO_PASSWORD).status_code == 429


def test_fewer_failures_than_the_limit_still_sign_in(demo, settings):
    client = Client()
    for _ in range(settings.AXES_FAILURE_LIMIT - 1):
        sign_in(client, "/login/", "acme-support", WRONG)

    response = sign_in(client, "/login/", "acme-support", settings.DEMO_PASSWORD)

    assert response.status_code == 302
    assert client.session["_auth_user_id"]


def test_a_superuser_sees_the_lockout_in_the_admin_and_unlocks_it(demo, settings, user):
    from axes.models import AccessAttempt

    for _ in range(settings.AXES_FAILURE_LIMIT):
        sign_in(Client(), "/admin/login/", "acme-finance", WRONG)
    assert AccessAttempt.objects.filter(username="acme-finance").exists()
    admin = Client()
    admin.force_login(user("ops"))

    listing = admin.get("/admin/axes/accessattempt/")

    assert listing.status_code == 200
    assert "acme-finance" in listing.content.decode()
    # unlocking is deleting the attempts (the admin's delete action, or `manage.py axes_reset_username`)
    AccessAttempt.objects.filter(username="acme-finance").delete()
    assert sign_in(Client(), "/admin/login/", "acme-finance", settings.DEMO_PASSWORD).status_code == 302


@pytest.mark.parametrize(
    "password,error",
    [
        ("zq", "too short"),
        ("k7#pQ2!mZ9", "too short"),  # 10 characters
        ("password1234", "too common"),
        ("804917352661", "entirely numeric"),
    ],
)
def test_a_weak_password_is_refused_in_the_admin_and_no_user_is_made(demo, user, password, error):
    admin = Client()
    admin.force_login(user("ops"))

    response = admin.post(
        "/admin/auth/user/add/",
        {"username": "newcomer", "password1": password, "password2": password, "usable_password": "true"},
    )

    assert response.status_code == 200
    assert error in response.content.decode()
    assert not get_user_model().objects.filter(username="newcomer").exists()


def test_a_twelve_character_password_is_accepted(demo, user):
    admin = Client()
    admin.force_login(user("ops"))
    password = "k7#pQ2!mZ9wX"

    response = admin.post(
        "/admin/auth/user/add/",
        {"username": "newcomer", "password1": password, "password2": password, "usable_password": "true"},
    )

    assert response.status_code == 302
    assert get_user_model().objects.get(username="newcomer").check_password(password)
