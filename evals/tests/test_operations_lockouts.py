"""The operations page shows the tenant's operator which of its people django-axes has locked out
of signing in (and no other tenant's)."""

import pytest
from django.test import Client
from django.urls import reverse

from tests.factories import user_build

WRONG = "not-the-password"


@pytest.fixture(autouse=True)
def _limit(settings):
    settings.AXES_FAILURE_LIMIT = 5


def sign_in(client, url, username, password):
    return client.post(url, {"username": username, "password": password})


def test_the_tenants_operator_sees_its_locked_out_users_on_the_operations_page(demo, settings, user):
    operator = user_build(username="acme-operator", tenant=demo["acme"], roles=("operator",))
    for username in ("acme-finance", "globex-finance"):
        for _ in range(settings.AXES_FAILURE_LIMIT):
            sign_in(Client(), "/login/", username, WRONG)
    client = Client()
    client.force_login(operator)

    page = client.get(reverse("evals:operations")).content.decode()

    assert 'id="ops-lockouts"' in page
    assert "acme-finance" in page
    assert "globex-finance" not in page  # another tenant's people are not this operator's
