"""Decisions: strict money in the API and the admin forms,
control characters, the admin's decision URL with a non-numeric id, and Idempotency-Key."""

import json
import threading

import pytest
from django.contrib import admin
from django.db import connection
from django.test import RequestFactory

from approvals.models import ApprovalRequest, ApprovalVote, RefundPolicy
from ledger.models import IdempotencyKey, RefundEntry

pytestmark = pytest.mark.django_db


def decide(client, request, *, headers=None, **body):
    body = {"decision": "approve", "args_hash": request.args_hash, **body}
    return client.post(
        f"/api/approvals/{request.pk}/decision", body, content_type="application/json", headers=headers or {}
    )


def written(request):
    request.refresh_from_db()
    return request.status, ApprovalVote.objects.count(), RefundEntry.objects.count(), IdempotencyKey.objects.count()


@pytest.mark.parametrize(
    "amount",
    ["1e30", "10000000000.00", 10**30, "６０", "٣", "1e3", "1_0", True, 60, 60.5, "-60.00", "NaN", "60.001"],
    ids=repr,
)
def test_a_bad_wanted_amount_is_a_422_and_nothing_is_decided(approval_request_make, api_client, amount):
    # given a pending request and finance
    request = approval_request_make(order="ORD-5001")
    before = written(request)
    # when finance asks for changes with that amount
    response = decide(
        api_client("acme-finance"), request, decision="request_changes", note="less", wanted_amount=amount
    )
    # then 422 naming wanted_amount; the request is still pending and nothing was written
    assert response.status_code == 422, response.content
    assert [e["field"] for e in response.json()["errors"]] == ["wanted_amount"]
    assert written(request) == before
    assert before[:2] == ("pending", 0)


def test_the_decision_schema_carries_the_money_pattern(client):
    schema = client.get("/api/openapi.json").json()
    wanted = schema["components"]["schemas"]["DecisionIn"]["properties"]["wanted_amount"]
    assert any(s.get("pattern") == r"^[0-9]{1,10}(\.[0-9]{1,2})?$" for s in wanted["anyOf"])


@pytest.mark.parametrize("field", ["note", "args_hash", "decision"])
def test_a_nul_in_a_decision_is_a_400_and_nothing_is_decided(approval_request_make, api_client, field):
    request = approval_request_make(order="ORD-5001")
    before = written(request)
    body = {"decision": "approve", "args_hash": request.args_hash, "note": "ok"}
    body[field] = body[field] + "\x00"
    response = api_client("acme-finance").post(
        f"/api/approvals/{request.pk}/decision", body, content_type="application/json"
    )
    assert response.status_code == 400
    assert response.json()["code"] == "control_character"
    assert written(request) == before


@pytest.mark.parametrize("content_type", ["text/plain", "application/x-www-form-urlencoded", ""])
def test_a_nul_escape_in_a_decision_sent_as_another_type_is_a_400(approval_request_make, api_client, content_type):
    # given a pending request
    request = approval_request_make(order="ORD-5001")
    before = written(request)
    # when finance decides with a \u0000 escape in the note, declared as something other than JSON
    body = json.dumps({"decision": "deny", "args_hash": request.args_hash, "note": "no\x00"})
    response = api_client("acme-finance").post(f"/api/approvals/{request.pk}/decision", body, content_type=content_type)
    # then 400 control_character: the request is still pending and nothing was written
    assert response.status_code == 400, response.content
    assert response.json()["code"] == "control_character"
    assert written(request) == before


def test_a_nul_in_the_admin_decision_form_is_a_400(approval_request_make, login):
    request = approval_request_make(order="ORD-5001")
    response = login("acme-finance").post(
        f"/admin/approvals/approvalrequest/{request.pk}/decide/approve/",
        {"args_hash": request.args_hash, "note": "ok\x00"},
    )
    assert response.status_code == 400
    assert written(request)[:2] == ("pending", 0)


