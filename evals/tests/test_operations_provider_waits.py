"""The operations page counts the tenant's runs waiting out the model provider's 429/529 answers
now, and not a dead worker's stale mark nor another tenant's run."""

from datetime import timedelta

import pytest
from django.test import Client
from django.urls import reverse

from refundagent.services import ticket_create
from refundagent.tests.test_provider_outage_visible import run_waiting
from tests.factories import user_build


def waiting_count(page: str) -> str:
    panel = page.split('id="provider-waits"', 1)[1].split("</section>", 1)[0]
    return panel.split('class="big', 1)[1].split(">", 1)[1].split("<", 1)[0]


def file(user, django_capture_on_commit_callbacks):
    with django_capture_on_commit_callbacks(execute=False):  # the test marks the run itself
        return ticket_create(
            user=user,
            order="ORD-5001" if user.username.startswith("acme") else "ORD-7001",
            customer="CUST-1001" if user.username.startswith("acme") else "CUST-2001",
            message="Refund me.",
        )


@pytest.mark.parametrize(
    "lease_left, waited, shown",
    [
        (timedelta(seconds=60), timedelta(seconds=5), "1"),  # waiting now
        (timedelta(seconds=-1), timedelta(seconds=5), "0"),  # its worker died mid-wait
        (timedelta(seconds=60), timedelta(hours=1), "0"),  # older than any wait the loop allows
    ],
)
def test_the_operations_page_counts_the_runs_waiting_on_the_provider_now(
    demo, user, django_capture_on_commit_callbacks, lease_left, waited, shown
):
    operator = Client()
    operator.force_login(user_build(username="acme-operator", tenant=demo["acme"], roles=("operator",)))
    run_waiting(file(user("acme-support"), django_capture_on_commit_callbacks), lease_left=lease_left, waited=waited)
    # another tenant's waiting run is not this operator's
    run_waiting(
        file(user("globex-support"), django_capture_on_commit_callbacks),
        lease_left=timedelta(seconds=60),
        waited=timedelta(seconds=5),
    )

    page = operator.get(reverse("evals:operations")).content.decode()

    assert waiting_count(page) == shown
