"""The operators' pages tell the truth (`issues show 11`): a run with no cases is "no cases" and
a failed gate, passing flags are not red, the suite menu lists each suite once, and operators
find the page from the navigation."""

import re

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
def passing_run():
    return eval_run_execute(suite="release_gate", trigger=EvalRun.Trigger.TEST, names=["in_window_over_request_capped"])


@pytest.fixture
def empty_run():
    return eval_run_execute(suite="release_gate", trigger=EvalRun.Trigger.TEST, names=["no-such-case"])


def test_a_run_with_no_cases_shows_no_cases_and_a_failed_gate(operator, passing_run, empty_run):
    # when the operator opens the trend page, the empty run being the last
    html = operator.get("/evals/").content.decode()
    # then its row says "no cases" and its gate FAILED, and its point sits at 0 %, marked failed
    row = re.search(rf'<tr>\s*<td><a href="[^"]+">#{empty_run.pk}</a></td>.*?</tr>', html, re.S).group(0)
    assert "no cases" in row and "FAILED" in row and "passed" not in row
    dot = re.search(
        rf'<circle class="dot failed"[^>]*cy="([\d.]+)"[^>]*><title>run #{empty_run.pk} [^<]*no cases', html
    )
    assert dot is not None and float(dot.group(1)) == 204.0  # the 0 % line (PAD_TOP 16 + plot 188)
    assert "No cases ran in this run" in html
    # and the admin's run list says so too
    runs = operator.get("/admin/evals/evalrun/").content.decode()
    assert "no cases" in runs


def test_passing_flags_are_not_shown_red(operator, passing_run):
    result = passing_run.results.get()
    assert result.passed and not result.false_allow
    for url in (
        "/admin/evals/evalresult/",
        f"/admin/evals/evalresult/{result.pk}/change/",
        f"/admin/evals/evalrun/{passing_run.pk}/change/",
    ):
        html = operator.get(url).content.decode()
        assert "icon-no.svg" not in html, url  # the stock red cross
        assert "ra-flag-clear" in html and "ra-flag-raised" not in html, url
    # and on the trend page a passing run has no red cell
    page = operator.get("/evals/").content.decode()
    row = re.search(rf'<tr>\s*<td><a href="[^"]+">#{passing_run.pk}</a></td>.*?</tr>', page, re.S).group(0)
    assert 'class="bad' not in row


def test_the_suite_menu_lists_each_suite_once(operator, passing_run, empty_run):
    EvalRun.objects.create(suite="tau_retail", provider="offline", passed=True, total=1)
    html = operator.get("/evals/").content.decode()
    menu = html.split('<select name="suite"', 1)[1].split("</select>", 1)[0]
    values = re.findall(r'<option value="([^"]*)"', menu)
    labels = re.findall(r">([^<]+)</option>", menu)
    assert len(values) == len(set(values)) and len(labels) == len(set(labels))
    assert {"", "release_gate", "tau_retail", "all"} <= set(values)
    # and the admin's result list has one suite filter, not two menus of the same names
    results = operator.get("/admin/evals/evalresult/").content.decode()
    assert results.count("By suite") == 1


def test_operators_get_an_evals_link_and_support_does_not(client, demo, user, make_user):
    from django.contrib.auth.models import Group

    # given the operator (staff): the support UI's navigation links the evals
    client.force_login(user("ops"))
    assert 'href="/evals/"' in client.get("/tickets/").content.decode()
    # an operator by role (support too, not staff) gets the link and the page
    operator = make_user("acme-operator", "support", tenant=user("acme-support").membership.tenant)
    operator.groups.add(Group.objects.get(name="operator"))
    client.force_login(operator)
    assert 'href="/evals/"' in client.get("/tickets/").content.decode()
    assert client.get("/evals/").status_code == 200
    # support does not
    client.force_login(user("acme-support"))
    assert 'href="/evals/"' not in client.get("/tickets/").content.decode()
    assert client.get("/evals/").status_code == 302