@pytest.mark.parametrize("object_id", ["abc", "1abc", "١", "-1", "1.0", "99999999999999999999999"])
def test_a_non_numeric_or_unknown_id_in_the_admin_decision_view_is_a_404(demo, login, object_id):
    finance = login("acme-finance")
    assert finance.get(f"/admin/approvals/approvalrequest/{object_id}/decide/approve/").status_code == 404
    assert (
        finance.post(f"/admin/approvals/approvalrequest/{object_id}/decide/approve/", {"args_hash": "x"}).status_code
        == 404
    )


@pytest.mark.parametrize("amount", ["1e3", "６０", "10000000000.00", "1_0", "60.001"])
def test_the_admin_decision_form_refuses_a_bad_wanted_amount(approval_request_make, login, amount):
    request = approval_request_make(order="ORD-5001")
    response = login("acme-finance").post(
        f"/admin/approvals/approvalrequest/{request.pk}/decide/request_changes/",
        {"args_hash": request.args_hash, "note": "less", "wanted_amount": amount},
    )
    assert response.status_code == 422
    assert "wanted_amount" in response.context["form"].errors
    assert written(request)[:2] == ("pending", 0)


@pytest.mark.parametrize(
    "amount,valid", [("1e3", False), ("５００", False), ("10000000000.00", False), ("500", True), ("500.00", True)]
)
def test_the_policy_admin_form_takes_only_strict_money(demo, user, amount, valid):
    # given the policy admin's form for a new (draft) version
    model_admin = admin.site._registry[RefundPolicy]
    request = RequestFactory().get("/")
    request.user = user("ops")
    form_class = model_admin.get_form(request, None)
    field = form_class.base_fields.get("two_approver_threshold")
    assert field is not None
    # then the threshold parses strict money only
    if valid:
        assert field.clean(amount) is not None
    else:
        with pytest.raises(Exception):  # noqa: B017 - django's ValidationError
            field.clean(amount)


# --- Idempotency-Key on decisions -----------------------------------------------------------


def test_a_decision_replayed_with_its_key_decides_once(
    approval_request_make, api_client, django_capture_on_commit_callbacks
):
    request = approval_request_make(order="ORD-5001")
    finance = api_client("acme-finance")
    with django_capture_on_commit_callbacks(execute=True):
        first = decide(finance, request, note="ok", headers={"Idempotency-Key": "d-1"})
        again = decide(finance, request, note="ok", headers={"Idempotency-Key": "d-1"})
    assert first.status_code == again.status_code == 200
    assert again.content == first.content and again["Idempotent-Replayed"] == "true"
    assert ApprovalVote.objects.filter(request=request).count() == 1
    # a different decision under the same key is a 409, and nothing changes
    other = decide(finance, request, decision="deny", note="no", headers={"Idempotency-Key": "d-1"})
    assert other.status_code == 409 and other.json()["code"] == "idempotency_key_reused"
    assert ApprovalVote.objects.filter(request=request).count() == 1


@pytest.mark.django_db(transaction=True)
def test_concurrent_decisions_with_one_key_make_one_vote(approval_request_make, api_client):
    request = approval_request_make(order="ORD-5001")
    finance = api_client("acme-finance")
    barrier = threading.Barrier(6)
    responses = []

    def approve():
        try:
            barrier.wait()
            responses.append(decide(finance, request, note="ok", headers={"Idempotency-Key": "race"}))
        finally:
            connection.close()

    threads = [threading.Thread(target=approve) for _ in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert [r.status_code for r in responses] == [200] * 6
    assert len({r.content for r in responses}) == 1
    assert ApprovalVote.objects.filter(request=request).count() == 1
    assert ApprovalRequest.objects.get(pk=request.pk).status in {"approved", "executed"}


def test_a_wanted_amount_finer_than_the_currency_is_a_422(approval_request_make, api_client):
    request = approval_request_make(order="ORD-5001")
    ApprovalRequest.objects.filter(pk=request.pk).update(currency="JPY")
    before = written(request)
    response = decide(
        api_client("acme-finance"), request, decision="request_changes", note="less", wanted_amount="60.50"
    )
    assert response.status_code == 422
    assert response.json()["code"] == "amount_precision" and "wanted_amount" in response.json()["detail"]
    assert written(request) == before
