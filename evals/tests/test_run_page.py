"""An eval run has a readable page of its own (/evals/runs/<id>/): the gate's verdict, the
metrics as a table of names and values (not raw JSON), and every case's result; the operators'
pages link to it instead of the stock admin."""

import pytest
from django.contrib.auth import get_user_model

from evals.models import EvalRun
from evals.services import eval_run_execute

pytestmark = pytest.mark.django_db


@pytest.fixture
def operator(client):
    user = get_user_model().objects.create_superuser("evals-op", "op@example.com", "pw-evals-op")
    client.force_login(user)
    return client


@pytest.fixture
def run():
    return eval_run_execute(suite="release_gate", trigger=EvalRun.Trigger.TEST, names=["in_window_over_request_capped"])


def test_the_run_page_shows_the_gate_metrics_and_results_in_words(operator, run):
    response = operator.get(f"/evals/runs/{run.pk}/")
    html = response.content.decode()
    assert response.status_code == 200
    assert "Release gate" in html and ("passed" in html or "FAILED" in html)
    metrics = html.split('id="run-metrics"', 1)[1].split("</table>", 1)[0]
    assert "Pass rate" in metrics and "False allows" in metrics and "{" not in metrics
    results = html.split('id="run-results"', 1)[1].split("</table>", 1)[0]
    assert "in_window_over_request_capped" in results


def test_the_operators_pages_link_runs_to_their_page(operator, run, client, user):
    html = operator.get("/evals/").content.decode()
    assert f'href="/evals/runs/{run.pk}/"' in html
    assert f"/admin/evals/evalrun/{run.pk}/change/" not in html
    # the operator dashboard (ops belongs to a shop) links its last run there too
    client.force_login(user("ops"))
    html = client.get("/evals/operations/").content.decode()
    assert f'href="/evals/runs/{run.pk}/"' in html and "/admin/evals/evalrun/" not in html


def test_an_unknown_run_is_a_404_and_others_may_not_look(operator, run, client, user):
    assert operator.get("/evals/runs/999999/").status_code == 404
    client.force_login(user("acme-support"))
    assert client.get(f"/evals/runs/{run.pk}/").status_code in (302, 403)
