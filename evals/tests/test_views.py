"""The operators' page and the admin show the runs."""

import pytest
from django.contrib import admin
from django.contrib.auth import get_user_model
from django.utils.dateformat import format as date_format
from django.utils.timezone import localtime

from evals.models import EvalRun
from ledger.admin import StrictChangeListAdminMixin
from refundagent.labels import DATETIME_FORMAT

pytestmark = pytest.mark.django_db


@pytest.fixture
def runs():
    from evals.services import eval_run_execute

    return [
        eval_run_execute(suite="release_gate", trigger=EvalRun.Trigger.TEST, names=names)
        for names in (["in_window_over_request_capped"], ["out_of_window_escalated", "fully_refunded_order"])
    ]


@pytest.fixture
def staff_client(client):
    user = get_user_model().objects.create_superuser("evals-op", "op@example.com", "pw-evals-op")
    client.force_login(user)
    return client


def test_dashboard_shows_the_trend_chart_and_last_failures(staff_client, runs):
    from evals.models import EvalResult

    EvalResult.objects.filter(run=runs[-1], case__name="fully_refunded_order").update(
        passed=False, failures=["stop_reason 'x', expected denied"]
    )
    page = staff_client.get("/evals/")
    assert page.status_code == 200
    html = page.content.decode()
    assert "<svg" in html and "<polyline" in html and html.count("<circle") == 2
    assert "fully_refunded_order" in html and "stop_reason &#x27;x&#x27;" in html
    assert "<script" not in html.split("<svg", 1)[1].split("</svg>", 1)[0]


def test_dashboard_is_staff_only(client, runs):
    assert client.get("/evals/").status_code == 302


def test_admin_lists_runs_and_results_with_their_traces(staff_client, runs):
    result = runs[0].results.get()
    assert staff_client.get("/admin/evals/evalrun/?passed__exact=1").status_code == 200
    detail = staff_client.get(f"/admin/evals/evalrun/{runs[0].pk}/change/")
    assert detail.status_code == 200 and b"in_window_over_request_capped" in detail.content
    assert staff_client.get("/admin/evals/evalresult/?passed__exact=0").status_code == 200
    page = staff_client.get(f"/admin/evals/evalresult/{result.pk}/change/")
    assert page.status_code == 200 and b"trace.json" in page.content
    trace = staff_client.get(f"/evals/results/{result.pk}/trace.json").json()
    assert trace["events"] == result.trace and trace["events"][0]["span"] == "run"
    assert staff_client.get("/admin/evals/evalcase/?suite=release_gate").status_code == 200


def test_run_times_use_the_one_date_format_with_its_time_zone(staff_client, runs):
    html = staff_client.get("/evals/").content.decode()
    shown = date_format(localtime(runs[0].started_at), DATETIME_FORMAT)
    assert shown.endswith(" UTC") and shown in html


@pytest.mark.parametrize(
    "query,status",
    [
        ("started_at__year=99999999999999999999", 302),  # the date hierarchy: OverflowError before
        ("started_at__year=9999", 302),  # the year after 9999: ValueError before
        ("started_at__year=0", 302),
        ("suite__regex=(", 400),  # a pattern: refused
    ],
)
def test_a_bad_run_filter_is_a_4xx_not_a_500(staff_client, query, status):
    staff_client.raise_request_exception = False

    response = staff_client.get(f"/admin/evals/evalrun/?{query}")

    assert response.status_code == status


def test_every_admin_of_the_project_checks_its_changelist_input():
    # A querystring lookup that cannot run, or an action on ids that are not ids, is a 4xx in
    # every admin of ours (ledger.admin.StrictChangeListAdminMixin), not only in those tested by URL.
    ours = {"ledger", "approvals", "refundagent", "evals"}
    admins = {
        model: model_admin for model, model_admin in admin.site._registry.items() if model._meta.app_label in ours
    }

    unchecked = sorted(
        m.__name__ for m, model_admin in admins.items() if not isinstance(model_admin, StrictChangeListAdminMixin)
    )

    assert len(admins) > 20 and unchecked == []
